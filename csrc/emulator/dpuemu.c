/* pimloader libdpu emulator: the host API of dpu.h over emulated DPUs.
 *
 * Design (see csrc/emulator/README.md):
 * - a kernel is the unchanged DPU C source compiled by the host gcc into a shared object
 *   (pimloader._emulator.compile_kernel), with the DPU runtime headers of dpu_include/ and
 *   the linker script mram.ld, which makes a 64 MB zero-fill block of the object the MRAM;
 * - dpu_load gives every DPU a private copy of that object (one memfd + dlopen each), so each
 *   DPU has its own globals (its WRAM variables) and its own MRAM, mapped lazily;
 * - dpu_launch runs each DPU as NR_TASKLETS host threads calling the kernel's main(); a pool
 *   of worker threads runs DPUs in parallel;
 * - the runtime services (mram_read/write, barriers, mutexes, mem_alloc, perfcounter,
 *   printf) come back here through a table of function pointers, where every hardware rule
 *   is checked: a violation faults the DPU, which stops all its tasklets.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dpu.h"
#include "dpu_emulator.h"
#include "../dpu_include/dpuemu_rt.h"

#define MRAM_SIZE DPUEMU_MRAM_SIZE
#define WRAM_SIZE DPUEMU_WRAM_SIZE
#define MAX_TASKLETS DPUEMU_MAX_TASKLETS
#define DMA_MAX 2048u
#define MAX_WRAM_RANGES 16
#define TASKLET_HOST_STACK (512u << 10)
#define ALT_STACK_SIZE (64u << 10)
#define LOG_CAP (1u << 20)
#define DEFAULT_NR_DPUS 64u
#define DEFAULT_DPUS_PER_RANK 64u
#define DEFAULT_JOBS_PER_RANK 16u /* libdpu: NR_JOBS_PER_RANK_DEFAULT (dpu_management.c) */

/* ------------------------------------------------------------------------------------------ */
/* Data structures                                                                            */

struct dpu_program_t {
    struct dpu_t *owner; /* the DPU whose copy answers symbol look-ups */
};

struct emu_image { /* one DPU's private copy of the kernel */
    void *handle;
    int fd;
    uintptr_t base;
    uint8_t *mram;     /* __dpuemu_mram_begin */
    uint8_t *mram_end; /* mram + MRAM_SIZE */
    uint8_t *heap_ptr; /* __sys_used_mram_end */
    int (*main)(void);
    uint32_t nr_tasklets;
    uint32_t stack_size;
    uint32_t globals_bytes;
    uintptr_t wram_lo[MAX_WRAM_RANGES], wram_hi[MAX_WRAM_RANGES];
    int nr_wram_ranges;
};

#define MAX_HOST_WRAM_WRITES 32
struct host_wram_write { /* [offset, offset + length) of the image, a WRAM symbol the host wrote */
    uintptr_t offset;
    uint32_t length;
};

struct dpu_t {
    struct dpu_rank_t *rank;
    uint32_t index;     /* in the rank */
    uint32_t global_id; /* in the allocation */
    struct dpu_program_t program;
    struct emu_image image;
    uint64_t load_id; /* which dpu_load call loaded it; 0: none */
    bool load_fault;  /* the program breaks a rule at load: launching it faults */

    pthread_mutex_t mtx; /* run state, barriers, mutexes, heap, log */
    pthread_cond_t cond;
    bool running;  /* atomic: set by the launch job, cleared when the DPU stops */
    bool faulted;  /* written under mtx, read atomically */
    char fault_msg[640];
    struct tasklet *tasklets; /* of the current run */
    uint32_t nr_run;

    uint8_t *wram; /* WRAM_SIZE bytes: the mem_alloc heap lives at its end */
    uint32_t static_bytes, heap_start, heap_cur;

    int perf_mode;
    uint64_t perf_base_cycles, perf_base_instr;
    uint64_t dma_cycles, dma_instr; /* atomics */

    char *log;
    size_t log_len;
    bool log_truncated;

    void *xfer_buffer;
    struct dpuemu_counters ctr;
    uint64_t host_mram_end, kernel_mram_end; /* for DPUEMU_TRACE_DIR: MRAM written so far by the host, by kernels */
    struct host_wram_write host_wram[MAX_HOST_WRAM_WRITES]; /* WRAM the host wrote since the load, for the trace */
    uint32_t nr_host_wram;
    bool host_wram_overflow;
};

struct emu_job;

/* A rank and its job FIFO (libdpu: rank->api.jobs, run by the rank's thread in
 * dpu_thread_job.c).  Every operation on a rank is a job; a rank runs its jobs one after
 * the other, ranks run theirs independently. */
struct dpu_rank_t {
    uint32_t id;
    uint32_t nr_dpus;
    struct dpu_t *dpus;
    struct emu_alloc *alloc;

    pthread_mutex_t qm; /* guards everything below */
    pthread_cond_t qc;  /* a job was added or finished, a slot freed */
    struct emu_job *head, *tail;
    uint32_t nr_jobs;   /* reserved + queued + running (libdpu: nrJobsPerRank slots) */
    dpu_error_t job_error; /* sticky error of a failed job (libdpu: rank->api.job_error) */
    bool stop;
    bool has_worker;
    pthread_t worker;
    uint32_t nr_running; /* DPUs of the rank running now (atomic) */
    bool held;           /* dpuemu_hold_launches: its launched DPUs wait to start (alloc->run_m) */
};

struct emu_alloc {
    uint32_t nr_ranks;
    struct dpu_rank_t **rank_list; /* what the set's list.ranks points to */
    struct dpu_rank_t *ranks;
    uint32_t parallel_dpus;
    uint32_t max_jobs;           /* job slots per rank (profile nrJobsPerRank, libdpu default 16) */
    pthread_mutex_t run_m;       /* at most parallel_dpus DPUs run at once, over all ranks */
    pthread_cond_t run_c;
    uint32_t run_free;
    pid_t pid; /* the process whose threads run the queues (a forked child has none of them) */
};

enum { WAIT_NONE, WAIT_BARRIER, WAIT_MUTEX };

struct tasklet {
    struct dpu_t *dpu;
    uint32_t id;
    bool alive;      /* these four: guarded by dpu->mtx */
    int wait_kind;
    void *wait_obj;
    uint16_t wait_gen;
    pthread_t thread;
    sigjmp_buf jmp;
    uintptr_t stack_lo, stack_hi;
    void *alt_stack;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* load counter */
static uint64_t g_load_counter;
static __thread struct tasklet *tl_self;
static __thread struct dpu_rank_t *tl_worker_rank; /* the rank whose job this thread runs */

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */

static const char *error_text_of(dpu_error_t status)
{
    switch (status) {
        case DPU_OK: return "success";
        case DPU_ERR_INTERNAL: return "internal error";
        case DPU_ERR_SYSTEM: return "system error (out of memory, thread or file failure)";
        case DPU_ERR_DRIVER: return "driver error";
        case DPU_ERR_ALLOCATION: return "cannot allocate the requested DPUs";
        case DPU_ERR_INVALID_DPU_SET: return "invalid DPU set for this operation";
        case DPU_ERR_INVALID_THREAD_ID: return "invalid thread id";
        case DPU_ERR_INVALID_NOTIFY_ID: return "invalid notify id";
        case DPU_ERR_INVALID_WRAM_ACCESS: return "invalid WRAM access";
        case DPU_ERR_INVALID_IRAM_ACCESS: return "invalid IRAM access";
        case DPU_ERR_INVALID_MRAM_ACCESS: return "invalid MRAM access";
        case DPU_ERR_INVALID_SYMBOL_ACCESS: return "invalid symbol access (offset + length beyond the symbol)";
        case DPU_ERR_MRAM_BUSY: return "MRAM busy";
        case DPU_ERR_TRANSFER_ALREADY_SET: return "transfer already set";
        case DPU_ERR_NO_PROGRAM_LOADED: return "no program loaded";
        case DPU_ERR_DIFFERENT_DPU_PROGRAMS: return "the DPUs of the set run different programs";
        case DPU_ERR_CORRUPTED_MEMORY: return "corrupted memory";
        case DPU_ERR_DPU_DISABLED: return "DPU disabled";
        case DPU_ERR_DPU_ALREADY_RUNNING: return "DPU already running";
        case DPU_ERR_INVALID_MEMORY_TRANSFER: return "invalid memory transfer";
        case DPU_ERR_INVALID_LAUNCH_POLICY: return "invalid launch policy";
        case DPU_ERR_DPU_FAULT: return "DPU fault";
        case DPU_ERR_ELF_INVALID_FILE: return "invalid DPU program file";
        case DPU_ERR_ELF_NO_SUCH_FILE: return "DPU program file not found";
        case DPU_ERR_ELF_NO_SUCH_SECTION: return "section not found in the DPU program";
        case DPU_ERR_TIMEOUT: return "timeout";
        case DPU_ERR_INVALID_PROFILE: return "invalid profile";
        case DPU_ERR_UNKNOWN_SYMBOL: return "unknown symbol";
        case DPU_ERR_LOG_FORMAT: return "log format error";
        case DPU_ERR_LOG_CONTEXT_MISSING: return "log context missing";
        case DPU_ERR_LOG_BUFFER_TOO_SMALL: return "log buffer too small";
        case DPU_ERR_VPD_INVALID_FILE: return "invalid VPD file";
        case DPU_ERR_VPD_NO_REPAIR: return "no VPD repair";
        case DPU_ERR_NO_THREAD_PER_RANK: return "no thread per rank";
        case DPU_ERR_INVALID_BUFFER_SIZE: return "invalid buffer size";
        case DPU_ERR_NONBLOCKING_SYNC_CALLBACK: return "non-blocking synchronous callback";
        default: return "unknown error";
    }
}

/* libdpu's job types (dpu_rank.h: enum dpu_thread_job_type), in its order: a failed
 * asynchronous job leaves DPU_ERR_ASYNC_JOBS | type << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT | error. */
enum job_type {
    JOB_LAUNCH_RANK,
    JOB_LAUNCH_DPU,
    JOB_SYNC,
    JOB_COPY_WRAM_TO_MATRIX,
    JOB_COPY_IRAM_TO_MATRIX,
    JOB_COPY_MRAM_TO_MATRIX,
    JOB_COPY_WRAM_FROM_MATRIX,
    JOB_COPY_IRAM_FROM_MATRIX,
    JOB_COPY_MRAM_FROM_MATRIX,
    JOB_COPY_WRAM_TO_RANK,
    JOB_COPY_IRAM_TO_RANK,
    JOB_COPY_MRAM_TO_RANK,
    JOB_CALLBACK,
    JOB_LOAD,
};

static const char *job_type_name(uint32_t type)
{
    static const char *const names[] = { "launch_rank", "launch_dpu", "synchronization", "copy_wram_to_matrix",
        "copy_iram_to_matrix", "copy_mram_to_matrix", "copy_wram_from_matrix", "copy_iram_from_matrix",
        "copy_mram_from_matrix", "copy_wram_to_rank", "copy_iram_to_rank", "copy_mram_to_rank", "callback", "load" };
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

/* As the SDK's (dpu_error.c), which formats an asynchronous job's error as
 * "asynchronous operation error (<job>): <error> (0x<bits>)"; the SDK returns a string the
 * caller frees, the emulator a constant or a thread-local buffer. */
const char *dpu_error_to_string(dpu_error_t status)
{
    if ((uint32_t)status & (uint32_t)DPU_ERR_ASYNC_JOBS) {
        static __thread char text[160];
        uint32_t bits = (uint32_t)status & ~(uint32_t)DPU_ERR_ASYNC_JOBS;
        uint32_t type = bits >> DPU_ERROR_ASYNC_JOB_TYPE_SHIFT;
        dpu_error_t error = (dpu_error_t)(bits & ((1u << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT) - 1));
        snprintf(text, sizeof text, "asynchronous operation error (%s): %s (0x%x)", job_type_name(type),
            error_text_of(error), bits);
        return text;
    }
    return error_text_of(status);
}

/* ------------------------------------------------------------------------------------------ */
/* Log and faults                                                                             */

static void log_append_locked(struct dpu_t *d, const char *text, size_t n)
{
    if (d->log_truncated) return;
    if (d->log == NULL) {
        d->log = malloc(LOG_CAP);
        if (d->log == NULL) return;
    }
    if (d->log_len + n >= LOG_CAP) {
        n = LOG_CAP - 1 - d->log_len;
        d->log_truncated = true;
    }
    memcpy(d->log + d->log_len, text, n);
    d->log_len += n;
    d->log[d->log_len] = 0;
}

/* Records the first fault of the DPU (d->mtx held) and wakes every blocked tasklet. */
static void fault_locked(struct dpu_t *d, int tasklet, const char *rule, const char *detail, const char *file, int line)
{
    if (!d->faulted) {
        char where[96] = "";
        char who[48];
        if (file != NULL && line > 0) snprintf(where, sizeof where, " [%s:%d]", file, line);
        if (tasklet >= 0) snprintf(who, sizeof who, "tasklet %d", tasklet);
        else snprintf(who, sizeof who, "at load");
        snprintf(d->fault_msg, sizeof d->fault_msg, "DPU fault: rule '%s' broken on DPU %u (rank %u, DPU %u of the rank), %s: %s%s",
            rule, d->global_id, d->rank->id, d->index, who, detail, where);
        __atomic_store_n(&d->faulted, true, __ATOMIC_RELEASE);
        log_append_locked(d, d->fault_msg, strlen(d->fault_msg));
        log_append_locked(d, "\n", 1);
    }
    pthread_cond_broadcast(&d->cond);
}

static inline bool is_faulted(struct dpu_t *d)
{
    return __atomic_load_n(&d->faulted, __ATOMIC_ACQUIRE);
}

/* Ends the calling tasklet (the DPU is in fault).  d->mtx must not be held. */
__attribute__((noreturn)) static void tasklet_stop(struct tasklet *t)
{
    siglongjmp(t->jmp, 1);
}

__attribute__((noreturn, format(printf, 5, 6))) static void tasklet_fault(
    struct tasklet *t, const char *rule, const char *file, int line, const char *fmt, ...)
{
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&t->dpu->mtx);
    fault_locked(t->dpu, (int)t->id, rule, detail, file, line);
    pthread_mutex_unlock(&t->dpu->mtx);
    tasklet_stop(t);
}

static struct tasklet *self_or_die(void)
{
    struct tasklet *t = tl_self;
    if (t == NULL) {
        /* a runtime function called outside a tasklet (e.g. from a kernel constructor) */
        fprintf(stderr, "pimloader DPU emulator: DPU runtime function called outside a tasklet\n");
        abort();
    }
    if (is_faulted(t->dpu)) tasklet_stop(t);
    return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Runtime services called by kernels                                                         */

static unsigned int rt_me(void)
{
    return self_or_die()->id;
}

/* The host address of the MRAM range [mram, mram + n), or NULL when it is outside the DPU's
 * 64 MB.  An MRAM address is either a host pointer into the DPU's MRAM or its low 32 bits
 * (DPU code keeps MRAM addresses in uint32_t, as in PrIM). */
static uint8_t *mram_host(struct emu_image *im, const void *mram, unsigned int n, uint64_t *offset)
{
    uintptr_t p = (uintptr_t)mram;
    uintptr_t begin = (uintptr_t)im->mram;
    uint64_t off;
    if (p >= begin && p < begin + MRAM_SIZE) off = p - begin;
    else if (p <= 0xffffffffu) off = (uint32_t)((uint32_t)p - (uint32_t)begin);
    else off = UINT64_MAX;
    *offset = off;
    if (off >= MRAM_SIZE || off + n > MRAM_SIZE) return NULL;
    return im->mram + off;
}

static bool in_wram(struct tasklet *t, const void *wram, unsigned int n)
{
    uintptr_t lo = (uintptr_t)wram, hi = lo + n;
    struct dpu_t *d = t->dpu;
    if (lo >= (uintptr_t)d->wram && hi <= (uintptr_t)d->wram + WRAM_SIZE) return true;
    if (lo >= t->stack_lo && hi <= t->stack_hi) return true;
    for (int i = 0; i < d->image.nr_wram_ranges; ++i)
        if (lo >= d->image.wram_lo[i] && hi <= d->image.wram_hi[i]) return true;
    return false;
}

static uint8_t *check_dma(struct tasklet *t, const char *op, const void *wram, const void *mram, unsigned int n,
    const char *file, int line)
{
    struct emu_image *im = &t->dpu->image;
    if (n < 8 || n > DMA_MAX)
        tasklet_fault(t, "DMA size out of [8, 2048] bytes", file, line, "%s of %u bytes", op, n);
    if (n % 8 != 0)
        tasklet_fault(t, "DMA size not a multiple of 8", file, line, "%s of %u bytes", op, n);
    uint64_t off;
    uint8_t *m = mram_host(im, mram, n, &off);
    if ((uintptr_t)mram % 8 != 0)
        tasklet_fault(t, "MRAM address not 8-byte aligned", file, line, "%s at MRAM address %p (offset %llu)", op, mram,
            (unsigned long long)off);
    if ((uintptr_t)wram % 8 != 0)
        tasklet_fault(t, "WRAM address not 8-byte aligned", file, line, "%s with WRAM address %p", op, wram);
    if (m == NULL) {
        if (off == UINT64_MAX)
            tasklet_fault(t, "MRAM access out of bounds", file, line, "%s at %p: not an MRAM address", op, mram);
        tasklet_fault(t, "MRAM access out of bounds", file, line, "%s of %u bytes at MRAM offset %llu (MRAM holds %u bytes)", op,
            n, (unsigned long long)off, MRAM_SIZE);
    }
    if (!in_wram(t, wram, n))
        tasklet_fault(t, "WRAM access out of bounds", file, line,
            "%s of %u bytes with WRAM address %p, outside the DPU's WRAM (globals, stack, heap)", op, n, wram);
    return m;
}

/* *end = max(*end, value), atomically. */
static void raise_end(uint64_t *end, uint64_t value)
{
    uint64_t seen = __atomic_load_n(end, __ATOMIC_RELAXED);
    while (seen < value && !__atomic_compare_exchange_n(end, &seen, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

/* Notes that the host wrote [p, p + length) of a WRAM symbol (a __host variable). */
static void note_host_wram(struct dpu_t *d, const uint8_t *p, uint32_t length)
{
    const uintptr_t offset = (uintptr_t)p - d->image.base;
    for (uint32_t i = 0; i < d->nr_host_wram; ++i)
        if (d->host_wram[i].offset == offset && d->host_wram[i].length == length) return;
    if (d->nr_host_wram == MAX_HOST_WRAM_WRITES) {
        d->host_wram_overflow = true;
        return;
    }
    d->host_wram[d->nr_host_wram++] = (struct host_wram_write){ offset, length };
}

/* launchN-rankR-dpuD-wram.txt: each WRAM range the host wrote since the load, as the run
 * starts with it, one line "SYMBOL OFFSET HEXBYTES" (the symbol the range lies in, the
 * offset into it); "overflow" when more ranges were written than are kept. */
static void trace_host_wram(struct dpu_t *d, const char *dir, uint64_t launch)
{
    if (d->nr_host_wram == 0 && !d->host_wram_overflow) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/launch%06llu-rank%u-dpu%u-wram.txt", dir, (unsigned long long)launch,
        d->rank->id, d->index);
    FILE *f = fopen(path, "w");
    if (f == NULL) return;
    if (d->host_wram_overflow) fprintf(f, "overflow\n");
    for (uint32_t i = 0; i < d->nr_host_wram; ++i) {
        const uint8_t *p = (const uint8_t *)(d->image.base + d->host_wram[i].offset);
        Dl_info info;
        const bool named = dladdr(p, &info) && info.dli_sname != NULL && info.dli_saddr != NULL;
        fprintf(f, "%s %llu ", named ? info.dli_sname : "?",
            named ? (unsigned long long)(p - (const uint8_t *)info.dli_saddr) : 0ull);
        for (uint32_t k = 0; k < d->host_wram[i].length; ++k) fprintf(f, "%02x", p[k]);
        fprintf(f, "\n");
    }
    fclose(f);
}

/* With DPUEMU_TRACE_DIR set, each run of a DPU leaves its MRAM before and after the run, up
 * to the last byte the host or any kernel run wrote so far (a run may read what an earlier
 * run left, and leaves unwritten bytes as they were): launchN-rankR-dpuD-{in,out}.bin, and the
 * run's tasklet count in launchN-rankR-dpuD.tasklets.  The WRAM symbols the host wrote since
 * the program was loaded (__host variables: a kernel's arguments) go, as the run starts with
 * them, to launchN-rankR-dpuD-wram.txt (trace_host_wram).  csrc/proxy's instruction counts
 * replay them (pimloader/costmodel/proxy.py).  WRAM the kernel leaves is not traced. */
static void trace_mram(struct dpu_t *d, const char *stage, uint64_t end)
{
    static uint64_t launches;
    static __thread uint64_t launch;
    const char *dir = getenv("DPUEMU_TRACE_DIR");
    if (dir == NULL) return;
    if (strcmp(stage, "in") == 0) {
        launch = __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
        trace_host_wram(d, dir, launch);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/launch%06llu-rank%u-dpu%u-%s.bin", dir, (unsigned long long)launch, d->rank->id,
        d->index, stage);
    FILE *f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(d->image.mram, 1, end, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/launch%06llu-rank%u-dpu%u.tasklets", dir, (unsigned long long)launch, d->rank->id,
        d->index);
    f = fopen(path, "w");
    if (f != NULL) {
        fprintf(f, "%u\n", d->image.nr_tasklets);
        fclose(f);
    }
}

static void count_dma(struct dpu_t *d, uint32_t id, unsigned int n, bool write)
{
    struct dpuemu_tasklet_counters *c = &d->ctr.tasklet[id];
    if (write) {
        c->mram_write_calls++;
        c->mram_write_bytes += n;
    } else {
        c->mram_read_calls++;
        c->mram_read_bytes += n;
    }
    __atomic_add_fetch(&d->dma_cycles, (uint64_t)(write ? 61 : 77) + (n + 1) / 2, __ATOMIC_RELAXED);
    __atomic_add_fetch(&d->dma_instr, 1, __ATOMIC_RELAXED);
}

static void rt_ldma(void *to, const void *from, unsigned int n, const char *file, int line)
{
    struct tasklet *t = self_or_die();
    uint8_t *m = check_dma(t, "mram_read", to, from, n, file, line);
    memcpy(to, m, n);
    count_dma(t->dpu, t->id, n, false);
}

static void rt_sdma(const void *from, void *to, unsigned int n, const char *file, int line)
{
    struct tasklet *t = self_or_die();
    uint8_t *m = check_dma(t, "mram_write", from, to, n, file, line);
    memcpy(m, from, n);
    raise_end(&t->dpu->kernel_mram_end, (uint64_t)(m + n - t->dpu->image.mram));
    count_dma(t->dpu, t->id, n, true);
}

struct emu_barrier {
    uint8_t count, initial_count;
    uint16_t generation;
};

/* With d->mtx held: when every live tasklet waits for a barrier round or a mutex that
 * cannot come (no live tasklet is free to run), the DPU would hang forever: fault. */
static void check_deadlock_locked(struct dpu_t *d, int tasklet, const char *why)
{
    if (d->faulted || d->tasklets == NULL) return;
    uint32_t alive = 0;
    for (uint32_t i = 0; i < d->nr_run; ++i) {
        struct tasklet *t = &d->tasklets[i];
        if (!t->alive) continue;
        alive++;
        if (t->wait_kind == WAIT_NONE) return;
        if (t->wait_kind == WAIT_BARRIER && ((struct emu_barrier *)t->wait_obj)->generation != t->wait_gen) return;
        if (t->wait_kind == WAIT_MUTEX && *(uint8_t *)t->wait_obj == 0) return;
    }
    if (alive == 0) return;
    char detail[240];
    snprintf(detail, sizeof detail, "%s; all %u running tasklets wait on a barrier or mutex that no tasklet can release", why,
        alive);
    fault_locked(d, tasklet, "deadlock", detail, NULL, 0);
}

static void rt_barrier_wait(void *barrier, const char *file, int line)
{
    struct tasklet *t = self_or_die();
    struct dpu_t *d = t->dpu;
    struct emu_barrier *b = barrier;
    pthread_mutex_lock(&d->mtx);
    if (b->initial_count == 0 || b->initial_count > d->image.nr_tasklets) {
        char detail[128];
        snprintf(detail, sizeof detail, "barrier for %u tasklets with NR_TASKLETS=%u", b->initial_count, d->image.nr_tasklets);
        fault_locked(d, (int)t->id, "barrier count", detail, file, line);
    }
    if (!d->faulted) {
        if (--b->count == 0) {
            b->count = b->initial_count;
            b->generation++;
            pthread_cond_broadcast(&d->cond);
        } else {
            t->wait_kind = WAIT_BARRIER;
            t->wait_obj = b;
            t->wait_gen = b->generation;
            check_deadlock_locked(d, (int)t->id, "barrier_wait");
            while (b->generation == t->wait_gen && !d->faulted) pthread_cond_wait(&d->cond, &d->mtx);
            t->wait_kind = WAIT_NONE;
        }
    }
    bool stop = d->faulted;
    pthread_mutex_unlock(&d->mtx);
    if (stop) tasklet_stop(t);
}

static void rt_mutex_lock(uint8_t *m)
{
    struct tasklet *t = self_or_die();
    struct dpu_t *d = t->dpu;
    pthread_mutex_lock(&d->mtx);
    while (*m && !d->faulted) {
        t->wait_kind = WAIT_MUTEX;
        t->wait_obj = m;
        check_deadlock_locked(d, (int)t->id, "mutex_lock");
        if (!d->faulted) pthread_cond_wait(&d->cond, &d->mtx);
        t->wait_kind = WAIT_NONE;
    }
    bool stop = d->faulted;
    if (!stop) *m = 1;
    pthread_mutex_unlock(&d->mtx);
    if (stop) tasklet_stop(t);
}

static bool rt_mutex_trylock(uint8_t *m)
{
    struct tasklet *t = self_or_die();
    pthread_mutex_lock(&t->dpu->mtx);
    bool got = *m == 0;
    if (got) *m = 1;
    pthread_mutex_unlock(&t->dpu->mtx);
    return got;
}

static void rt_mutex_unlock(uint8_t *m)
{
    struct tasklet *t = self_or_die();
    pthread_mutex_lock(&t->dpu->mtx);
    *m = 0;
    pthread_cond_broadcast(&t->dpu->cond);
    pthread_mutex_unlock(&t->dpu->mtx);
}

static void *rt_mem_alloc(size_t size, const char *file, int line)
{
    struct tasklet *t = self_or_die();
    struct dpu_t *d = t->dpu;
    pthread_mutex_lock(&d->mtx);
    uint64_t need = ((uint64_t)size + 7u) & ~(uint64_t)7u;
    if ((uint64_t)d->heap_cur + need > WRAM_SIZE) {
        char detail[320];
        snprintf(detail, sizeof detail,
            "mem_alloc(%zu) needs WRAM up to byte %llu; WRAM holds %u bytes: globals %u + %u tasklets x %u-byte stacks, "
            "heap already %u bytes",
            size, (unsigned long long)(d->heap_cur + need), WRAM_SIZE, d->image.globals_bytes, d->image.nr_tasklets,
            d->image.stack_size, d->heap_cur - d->heap_start);
        fault_locked(d, (int)t->id, "WRAM over budget", detail, file, line);
        pthread_mutex_unlock(&d->mtx);
        tasklet_stop(t);
    }
    void *p = d->wram + d->heap_cur;
    d->heap_cur += (uint32_t)need;
    if (d->heap_cur > d->ctr.wram_heap_peak) d->ctr.wram_heap_peak = d->heap_cur;
    pthread_mutex_unlock(&d->mtx);
    return p;
}

static void *rt_mem_reset(void)
{
    struct tasklet *t = self_or_die();
    pthread_mutex_lock(&t->dpu->mtx);
    t->dpu->heap_cur = t->dpu->heap_start;
    void *p = t->dpu->wram + t->dpu->heap_start;
    pthread_mutex_unlock(&t->dpu->mtx);
    return p;
}

static uint64_t perf_value(struct dpu_t *d)
{
    switch (d->perf_mode) {
        case 1: return __atomic_load_n(&d->dma_cycles, __ATOMIC_RELAXED) - d->perf_base_cycles;
        case 2: return __atomic_load_n(&d->dma_instr, __ATOMIC_RELAXED) - d->perf_base_instr;
        default: return 0;
    }
}

static uint64_t rt_perfcounter_get(void)
{
    struct tasklet *t = self_or_die();
    pthread_mutex_lock(&t->dpu->mtx);
    uint64_t v = perf_value(t->dpu);
    pthread_mutex_unlock(&t->dpu->mtx);
    return v;
}

static uint64_t rt_perfcounter_config(int config, bool reset)
{
    struct tasklet *t = self_or_die();
    struct dpu_t *d = t->dpu;
    pthread_mutex_lock(&d->mtx);
    uint64_t v = perf_value(d);
    if (config >= 1 && config <= 3) d->perf_mode = config;
    if (reset) {
        d->perf_base_cycles = __atomic_load_n(&d->dma_cycles, __ATOMIC_RELAXED);
        d->perf_base_instr = __atomic_load_n(&d->dma_instr, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&d->mtx);
    return v;
}

static void rt_vprint(const char *format, va_list args)
{
    struct tasklet *t = self_or_die();
    char buf[1024];
    int n = vsnprintf(buf, sizeof buf, format, args);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    pthread_mutex_lock(&t->dpu->mtx);
    log_append_locked(t->dpu, buf, (size_t)n);
    pthread_mutex_unlock(&t->dpu->mtx);
}

__attribute__((noreturn)) static void rt_fault(const char *rule, const char *detail, const char *file, int line)
{
    struct tasklet *t = self_or_die();
    tasklet_fault(t, rule, file, line, "%s", detail);
}

static const struct dpuemu_rt_ops g_ops = {
    .abi = DPUEMU_RT_ABI,
    .me = rt_me,
    .ldma = rt_ldma,
    .sdma = rt_sdma,
    .barrier_wait = rt_barrier_wait,
    .mutex_lock = rt_mutex_lock,
    .mutex_trylock = rt_mutex_trylock,
    .mutex_unlock = rt_mutex_unlock,
    .mem_alloc = rt_mem_alloc,
    .mem_reset = rt_mem_reset,
    .perfcounter_get = rt_perfcounter_get,
    .perfcounter_config = rt_perfcounter_config,
    .vprint = rt_vprint,
    .fault = rt_fault,
};

/* ------------------------------------------------------------------------------------------ */
/* Crashes inside a kernel (bad pointer, stack overflow, division by zero) fault the DPU.    */

static struct sigaction g_old_actions[3];
static const int g_signals[3] = { SIGSEGV, SIGBUS, SIGFPE };
static pthread_once_t g_signals_once = PTHREAD_ONCE_INIT;

static void on_crash(int sig, siginfo_t *info, void *context)
{
    struct tasklet *t = tl_self;
    if (t != NULL) {
        char detail[200];
        const char *rule = sig == SIGFPE ? "arithmetic exception" : "memory access violation";
        snprintf(detail, sizeof detail,
            sig == SIGFPE ? "signal %d (integer division by zero?) at %p"
                          : "signal %d at address %p (bad pointer, direct use of a 32-bit MRAM address, or stack overflow)",
            sig, info->si_addr);
        /* the faulting tasklet was in kernel code, which holds no emulator lock */
        pthread_mutex_lock(&t->dpu->mtx);
        fault_locked(t->dpu, (int)t->id, rule, detail, NULL, 0);
        pthread_mutex_unlock(&t->dpu->mtx);
        siglongjmp(t->jmp, 2);
    }
    for (int i = 0; i < 3; ++i) {
        if (g_signals[i] != sig) continue;
        struct sigaction *old = &g_old_actions[i];
        if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction != NULL) {
            old->sa_sigaction(sig, info, context);
        } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
            old->sa_handler(sig);
        } else {
            sigaction(sig, old, NULL); /* the faulting instruction runs again, under the old action */
        }
    }
}

static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(g_signals[i], &sa, &g_old_actions[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Sets                                                                                       */

static uint32_t set_nr_dpus(struct dpu_set_t set)
{
    if (set.kind == DPU_SET_DPU) return set.dpu != NULL;
    uint32_t n = 0;
    for (uint32_t r = 0; r < set.list.nr_ranks; ++r) n += set.list.ranks[r]->nr_dpus;
    return n;
}

/* The DPUs of a set, in DPU_FOREACH order; NULL when the set is invalid or empty. */
static struct dpu_t **set_dpus(struct dpu_set_t set, uint32_t *count)
{
    *count = 0;
    if (set.kind == DPU_SET_DPU) {
        if (set.dpu == NULL) return NULL;
        struct dpu_t **v = malloc(sizeof *v);
        if (v == NULL) return NULL;
        v[0] = set.dpu;
        *count = 1;
        return v;
    }
    if (set.kind != DPU_SET_RANKS || set.list.ranks == NULL) return NULL;
    uint32_t n = set_nr_dpus(set);
    if (n == 0) return NULL;
    struct dpu_t **v = malloc(n * sizeof *v);
    if (v == NULL) return NULL;
    uint32_t k = 0;
    for (uint32_t r = 0; r < set.list.nr_ranks; ++r)
        for (uint32_t i = 0; i < set.list.ranks[r]->nr_dpus; ++i) v[k++] = &set.list.ranks[r]->dpus[i];
    *count = n;
    return v;
}

struct dpu_set_rank_iterator_t dpu_set_rank_iterator_from(struct dpu_set_t *set)
{
    struct dpu_set_rank_iterator_t it;
    memset(&it, 0, sizeof it);
    it.set = set;
    if (set->kind == DPU_SET_RANKS) {
        it.has_next = set->list.nr_ranks > 0;
        it.next.kind = DPU_SET_RANKS;
        it.next.list.nr_ranks = 1;
        it.next.list.ranks = set->list.ranks;
    } else {
        it.has_next = true;
        it.next = *set;
    }
    return it;
}

void dpu_set_rank_iterator_next(struct dpu_set_rank_iterator_t *it)
{
    it->count++;
    it->next_idx++;
    if (it->set->kind == DPU_SET_RANKS && it->next_idx < it->set->list.nr_ranks) {
        it->next.list.ranks = &it->set->list.ranks[it->next_idx];
        it->has_next = true;
    } else {
        it->has_next = false;
    }
}

static void dpu_iterator_fill(struct dpu_set_dpu_iterator_t *it)
{
    while (it->rank_iterator.has_next) {
        struct dpu_set_t r = it->rank_iterator.next;
        if (r.kind == DPU_SET_DPU) {
            if (it->next_idx == 0) {
                it->next = r;
                it->has_next = true;
                return;
            }
        } else {
            struct dpu_rank_t *rank = r.list.ranks[0];
            if (it->next_idx < rank->nr_dpus) {
                it->next.kind = DPU_SET_DPU;
                it->next.dpu = &rank->dpus[it->next_idx];
                it->has_next = true;
                return;
            }
        }
        dpu_set_rank_iterator_next(&it->rank_iterator);
        it->next_idx = 0;
    }
    it->has_next = false;
}

struct dpu_set_dpu_iterator_t dpu_set_dpu_iterator_from(struct dpu_set_t *set)
{
    struct dpu_set_dpu_iterator_t it;
    memset(&it, 0, sizeof it);
    it.rank_iterator = dpu_set_rank_iterator_from(set);
    dpu_iterator_fill(&it);
    return it;
}

void dpu_set_dpu_iterator_next(struct dpu_set_dpu_iterator_t *it)
{
    it->count++;
    it->next_idx++;
    dpu_iterator_fill(it);
}

dpu_error_t dpuemu_get_dpu(struct dpu_set_t set, uint32_t index, struct dpu_set_t *out)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    dpu_error_t err = DPU_ERR_INVALID_DPU_SET;
    if (index < n) {
        out->kind = DPU_SET_DPU;
        out->dpu = v[index];
        err = DPU_OK;
    }
    free(v);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Allocation                                                                                 */

struct profile {
    uint32_t nr_dpus, dpus_per_rank, parallel, jobs_per_rank;
};

static bool parse_u32(const char *s, size_t n, uint32_t *out)
{
    if (n == 0 || n > 9) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* "key=value,key=value".  Keys: backend (only "emulator"), nrDpus (DPUs of the emulated
 * machine, default 64), nrDpusPerRank (default 64), emuParallelDpus (DPUs run at once,
 * default: the number of CPUs), nrJobsPerRank (job slots of a rank's queue, as the SDK's
 * property, default 16).  Other keys (profiles written for the SDK) are ignored. */
static dpu_error_t parse_profile(const char *profile, struct profile *p)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    p->nr_dpus = DEFAULT_NR_DPUS;
    p->dpus_per_rank = DEFAULT_DPUS_PER_RANK;
    p->parallel = cpus > 0 ? (uint32_t)cpus : 1;
    p->jobs_per_rank = DEFAULT_JOBS_PER_RANK;
    if (profile == NULL) return DPU_OK;
    const char *s = profile;
    while (*s) {
        while (*s == ' ' || *s == ',') s++;
        if (!*s) break;
        const char *end = s;
        while (*end && *end != ',') end++;
        const char *eq = memchr(s, '=', (size_t)(end - s));
        if (eq == NULL) return DPU_ERR_INVALID_PROFILE;
        size_t klen = (size_t)(eq - s), vlen = (size_t)(end - eq - 1);
        const char *v = eq + 1;
        uint32_t num;
#define KEY(name) (klen == strlen(name) && memcmp(s, name, klen) == 0)
        if (KEY("backend")) {
            if (!(vlen == 8 && memcmp(v, "emulator", 8) == 0)) return DPU_ERR_INVALID_PROFILE;
        } else if (KEY("nrDpus")) {
            if (!parse_u32(v, vlen, &num) || num == 0) return DPU_ERR_INVALID_PROFILE;
            p->nr_dpus = num;
        } else if (KEY("nrDpusPerRank")) {
            if (!parse_u32(v, vlen, &num) || num == 0 || num > 64) return DPU_ERR_INVALID_PROFILE;
            p->dpus_per_rank = num;
        } else if (KEY("emuParallelDpus")) {
            if (!parse_u32(v, vlen, &num) || num == 0) return DPU_ERR_INVALID_PROFILE;
            p->parallel = num;
        } else if (KEY("nrJobsPerRank")) {
            if (!parse_u32(v, vlen, &num) || num < 2) return DPU_ERR_INVALID_PROFILE; /* a sync call needs 2 */
            p->jobs_per_rank = num;
        }
#undef KEY
        s = end;
    }
    return DPU_OK;
}

static void *rank_worker(void *arg);
static void stop_rank_workers(struct emu_alloc *a);

/* DPUs allocated and not freed in this process (a forked child starts with its parent's). */
static _Atomic uint32_t live_dpus;

static dpu_error_t alloc_dpus(uint32_t nr_dpus, const struct profile *p, struct dpu_set_t *set)
{
    uint32_t nr_ranks = (nr_dpus + p->dpus_per_rank - 1) / p->dpus_per_rank;
    struct emu_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) return DPU_ERR_SYSTEM;
    a->nr_ranks = nr_ranks;
    a->parallel_dpus = p->parallel;
    a->max_jobs = p->jobs_per_rank;
    a->run_free = p->parallel;
    a->pid = getpid();
    pthread_mutex_init(&a->run_m, NULL);
    pthread_cond_init(&a->run_c, NULL);
    a->rank_list = calloc(nr_ranks, sizeof *a->rank_list);
    a->ranks = calloc(nr_ranks, sizeof *a->ranks);
    if (a->rank_list == NULL || a->ranks == NULL) goto fail;
    uint32_t left = nr_dpus, id = 0;
    for (uint32_t r = 0; r < nr_ranks; ++r) {
        struct dpu_rank_t *rank = &a->ranks[r];
        a->rank_list[r] = rank;
        rank->id = r;
        rank->alloc = a;
        pthread_mutex_init(&rank->qm, NULL);
        pthread_cond_init(&rank->qc, NULL);
        rank->nr_dpus = left < p->dpus_per_rank ? left : p->dpus_per_rank;
        left -= rank->nr_dpus;
        rank->dpus = calloc(rank->nr_dpus, sizeof *rank->dpus);
        if (rank->dpus == NULL) goto fail;
        for (uint32_t i = 0; i < rank->nr_dpus; ++i) {
            struct dpu_t *d = &rank->dpus[i];
            d->rank = rank;
            d->index = i;
            d->global_id = id++;
            d->program.owner = d;
            d->image.fd = -1;
            pthread_mutex_init(&d->mtx, NULL);
            pthread_cond_init(&d->cond, NULL);
        }
    }
    /* one thread per rank runs the rank's jobs (libdpu: nrThreadsPerRank, default 1) */
    for (uint32_t r = 0; r < nr_ranks; ++r) {
        if (pthread_create(&a->ranks[r].worker, NULL, rank_worker, &a->ranks[r]) != 0) goto fail;
        a->ranks[r].has_worker = true;
    }
    set->kind = DPU_SET_RANKS;
    set->list.nr_ranks = nr_ranks;
    set->list.ranks = a->rank_list;
    live_dpus += nr_dpus;
    return DPU_OK;
fail:
    if (a->ranks != NULL) {
        stop_rank_workers(a);
        for (uint32_t r = 0; r < nr_ranks; ++r) {
            if (a->ranks[r].dpus != NULL)
                for (uint32_t i = 0; i < a->ranks[r].nr_dpus; ++i) {
                    pthread_mutex_destroy(&a->ranks[r].dpus[i].mtx);
                    pthread_cond_destroy(&a->ranks[r].dpus[i].cond);
                }
            free(a->ranks[r].dpus);
            if (a->rank_list != NULL && a->rank_list[r] != NULL) {
                pthread_mutex_destroy(&a->ranks[r].qm);
                pthread_cond_destroy(&a->ranks[r].qc);
            }
        }
    }
    pthread_mutex_destroy(&a->run_m);
    pthread_cond_destroy(&a->run_c);
    free(a->ranks);
    free(a->rank_list);
    free(a);
    return DPU_ERR_SYSTEM;
}

dpu_error_t dpu_alloc(uint32_t nr_dpus, const char *profile, struct dpu_set_t *dpu_set)
{
    struct profile p;
    dpu_error_t err = parse_profile(profile, &p);
    if (err != DPU_OK) return err;
    if (nr_dpus == DPU_ALLOCATE_ALL) nr_dpus = p.nr_dpus;
    if (nr_dpus == 0 || nr_dpus > p.nr_dpus) return DPU_ERR_ALLOCATION;
    return alloc_dpus(nr_dpus, &p, dpu_set);
}

dpu_error_t dpu_alloc_ranks(uint32_t nr_ranks, const char *profile, struct dpu_set_t *dpu_set)
{
    struct profile p;
    dpu_error_t err = parse_profile(profile, &p);
    if (err != DPU_OK) return err;
    uint32_t max_ranks = (p.nr_dpus + p.dpus_per_rank - 1) / p.dpus_per_rank;
    if (nr_ranks == DPU_ALLOCATE_ALL) nr_ranks = max_ranks;
    if (nr_ranks == 0 || nr_ranks > max_ranks) return DPU_ERR_ALLOCATION;
    uint32_t n = nr_ranks * p.dpus_per_rank;
    return alloc_dpus(n < p.nr_dpus ? n : p.nr_dpus, &p, dpu_set);
}

dpu_error_t dpu_get_nr_ranks(struct dpu_set_t set, uint32_t *nr_ranks)
{
    if (set.kind == DPU_SET_DPU) *nr_ranks = 1;
    else if (set.kind == DPU_SET_RANKS) *nr_ranks = set.list.nr_ranks;
    else return DPU_ERR_INTERNAL;
    return DPU_OK;
}

dpu_error_t dpu_get_nr_dpus(struct dpu_set_t set, uint32_t *nr_dpus)
{
    if (set.kind != DPU_SET_DPU && set.kind != DPU_SET_RANKS) return DPU_ERR_INTERNAL;
    *nr_dpus = set_nr_dpus(set);
    return DPU_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Rank job queues                                                                            */
/*
 * As libdpu (src/backends/api/src/api/dpu_thread_job.c): every operation on a rank -- a
 * launch, a transfer, a load, a callback, a synchronisation -- is a job appended to the
 * rank's FIFO, run in order by the rank's own thread.  A launch job boots the DPUs and
 * waits until they have all stopped (dpu_sync_rank), so a transfer queued behind an
 * asynchronous launch runs only once the launch is over; ranks run their queues
 * independently.  A synchronous call appends its job(s) plus a SYNC job per rank and waits
 * for the SYNC jobs.  A job that fails leaves the rank's sticky `job_error`
 * (DPU_ERR_ASYNC_JOBS | type << 16 | error), drops every job queued behind it (SYNC jobs
 * are released with the error), and makes every later call on the rank return that error
 * at once -- except that a synchronous call whose own SYNC job received the error clears
 * it (dpu_thread_job_do_jobs).  A rank has nrJobsPerRank job slots; a call waits for free
 * slots.
 */

struct emu_sync {
    pthread_mutex_t m;
    pthread_cond_t c;
    uint32_t left; /* ranks whose SYNC job has not run yet */
    dpu_error_t status;
};

struct elf_info;

struct emu_load {
    const uint8_t *buf;
    size_t size;
    const struct elf_info *info;
    uint64_t load_id;
    const char *path;
};

struct emu_single_call { /* one callback for a whole multi-rank set (DPU_CALLBACK_SINGLE_CALL) */
    pthread_mutex_t m;
    pthread_cond_t c;
    uint32_t arrived, refs, nr_ranks;
    bool done;
    dpu_error_t (*fn)(struct dpu_set_t, uint32_t, void *);
    void *args;
    struct dpu_set_t set;
    dpu_error_t status;
};

struct emu_job {
    struct emu_job *next;
    uint32_t type;
    struct dpu_t *dpu;      /* LAUNCH_DPU, or the one DPU of a transfer to a DPU set */
    struct emu_sync *sync;  /* SYNC */
    /* transfers */
    void **buffers;         /* per DPU of the rank (the prepared buffers when the job was queued) */
    const void *common;     /* broadcast */
    void *one;              /* the buffer of a one-DPU transfer */
    struct dpu_symbol_t symbol;
    uint32_t offset;
    size_t length;
    bool to_dpu;
    /* load */
    struct emu_load *load;
    /* callback */
    dpu_error_t (*fn)(struct dpu_set_t, uint32_t, void *);
    void *args;
    struct dpu_set_t cb_set;
    uint32_t cb_idx;
    struct emu_single_call *single;
};

static void sync_init(struct emu_sync *s, uint32_t nr_ranks)
{
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->c, NULL);
    s->left = nr_ranks;
    s->status = DPU_OK;
}

static void sync_release(struct emu_sync *s, dpu_error_t status)
{
    pthread_mutex_lock(&s->m);
    if (s->status == DPU_OK) s->status = status;
    if (--s->left == 0) pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m); /* the waiter may free s from here on */
}

static dpu_error_t sync_wait(struct emu_sync *s)
{
    pthread_mutex_lock(&s->m);
    while (s->left != 0) pthread_cond_wait(&s->c, &s->m);
    dpu_error_t status = s->status;
    pthread_mutex_unlock(&s->m);
    pthread_mutex_destroy(&s->m);
    pthread_cond_destroy(&s->c);
    return status;
}

static void single_call_unref(struct emu_single_call *sc)
{
    pthread_mutex_lock(&sc->m);
    bool last = --sc->refs == 0;
    pthread_mutex_unlock(&sc->m);
    if (last) {
        pthread_mutex_destroy(&sc->m);
        pthread_cond_destroy(&sc->c);
        free(sc);
    }
}

/* A participant of a single call that will never run (its rank's queue was dropped):
 * count it as arrived, so that the other ranks do not wait for it forever. */
static void single_call_abandon(struct emu_single_call *sc, dpu_error_t status)
{
    pthread_mutex_lock(&sc->m);
    if (++sc->arrived == sc->nr_ranks && !sc->done) {
        sc->done = true;
        sc->status = status;
        pthread_cond_broadcast(&sc->c);
    }
    pthread_mutex_unlock(&sc->m);
    single_call_unref(sc);
}

static void free_job(struct emu_job *j)
{
    free(j->buffers);
    free(j);
}

static dpu_error_t run_job(struct dpu_rank_t *r, struct emu_job *j);

static void *rank_worker(void *arg)
{
    struct dpu_rank_t *r = arg;
    tl_worker_rank = r;
    pthread_mutex_lock(&r->qm);
    for (;;) {
        while (r->head == NULL && !r->stop) pthread_cond_wait(&r->qc, &r->qm);
        if (r->head == NULL) break; /* stopped, nothing left */
        struct emu_job *j = r->head;
        pthread_mutex_unlock(&r->qm);
        dpu_error_t status = run_job(r, j);
        pthread_mutex_lock(&r->qm);
        r->head = j->next;
        if (r->head == NULL) r->tail = NULL;
        r->nr_jobs--;
        if (status != DPU_OK) {
            r->job_error = (dpu_error_t)((uint32_t)DPU_ERR_ASYNC_JOBS | (j->type << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT) |
                ((uint32_t)status & ((1u << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT) - 1)));
            while (r->head != NULL) { /* dpu_thread_update_status: drop the rest of the queue */
                struct emu_job *k = r->head;
                r->head = k->next;
                r->nr_jobs--;
                if (k->type == JOB_SYNC) sync_release(k->sync, r->job_error);
                else if (k->single != NULL) single_call_abandon(k->single, r->job_error);
                free_job(k);
            }
            r->tail = NULL;
        }
        free_job(j);
        pthread_cond_broadcast(&r->qc);
    }
    pthread_mutex_unlock(&r->qm);
    tl_worker_rank = NULL;
    return NULL;
}

static void stop_rank_workers(struct emu_alloc *a)
{
    const bool forked = getpid() != a->pid; /* the rank threads stayed in the parent */
    for (uint32_t r = 0; r < a->nr_ranks; ++r) {
        struct dpu_rank_t *rank = &a->ranks[r];
        if (!rank->has_worker) continue;
        if (forked) {
            rank->has_worker = false;
            continue;
        }
        pthread_mutex_lock(&rank->qm);
        rank->stop = true;
        pthread_cond_broadcast(&rank->qc);
        pthread_mutex_unlock(&rank->qm);
        pthread_join(rank->worker, NULL);
        rank->has_worker = false;
    }
}

/* The ranks a set's operations go to (a DPU set: its rank). */
static dpu_error_t set_ranks(struct dpu_set_t *set, struct dpu_rank_t ***ranks, uint32_t *nr)
{
    if (set->kind == DPU_SET_DPU) {
        if (set->dpu == NULL) return DPU_ERR_INVALID_DPU_SET;
        *ranks = &set->dpu->rank;
        *nr = 1;
        return DPU_OK;
    }
    if (set->kind != DPU_SET_RANKS || set->list.ranks == NULL || set->list.nr_ranks == 0) return DPU_ERR_INVALID_DPU_SET;
    *ranks = set->list.ranks;
    *nr = set->list.nr_ranks;
    return DPU_OK;
}

/* Waits until every queue of `ranks` is empty and idle; touches no error (emulator-only
 * calls, dpu_free, dpu_log_read). */
static void drain(struct dpu_rank_t **ranks, uint32_t nr)
{
    for (uint32_t i = 0; i < nr; ++i) {
        struct dpu_rank_t *r = ranks[i];
        if (r == tl_worker_rank) continue; /* called from one of this rank's callbacks */
        if (getpid() != r->alloc->pid) continue; /* a forked child: no thread runs these queues */
        pthread_mutex_lock(&r->qm);
        while (r->nr_jobs != 0) pthread_cond_wait(&r->qc, &r->qm);
        pthread_mutex_unlock(&r->qm);
    }
}

/* libdpu's dpu_thread_job_do_jobs: reserves `per_rank` slots (+1 for the SYNC job when
 * synchronous) on every rank, returning a rank's sticky error at once; appends the jobs
 * (jobs[i * per_rank + k] for rank i); when synchronous, waits for the SYNC jobs and returns
 * the plain error, clearing the ranks' sticky errors as libdpu does.  Frees the jobs it
 * does not queue. */
static dpu_error_t do_jobs(struct dpu_rank_t **ranks, uint32_t nr, struct emu_job **jobs, uint32_t per_rank, bool synchronous)
{
    const uint32_t need = per_rank + (synchronous ? 1 : 0);
    if (nr > 0 && getpid() != ranks[0]->alloc->pid) { /* a forked child: the rank threads are the parent's */
        for (uint32_t k = 0; k < nr * per_rank; ++k) {
            if (jobs[k]->single != NULL) single_call_unref(jobs[k]->single);
            free_job(jobs[k]);
        }
        return DPU_ERR_SYSTEM;
    }
    /* a synchronous call from a callback running on the rank's own thread: run it here */
    if (synchronous && nr == 1 && ranks[0] == tl_worker_rank) {
        dpu_error_t status = DPU_OK;
        for (uint32_t k = 0; k < per_rank; ++k) {
            if (status == DPU_OK) status = run_job(ranks[0], jobs[k]);
            free_job(jobs[k]);
        }
        return status;
    }
    for (uint32_t i = 0; i < nr; ++i) {
        struct dpu_rank_t *r = ranks[i];
        pthread_mutex_lock(&r->qm);
        while (r->job_error == DPU_OK && r->nr_jobs + need > r->alloc->max_jobs) pthread_cond_wait(&r->qc, &r->qm);
        dpu_error_t sticky = r->job_error;
        if (sticky == DPU_OK) r->nr_jobs += need;
        pthread_mutex_unlock(&r->qm);
        if (sticky != DPU_OK) {
            for (uint32_t k = 0; k < i; ++k) { /* give back the slots taken */
                pthread_mutex_lock(&ranks[k]->qm);
                ranks[k]->nr_jobs -= need;
                pthread_cond_broadcast(&ranks[k]->qc);
                pthread_mutex_unlock(&ranks[k]->qm);
            }
            for (uint32_t k = 0; k < nr * per_rank; ++k) {
                if (jobs[k]->single != NULL) single_call_unref(jobs[k]->single);
                free_job(jobs[k]);
            }
            return sticky;
        }
    }
    struct emu_sync sync;
    if (synchronous) sync_init(&sync, nr);
    for (uint32_t i = 0; i < nr; ++i) {
        struct dpu_rank_t *r = ranks[i];
        pthread_mutex_lock(&r->qm);
        for (uint32_t k = 0; k < need; ++k) {
            struct emu_job *j;
            if (k < per_rank) {
                j = jobs[i * per_rank + k];
            } else {
                j = calloc(1, sizeof *j);
                if (j == NULL) abort(); /* a 200-byte allocation */
                j->type = JOB_SYNC;
                j->sync = &sync;
            }
            j->next = NULL;
            if (r->tail != NULL) r->tail->next = j;
            else r->head = j;
            r->tail = j;
        }
        pthread_cond_broadcast(&r->qc);
        pthread_mutex_unlock(&r->qm);
    }
    if (!synchronous) return DPU_OK;
    dpu_error_t status = (dpu_error_t)((uint32_t)sync_wait(&sync) & ((1u << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT) - 1));
    if (status != DPU_OK)
        for (uint32_t i = 0; i < nr; ++i) {
            pthread_mutex_lock(&ranks[i]->qm);
            ranks[i]->job_error = DPU_OK;
            pthread_mutex_unlock(&ranks[i]->qm);
        }
    return status;
}

static struct emu_job *new_job(uint32_t type)
{
    struct emu_job *j = calloc(1, sizeof *j);
    if (j != NULL) j->type = type;
    return j;
}

/* nr jobs of `type`, or NULL (all freed) when out of memory. */
static struct emu_job **new_jobs(uint32_t nr, uint32_t type)
{
    struct emu_job **jobs = calloc(nr, sizeof *jobs);
    if (jobs == NULL) return NULL;
    for (uint32_t i = 0; i < nr; ++i) {
        jobs[i] = new_job(type);
        if (jobs[i] == NULL) {
            for (uint32_t k = 0; k < i; ++k) free_job(jobs[k]);
            free(jobs);
            return NULL;
        }
    }
    return jobs;
}

static void unload_image(struct dpu_t *d)
{
    if (d->image.handle != NULL) dlclose(d->image.handle);
    if (d->image.fd >= 0) close(d->image.fd);
    memset(&d->image, 0, sizeof d->image);
    d->image.fd = -1;
    free(d->wram);
    d->wram = NULL;
    d->load_id = 0;
    d->load_fault = false;
}

/* Waits for every rank's queue to run out (the SDK stops the rank threads, which finish the
 * job list they are on: a driver must dpu_sync before dpu_free), then frees everything. */
dpu_error_t dpu_free(struct dpu_set_t set)
{
    if (set.kind != DPU_SET_RANKS || set.list.nr_ranks == 0) return DPU_ERR_INVALID_DPU_SET;
    struct emu_alloc *a = set.list.ranks[0]->alloc;
    if (a == NULL || set.list.ranks != a->rank_list || set.list.nr_ranks != a->nr_ranks) return DPU_ERR_INVALID_DPU_SET;
    /* In a forked child the rank threads stayed in the parent, where they may have been
     * waiting on these condition variables: destroying one would wait for them forever
     * (glibc), so the child only frees the memory. */
    const bool forked = getpid() != a->pid;
    drain(a->rank_list, a->nr_ranks);
    stop_rank_workers(a);
    for (uint32_t r = 0; r < a->nr_ranks; ++r) {
        live_dpus -= a->ranks[r].nr_dpus;
        for (uint32_t i = 0; i < a->ranks[r].nr_dpus; ++i) {
            struct dpu_t *d = &a->ranks[r].dpus[i];
            unload_image(d);
            free(d->log);
            if (!forked) {
                pthread_mutex_destroy(&d->mtx);
                pthread_cond_destroy(&d->cond);
            }
        }
        free(a->ranks[r].dpus);
        if (!forked) {
            pthread_mutex_destroy(&a->ranks[r].qm);
            pthread_cond_destroy(&a->ranks[r].qc);
        }
    }
    if (!forked) {
        pthread_mutex_destroy(&a->run_m);
        pthread_cond_destroy(&a->run_c);
    }
    free(a->ranks);
    free(a->rank_list);
    free(a);
    return DPU_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                    */

struct elf_info {
    uint64_t globals_bytes;
    uint64_t lo[MAX_WRAM_RANGES], hi[MAX_WRAM_RANGES]; /* link-time addresses */
    int nr_ranges;
};

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The kernel's WRAM: the sections that hold its globals (.data*, .rodata*, .bss*). */
static bool parse_elf(const uint8_t *buf, size_t size, struct elf_info *info)
{
    memset(info, 0, sizeof *info);
    if (size < sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) != 0 || buf[EI_CLASS] != ELFCLASS64) return false;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shstrndx >= eh->e_shnum) return false;
    if (eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size) return false;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(buf + eh->e_shoff);
    const Elf64_Shdr *strs = &sh[eh->e_shstrndx];
    if (strs->sh_offset + strs->sh_size > size) return false;
    const char *names = (const char *)buf + strs->sh_offset;
    for (int i = 0; i < eh->e_shnum; ++i) {
        if (!(sh[i].sh_flags & SHF_ALLOC) || sh[i].sh_name >= strs->sh_size) continue;
        const char *name = names + sh[i].sh_name;
        if (starts_with(name, ".dpu_mram")) continue;
        if (!(starts_with(name, ".data") || starts_with(name, ".rodata") || starts_with(name, ".bss"))) continue;
        info->globals_bytes += sh[i].sh_size;
        if (info->nr_ranges < MAX_WRAM_RANGES && sh[i].sh_size > 0) {
            info->lo[info->nr_ranges] = sh[i].sh_addr;
            info->hi[info->nr_ranges] = sh[i].sh_addr + sh[i].sh_size;
            info->nr_ranges++;
        }
    }
    return true;
}

static uint8_t *read_file(const char *path, size_t *size, dpu_error_t *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        *err = DPU_ERR_ELF_NO_SUCH_FILE;
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : (1u << 16);
            uint8_t *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                *err = DPU_ERR_SYSTEM;
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *size = n;
    *err = DPU_OK;
    return buf;
}

static void load_fault(struct dpu_t *d, const char *rule, const char *detail)
{
    pthread_mutex_lock(&d->mtx);
    d->faulted = false;
    fault_locked(d, -1, rule, detail, NULL, 0);
    pthread_mutex_unlock(&d->mtx);
    d->load_fault = true;
}

/* One private copy of the kernel for DPU d in im: a memfd, dlopen, the emulator's symbols. */
static dpu_error_t open_copy(struct dpu_t *d, const uint8_t *buf, size_t size, struct emu_image *im, char *why,
    size_t why_size)
{
    char name[48];
    snprintf(name, sizeof name, "pimloader-dpu-%u", d->global_id);
    im->fd = memfd_create(name, MFD_CLOEXEC);
    if (im->fd < 0) return DPU_ERR_SYSTEM;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(im->fd, buf + off, size - off);
        if (w <= 0) return DPU_ERR_SYSTEM;
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", im->fd); /* unique while the fd stays open */
    im->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (im->handle == NULL) {
        snprintf(why, why_size, "%s", dlerror());
        return DPU_ERR_ELF_INVALID_FILE;
    }
    const uint32_t *abi = dlsym(im->handle, "__dpuemu_abi");
    void (*attach)(const struct dpuemu_rt_ops *) = (void (*)(const struct dpuemu_rt_ops *))dlsym(im->handle, "__dpuemu_attach");
    const uint32_t *nr_tasklets = dlsym(im->handle, "__dpuemu_nr_tasklets");
    const uint32_t *stack_size = dlsym(im->handle, "__dpuemu_stack_size");
    im->mram = dlsym(im->handle, "__dpuemu_mram_begin");
    im->mram_end = dlsym(im->handle, "__dpuemu_mram_end");
    im->heap_ptr = dlsym(im->handle, DPU_MRAM_HEAP_POINTER_NAME);
    im->main = (int (*)(void))dlsym(im->handle, "main");
    if (!abi || !attach || !nr_tasklets || !stack_size || !im->mram || !im->mram_end || !im->heap_ptr || !im->main) {
        snprintf(why, why_size, "not a kernel built for the emulator (pimloader._emulator.compile_kernel) or no main()");
        return DPU_ERR_ELF_INVALID_FILE;
    }
    if (*abi != DPUEMU_RT_ABI || im->mram_end - im->mram != MRAM_SIZE) {
        snprintf(why, why_size, "kernel built for another version of the emulator");
        return DPU_ERR_ELF_INVALID_FILE;
    }
    struct link_map *lm = NULL;
    if (dlinfo(im->handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL) return DPU_ERR_SYSTEM;
    im->base = (uintptr_t)lm->l_addr;
    attach(&g_ops);
    return DPU_OK;
}

/* Whether the 32-bit MRAM addresses of this copy wrap around: DPU code keeps MRAM addresses
 * in uint32_t (DPU pointers are 32 bits; the emulator takes their low 32 bits), and on a DPU
 * they increase over the whole MRAM (0x08000000 up), so a kernel may compare them and add
 * sizes to them. A copy mapped across a 4 GB boundary of the host's address space would give
 * it addresses that wrap to 0 inside the MRAM, where `end = start + length` falls below
 * `start` (the JPEG decoder then read an interval as empty). The end address counts too. */
static bool mram_wraps_32(const struct emu_image *im)
{
    return ((uintptr_t)im->mram >> 32) != (((uintptr_t)im->mram + MRAM_SIZE) >> 32);
}

static void close_copy(struct emu_image *im)
{
    if (im->handle != NULL) dlclose(im->handle);
    if (im->fd >= 0) close(im->fd);
    im->handle = NULL;
    im->fd = -1;
}

#define MAX_PLACEMENTS 8

/* A copy of the kernel whose MRAM's 32-bit addresses do not wrap: a copy that lands across a
 * 4 GB boundary stays mapped while the next one is opened (so that one maps elsewhere), then
 * is closed. */
static dpu_error_t open_placed_copy(struct dpu_t *d, const uint8_t *buf, size_t size, char *why, size_t why_size)
{
    struct emu_image misplaced[MAX_PLACEMENTS];
    uint32_t nr_misplaced = 0;
    dpu_error_t e;
    while ((e = open_copy(d, buf, size, &d->image, why, why_size)) == DPU_OK && mram_wraps_32(&d->image) &&
        nr_misplaced < MAX_PLACEMENTS) {
        misplaced[nr_misplaced++] = d->image;
        d->image.handle = NULL;
        d->image.fd = -1;
    }
    for (uint32_t i = 0; i < nr_misplaced; ++i) close_copy(&misplaced[i]);
    if (e == DPU_OK && mram_wraps_32(&d->image)) {
        snprintf(why, why_size, "could not map the MRAM where its 32-bit addresses do not wrap (%u tries)", MAX_PLACEMENTS + 1);
        return DPU_ERR_SYSTEM;
    }
    return e;
}

static dpu_error_t load_one(struct dpu_t *d, const uint8_t *buf, size_t size, const struct elf_info *info, uint64_t load_id,
    char *why, size_t why_size)
{
    struct emu_image *im = &d->image;
    dpu_error_t e = open_placed_copy(d, buf, size, why, why_size);
    if (e != DPU_OK) return e;
    const uint32_t *nr_tasklets = dlsym(im->handle, "__dpuemu_nr_tasklets");
    const uint32_t *stack_size = dlsym(im->handle, "__dpuemu_stack_size");
    im->nr_tasklets = *nr_tasklets;
    im->stack_size = *stack_size;
    im->globals_bytes = (uint32_t)info->globals_bytes;
    im->nr_wram_ranges = info->nr_ranges;
    for (int i = 0; i < info->nr_ranges; ++i) {
        im->wram_lo[i] = im->base + info->lo[i];
        im->wram_hi[i] = im->base + info->hi[i];
    }
    d->wram = calloc(1, WRAM_SIZE);
    if (d->wram == NULL) return DPU_ERR_SYSTEM;
    d->load_id = load_id;
    d->nr_host_wram = 0;
    d->host_wram_overflow = false;
    d->faulted = false;
    d->fault_msg[0] = 0;
    d->log_len = 0;
    d->log_truncated = false;
    memset(&d->ctr, 0, sizeof d->ctr);
    d->dma_cycles = d->dma_instr = 0;

    uint64_t statics = info->globals_bytes + (uint64_t)im->nr_tasklets * im->stack_size;
    d->static_bytes = (uint32_t)(statics < WRAM_SIZE ? statics : WRAM_SIZE);
    d->heap_start = d->heap_cur = (d->static_bytes + 7u) & ~7u;
    d->ctr.wram_static_bytes = (uint32_t)statics;
    char detail[256];
    if (im->nr_tasklets > MAX_TASKLETS || im->nr_tasklets == 0) {
        snprintf(detail, sizeof detail, "kernel built with NR_TASKLETS=%u; a DPU runs 1 to %u tasklets", im->nr_tasklets,
            MAX_TASKLETS);
        load_fault(d, "more than 24 tasklets", detail);
        snprintf(why, why_size, "%s", d->fault_msg);
        return DPU_ERR_ELF_INVALID_FILE;
    }
    if (statics > WRAM_SIZE) {
        snprintf(detail, sizeof detail, "globals %llu + %u tasklets x %u-byte stacks = %llu bytes > %u bytes of WRAM",
            (unsigned long long)info->globals_bytes, im->nr_tasklets, im->stack_size, (unsigned long long)statics, WRAM_SIZE);
        load_fault(d, "WRAM over budget", detail);
        snprintf(why, why_size, "%s", d->fault_msg);
        return DPU_ERR_ELF_INVALID_FILE;
    }
    return DPU_OK;
}

/* MRAM keeps its contents across dpu_load, as on DPUs: libdpu's loader writes the program's
 * own MRAM sections only (src/backends/api/src/dpu_loader.c, load_dpu_mram). Here the MRAM
 * lives in the loaded object, so the old object's MRAM past the new program's variables
 * (from its DPU_MRAM_HEAP_POINTER on) moves to the new object: the whole pages by mremap (no
 * copy, untouched pages stay unallocated), the partial first page by memcpy. The move leaves
 * the old range mapped, empty (MREMAP_DONTUNMAP, Linux 5.7; a plain move before it): a hole
 * there could take another thread's mmap meanwhile, and the dlclose of the old object, which
 * unmaps its whole span, would unmap that too. Returns false if the kernel refused the move
 * (errno says why). */
static bool carry_mram(const struct emu_image *from, struct emu_image *to)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t keep = (size_t)(to->heap_ptr - to->mram);
    const size_t whole = (keep + page - 1) & ~(page - 1);
    if (whole > keep) memcpy(to->mram + keep, from->mram + keep, (whole < MRAM_SIZE ? whole : MRAM_SIZE) - keep);
    if (whole >= MRAM_SIZE) return true;
    void *src = from->mram + whole, *dst = to->mram + whole;
    const size_t n = MRAM_SIZE - whole;
    void *moved = mremap(src, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
    if (moved == MAP_FAILED && errno == EINVAL) moved = mremap(src, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    return moved != MAP_FAILED;
}

static dpu_error_t run_load(struct dpu_rank_t *r, struct emu_job *j)
{
    const struct emu_load *l = j->load;
    dpu_error_t err = DPU_OK;
    for (uint32_t i = 0; i < r->nr_dpus; ++i) {
        struct dpu_t *d = &r->dpus[i];
        if (j->dpu != NULL && j->dpu != d) continue;
        struct emu_image old = d->image; /* kept open until its MRAM moved to the new image */
        d->image.handle = NULL;
        d->image.fd = -1;
        unload_image(d);
        char why[640] = "";
        dpu_error_t e = load_one(d, l->buf, l->size, l->info, l->load_id, why, sizeof why);
        if (old.handle != NULL) {
            if (e == DPU_OK && !carry_mram(&old, &d->image)) {
                snprintf(why, sizeof why, "could not carry the MRAM over from the previous program: %s", strerror(errno));
                e = DPU_ERR_SYSTEM;
            }
            dlclose(old.handle);
        }
        if (old.fd >= 0) close(old.fd);
        if (e != DPU_OK) {
            if (!d->load_fault) {
                /* not a rule of the hardware: leave no program, keep the reason readable */
                unload_image(d);
                pthread_mutex_lock(&d->mtx);
                snprintf(d->fault_msg, sizeof d->fault_msg, "dpu_load(%.200s) failed on DPU %u: %.400s", l->path,
                    d->global_id, why);
                pthread_mutex_unlock(&d->mtx);
            }
            if (err == DPU_OK) err = e;
        }
    }
    return err;
}

/* A synchronous LOAD job per rank, as libdpu's dpu_load (dpu_loader.c). */
dpu_error_t dpu_load(struct dpu_set_t set, const char *binary_path, struct dpu_program_t **program)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    if (program != NULL) *program = NULL;
    size_t size = 0;
    uint8_t *buf = read_file(binary_path, &size, &err);
    if (buf == NULL) return err;
    struct elf_info info;
    if (!parse_elf(buf, size, &info)) {
        free(buf);
        return DPU_ERR_ELF_INVALID_FILE;
    }
    pthread_mutex_lock(&g_lock);
    uint64_t load_id = ++g_load_counter;
    pthread_mutex_unlock(&g_lock);
    struct emu_load l = { .buf = buf, .size = size, .info = &info, .load_id = load_id, .path = binary_path };
    struct emu_job **jobs = new_jobs(nr, JOB_LOAD);
    if (jobs == NULL) {
        free(buf);
        return DPU_ERR_SYSTEM;
    }
    for (uint32_t i = 0; i < nr; ++i) {
        jobs[i]->load = &l;
        jobs[i]->dpu = set.kind == DPU_SET_DPU ? set.dpu : NULL;
    }
    err = do_jobs(ranks, nr, jobs, 1, true);
    free(jobs);
    if (err == DPU_OK && program != NULL)
        *program = set.kind == DPU_SET_DPU ? &set.dpu->program : &ranks[0]->dpus[0].program;
    free(buf);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Symbols and transfers                                                                      */

static dpu_error_t symbol_of(struct dpu_t *d, const char *name, struct dpu_symbol_t *symbol)
{
    if (d->load_id == 0) return DPU_ERR_NO_PROGRAM_LOADED;
    struct emu_image *im = &d->image;
    dlerror();
    uint8_t *addr = dlsym(im->handle, name);
    if (addr == NULL) return DPU_ERR_UNKNOWN_SYMBOL;
    uint64_t size = 0;
    if (strcmp(name, DPU_MRAM_HEAP_POINTER_NAME) == 0) {
        size = (uint64_t)(im->mram_end - addr);
    } else {
        Dl_info dli;
        const ElfW(Sym) *sym = NULL;
        if (dladdr1(addr, &dli, (void **)&sym, RTLD_DL_SYMENT) && sym != NULL && dli.dli_saddr == addr) size = sym->st_size;
    }
    uint64_t vaddr = (uint64_t)((uintptr_t)addr - im->base);
    if (vaddr > UINT32_MAX || size > UINT32_MAX) return DPU_ERR_INTERNAL;
    symbol->address = (uint32_t)vaddr;
    symbol->size = (uint32_t)size;
    return DPU_OK;
}

dpu_error_t dpu_get_symbol(struct dpu_program_t *program, const char *symbol_name, struct dpu_symbol_t *symbol)
{
    if (program == NULL || program->owner == NULL) return DPU_ERR_NO_PROGRAM_LOADED;
    return symbol_of(program->owner, symbol_name, symbol);
}

static dpu_error_t common_symbol(struct dpu_t **v, uint32_t n, const char *name, struct dpu_symbol_t *symbol)
{
    for (uint32_t i = 0; i < n; ++i) {
        if (v[i]->load_id == 0) return DPU_ERR_NO_PROGRAM_LOADED;
        if (v[i]->load_id != v[0]->load_id) return DPU_ERR_DIFFERENT_DPU_PROGRAMS;
    }
    return symbol_of(v[0], name, symbol);
}

/* The host address of [symbol + offset, + length) in DPU d, after the SDK's checks. */
static dpu_error_t resolve(struct dpu_t *d, struct dpu_symbol_t symbol, uint32_t offset, size_t length, uint8_t **out)
{
    if (d->load_id == 0) return DPU_ERR_NO_PROGRAM_LOADED;
    if ((uint64_t)offset + length > symbol.size) return DPU_ERR_INVALID_SYMBOL_ACCESS;
    uint8_t *p = (uint8_t *)(d->image.base + symbol.address) + offset;
    bool mram = p >= d->image.mram && p < d->image.mram_end;
    if (!mram && ((offset & 3u) != 0 || (length & 3u) != 0)) return DPU_ERR_INVALID_WRAM_ACCESS;
    *out = p;
    return DPU_OK;
}

static void count_host(struct dpu_t *d, size_t length, bool to_dpu)
{
    if (to_dpu) {
        d->ctr.host_to_dpu_bytes += length;
        d->ctr.host_to_dpu_calls++;
    } else {
        d->ctr.dpu_to_host_bytes += length;
        d->ctr.dpu_to_host_calls++;
    }
}

static bool is_mram_job(uint32_t type)
{
    return type == JOB_COPY_MRAM_TO_MATRIX || type == JOB_COPY_MRAM_FROM_MATRIX || type == JOB_COPY_MRAM_TO_RANK;
}

/* A transfer job, run by the rank's thread.  As libdpu's dpu_copy_to_mrams /
 * dpu_copy_from_mrams (src/backends/api/src/dpu_memory.c), MRAM is refused while any DPU of
 * the rank runs (DPU_ERR_MRAM_BUSY: "Host does not have access to the MRAM because N DPUs
 * are running"); through the queues that cannot happen, since a launch job ends only when
 * the rank's DPUs have stopped. */
static dpu_error_t run_transfer(struct dpu_rank_t *r, struct emu_job *j)
{
    if (is_mram_job(j->type) && __atomic_load_n(&r->nr_running, __ATOMIC_ACQUIRE) != 0) return DPU_ERR_MRAM_BUSY;
    for (uint32_t i = 0; i < r->nr_dpus; ++i) {
        struct dpu_t *d = &r->dpus[i];
        void *host;
        if (j->dpu != NULL) {
            if (j->dpu != d) continue;
            host = j->one;
        } else {
            host = j->common != NULL ? (void *)j->common : j->buffers[i];
        }
        if (host == NULL) continue; /* no buffer prepared for this DPU: not transferred */
        uint8_t *p;
        dpu_error_t err = resolve(d, j->symbol, j->offset, j->length, &p);
        if (err != DPU_OK) return err;
        if (j->to_dpu) memcpy(p, host, j->length);
        else memcpy(host, p, j->length);
        if (j->to_dpu && p >= d->image.mram && p < d->image.mram_end) raise_end(&d->host_mram_end, p + j->length - d->image.mram);
        else if (j->to_dpu) note_host_wram(d, p, (uint32_t)j->length);
        count_host(d, j->length, j->to_dpu);
    }
    return DPU_OK;
}

/* The checks libdpu makes before queuing a transfer (CHECK_SYMBOL, a loaded program), and
 * whether the symbol lies in MRAM. */
static dpu_error_t check_transfer(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t offset, size_t length,
    bool *mram)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    dpu_error_t err = DPU_OK;
    for (uint32_t i = 0; i < n && err == DPU_OK; ++i)
        if (v[i]->load_id == 0) err = DPU_ERR_NO_PROGRAM_LOADED;
    if (err == DPU_OK && (uint64_t)offset + length > symbol.size) err = DPU_ERR_INVALID_SYMBOL_ACCESS;
    if (err == DPU_OK) {
        struct dpu_t *d = v[0];
        uint8_t *p = (uint8_t *)(d->image.base + symbol.address);
        *mram = p >= d->image.mram && p < d->image.mram_end;
        if (!*mram && (((symbol.address + offset) & 3u) != 0 || (length & 3u) != 0)) err = DPU_ERR_INVALID_WRAM_ACCESS;
    }
    free(v);
    return err;
}

/* One transfer job per rank of the set: each DPU's prepared buffer (per_dpu), or `common`. */
static dpu_error_t queue_transfer(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t offset, size_t length,
    bool to_dpu, const void *common, void *one, bool per_dpu, bool synchronous)
{
    bool mram = false;
    dpu_error_t err = check_transfer(set, symbol, offset, length, &mram);
    if (err != DPU_OK) return err;
    struct dpu_rank_t **ranks;
    uint32_t nr;
    err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    uint32_t type;
    if (!per_dpu && common != NULL) type = mram ? JOB_COPY_MRAM_TO_RANK : JOB_COPY_WRAM_TO_RANK;
    else if (to_dpu) type = mram ? JOB_COPY_MRAM_TO_MATRIX : JOB_COPY_WRAM_TO_MATRIX;
    else type = mram ? JOB_COPY_MRAM_FROM_MATRIX : JOB_COPY_WRAM_FROM_MATRIX;
    struct emu_job **jobs = new_jobs(nr, type);
    if (jobs == NULL) return DPU_ERR_SYSTEM;
    for (uint32_t i = 0; i < nr; ++i) {
        struct emu_job *j = jobs[i];
        j->symbol = symbol;
        j->offset = offset;
        j->length = length;
        j->to_dpu = to_dpu;
        if (set.kind == DPU_SET_DPU) {
            j->dpu = set.dpu;
            j->one = per_dpu ? set.dpu->xfer_buffer : common != NULL ? (void *)common : one;
        } else if (per_dpu) { /* the transfer matrix is copied into the job (libdpu: dpu_transfer_matrix_copy) */
            j->buffers = calloc(ranks[i]->nr_dpus, sizeof *j->buffers);
            if (j->buffers == NULL) {
                for (uint32_t k = 0; k < nr; ++k) free_job(jobs[k]);
                free(jobs);
                return DPU_ERR_SYSTEM;
            }
            for (uint32_t k = 0; k < ranks[i]->nr_dpus; ++k) j->buffers[k] = ranks[i]->dpus[k].xfer_buffer;
        } else {
            j->common = common;
        }
    }
    err = do_jobs(ranks, nr, jobs, 1, synchronous);
    free(jobs);
    return err;
}

dpu_error_t dpu_broadcast_to_symbol(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t symbol_offset, const void *src,
    size_t length, dpu_xfer_flags_t flags)
{
    return queue_transfer(set, symbol, symbol_offset, length, true, src, NULL, false, (flags & DPU_XFER_ASYNC) == 0);
}

/* The symbol `name` as every DPU of the set has it (the same program loaded on all). */
static dpu_error_t set_symbol(struct dpu_set_t set, const char *name, struct dpu_symbol_t *symbol)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    dpu_error_t err = common_symbol(v, n, name, symbol);
    free(v);
    return err;
}

dpu_error_t dpu_broadcast_to(struct dpu_set_t set, const char *symbol_name, uint32_t symbol_offset, const void *src,
    size_t length, dpu_xfer_flags_t flags)
{
    struct dpu_symbol_t symbol;
    dpu_error_t err = set_symbol(set, symbol_name, &symbol);
    if (err != DPU_OK) return err;
    return dpu_broadcast_to_symbol(set, symbol, symbol_offset, src, length, flags);
}

dpu_error_t dpu_copy_to(struct dpu_set_t set, const char *symbol_name, uint32_t symbol_offset, const void *src, size_t length)
{
    return dpu_broadcast_to(set, symbol_name, symbol_offset, src, length, DPU_XFER_DEFAULT);
}

dpu_error_t dpu_copy_to_symbol(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t symbol_offset, const void *src,
    size_t length)
{
    return dpu_broadcast_to_symbol(set, symbol, symbol_offset, src, length, DPU_XFER_DEFAULT);
}

dpu_error_t dpu_copy_from_symbol(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t symbol_offset, void *dst,
    size_t length)
{
    if (set.kind != DPU_SET_DPU) return set.kind == DPU_SET_RANKS ? DPU_ERR_INVALID_DPU_SET : DPU_ERR_INTERNAL;
    return queue_transfer(set, symbol, symbol_offset, length, false, NULL, dst, false, true);
}

dpu_error_t dpu_copy_from(struct dpu_set_t set, const char *symbol_name, uint32_t symbol_offset, void *dst, size_t length)
{
    if (set.kind != DPU_SET_DPU) return set.kind == DPU_SET_RANKS ? DPU_ERR_INVALID_DPU_SET : DPU_ERR_INTERNAL;
    if (set.dpu == NULL) return DPU_ERR_INVALID_DPU_SET;
    struct dpu_symbol_t symbol;
    dpu_error_t err = symbol_of(set.dpu, symbol_name, &symbol);
    if (err != DPU_OK) return err;
    return dpu_copy_from_symbol(set, symbol, symbol_offset, dst, length);
}

/* Records the buffer at once (libdpu's transfer matrix); a queued transfer keeps the
 * buffers it was queued with. */
dpu_error_t dpu_prepare_xfer(struct dpu_set_t set, void *buffer)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    for (uint32_t i = 0; i < n; ++i) v[i]->xfer_buffer = buffer;
    free(v);
    return DPU_OK;
}

/* Queued on every rank of the set; synchronous unless DPU_XFER_ASYNC (then the host buffers
 * must stay valid and unchanged until a dpu_sync has returned). */
dpu_error_t dpu_push_xfer_symbol(struct dpu_set_t set, dpu_xfer_t xfer, struct dpu_symbol_t symbol, uint32_t symbol_offset,
    size_t length, dpu_xfer_flags_t flags)
{
    if (xfer != DPU_XFER_TO_DPU && xfer != DPU_XFER_FROM_DPU) return DPU_ERR_INVALID_MEMORY_TRANSFER;
    dpu_error_t err = queue_transfer(set, symbol, symbol_offset, length, xfer == DPU_XFER_TO_DPU, NULL, NULL, true,
        (flags & DPU_XFER_ASYNC) == 0);
    if (flags != DPU_XFER_NO_RESET) { /* as the SDK: any other flags value clears the buffers */
        uint32_t n;
        struct dpu_t **v = set_dpus(set, &n);
        for (uint32_t i = 0; v != NULL && i < n; ++i) v[i]->xfer_buffer = NULL;
        free(v);
    }
    return err;
}

dpu_error_t dpu_push_xfer(struct dpu_set_t set, dpu_xfer_t xfer, const char *symbol_name, uint32_t symbol_offset, size_t length,
    dpu_xfer_flags_t flags)
{
    struct dpu_symbol_t symbol;
    dpu_error_t err = set_symbol(set, symbol_name, &symbol);
    if (err != DPU_OK) return err;
    return dpu_push_xfer_symbol(set, xfer, symbol, symbol_offset, length, flags);
}

/* ------------------------------------------------------------------------------------------ */
/* Launch                                                                                     */

static void *tasklet_main(void *arg)
{
    struct tasklet *t = arg;
    struct dpu_t *d = t->dpu;
    tl_self = t;
    stack_t ss = { .ss_sp = t->alt_stack, .ss_size = ALT_STACK_SIZE, .ss_flags = 0 };
    if (t->alt_stack != NULL) sigaltstack(&ss, NULL);
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo;
        size_t size;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
            t->stack_lo = (uintptr_t)lo;
            t->stack_hi = (uintptr_t)lo + size;
        }
        pthread_attr_destroy(&attr);
    }
    if (sigsetjmp(t->jmp, 1) == 0 && !is_faulted(d)) d->image.main();
    pthread_mutex_lock(&d->mtx);
    t->alive = false;
    t->wait_kind = WAIT_NONE;
    char why[64];
    snprintf(why, sizeof why, "tasklet %u ended", t->id);
    check_deadlock_locked(d, (int)t->id, why);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mtx);
    ss.ss_flags = SS_DISABLE;
    if (t->alt_stack != NULL) sigaltstack(&ss, NULL);
    tl_self = NULL;
    return NULL;
}

static void run_dpu(struct dpu_t *d)
{
    uint32_t nt = d->image.nr_tasklets;
    struct tasklet *ts = calloc(nt, sizeof *ts);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, TASKLET_HOST_STACK);
    for (uint32_t i = 0; ts != NULL && i < nt; ++i) {
        ts[i].dpu = d;
        ts[i].id = i;
        ts[i].alive = true;
    }
    pthread_mutex_lock(&d->mtx);
    d->tasklets = ts;
    d->nr_run = ts != NULL ? nt : 0;
    d->heap_cur = d->heap_start;
    d->ctr.launches++;
    d->ctr.nr_tasklets = nt;
    pthread_mutex_unlock(&d->mtx);
    trace_mram(d, "in", d->kernel_mram_end > d->host_mram_end ? d->kernel_mram_end : d->host_mram_end);
    uint32_t started = 0;
    if (ts == NULL) {
        pthread_mutex_lock(&d->mtx);
        fault_locked(d, -1, "emulator resources", "out of memory starting the tasklets", NULL, 0);
        pthread_mutex_unlock(&d->mtx);
    } else {
        for (; started < nt; ++started) {
            ts[started].alt_stack = malloc(ALT_STACK_SIZE);
            if (pthread_create(&ts[started].thread, &attr, tasklet_main, &ts[started]) != 0) {
                free(ts[started].alt_stack);
                pthread_mutex_lock(&d->mtx);
                for (uint32_t i = started; i < nt; ++i) ts[i].alive = false; /* never run */
                fault_locked(d, (int)started, "emulator resources", "could not start the tasklet's thread", NULL, 0);
                pthread_mutex_unlock(&d->mtx);
                break;
            }
        }
        for (uint32_t i = 0; i < started; ++i) {
            pthread_join(ts[i].thread, NULL);
            free(ts[i].alt_stack);
        }
    }
    pthread_attr_destroy(&attr);
    trace_mram(d, "out", d->kernel_mram_end > d->host_mram_end ? d->kernel_mram_end : d->host_mram_end);
    pthread_mutex_lock(&d->mtx);
    d->tasklets = NULL;
    d->nr_run = 0;
    pthread_mutex_unlock(&d->mtx);
    free(ts);
}

struct launch_pool {
    struct dpu_rank_t *rank;
    struct dpu_t **dpus;
    uint32_t nr_dpus;
    uint32_t next_idx; /* atomic */
};

/* Runs DPUs of a launch, at most parallel_dpus at once over the whole allocation. */
static void *launch_worker(void *arg)
{
    struct launch_pool *pool = arg;
    struct emu_alloc *a = pool->rank->alloc;
    for (;;) {
        uint32_t i = __atomic_fetch_add(&pool->next_idx, 1, __ATOMIC_RELAXED);
        if (i >= pool->nr_dpus) break;
        struct dpu_t *d = pool->dpus[i];
        pthread_mutex_lock(&a->run_m);
        while (a->run_free == 0 || pool->rank->held) pthread_cond_wait(&a->run_c, &a->run_m);
        a->run_free--;
        pthread_mutex_unlock(&a->run_m);
        run_dpu(d);
        pthread_mutex_lock(&a->run_m);
        a->run_free++;
        pthread_cond_broadcast(&a->run_c); /* a held rank's waiter must not swallow the wakeup */
        pthread_mutex_unlock(&a->run_m);
        __atomic_store_n(&d->running, false, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&pool->rank->nr_running, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

static dpu_error_t faults_of(struct dpu_t **v, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i)
        if (is_faulted(v[i])) return DPU_ERR_DPU_FAULT;
    return DPU_OK;
}

/* A launch job (libdpu: dpu_boot_rank / dpu_boot_dpu, then dpu_sync_rank / dpu_sync_dpu):
 * boots the DPUs, waits until every one has stopped, reports a fault. */
static dpu_error_t run_launch(struct dpu_rank_t *r, struct emu_job *j)
{
    struct dpu_t *one[1] = { j->dpu };
    struct dpu_t **v = one;
    uint32_t n = 1;
    if (j->dpu == NULL) {
        v = malloc(r->nr_dpus * sizeof *v);
        if (v == NULL) return DPU_ERR_SYSTEM;
        for (uint32_t i = 0; i < r->nr_dpus; ++i) v[i] = &r->dpus[i];
        n = r->nr_dpus;
    }
    dpu_error_t err = DPU_OK;
    for (uint32_t i = 0; i < n && err == DPU_OK; ++i) {
        if (__atomic_load_n(&v[i]->running, __ATOMIC_ACQUIRE)) err = DPU_ERR_DPU_ALREADY_RUNNING;
        else if (v[i]->load_fault) err = DPU_ERR_DPU_FAULT;
        else if (v[i]->load_id == 0) err = DPU_ERR_NO_PROGRAM_LOADED;
    }
    if (err != DPU_OK) goto out;
    pthread_once(&g_signals_once, install_signal_handlers);
    for (uint32_t i = 0; i < n; ++i) {
        struct dpu_t *d = v[i];
        pthread_mutex_lock(&d->mtx);
        d->faulted = false;
        d->fault_msg[0] = 0;
        d->log_len = 0;
        d->log_truncated = false;
        pthread_mutex_unlock(&d->mtx);
        __atomic_store_n(&d->running, true, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&r->nr_running, n, __ATOMIC_ACQ_REL);
    struct launch_pool pool = { .rank = r, .dpus = v, .nr_dpus = n, .next_idx = 0 };
    uint32_t nw = n < r->alloc->parallel_dpus ? n : r->alloc->parallel_dpus;
    pthread_t workers[64];
    if (nw > 64) nw = 64;
    uint32_t started = 0;
    for (; started + 1 < nw; ++started)
        if (pthread_create(&workers[started], NULL, launch_worker, &pool) != 0) break;
    launch_worker(&pool); /* this thread is a worker too */
    for (uint32_t w = 0; w < started; ++w) pthread_join(workers[w], NULL);
    err = faults_of(v, n);
out:
    if (v != one) free(v);
    return err;
}

dpu_error_t dpu_launch(struct dpu_set_t set, dpu_launch_policy_t policy)
{
    if (policy != DPU_SYNCHRONOUS && policy != DPU_ASYNCHRONOUS) return DPU_ERR_INVALID_LAUNCH_POLICY;
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    struct emu_job **jobs = new_jobs(nr, set.kind == DPU_SET_DPU ? JOB_LAUNCH_DPU : JOB_LAUNCH_RANK);
    if (jobs == NULL) return DPU_ERR_SYSTEM;
    if (set.kind == DPU_SET_DPU) jobs[0]->dpu = set.dpu;
    err = do_jobs(ranks, nr, jobs, 1, policy == DPU_SYNCHRONOUS);
    free(jobs);
    return err;
}

/* A SYNC job on every rank of the set (libdpu's dpu_sync, dpu_polling.c): returns once each
 * rank has run the jobs queued before it, with the first failure among them; a rank whose
 * queue already failed answers its sticky error at once. */
dpu_error_t dpu_sync(struct dpu_set_t set)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    return do_jobs(ranks, nr, NULL, 0, true);
}

/* As the SDK's (dpu_runner.c): dpu_sync first (its error ignored), then the DPUs' state. */
dpu_error_t dpu_status(struct dpu_set_t set, bool *done, bool *fault)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    (void)dpu_sync(set);
    *done = true;
    *fault = false;
    for (uint32_t i = 0; i < n; ++i) {
        if (__atomic_load_n(&v[i]->running, __ATOMIC_ACQUIRE)) *done = false;
        else if (is_faulted(v[i])) *fault = true;
    }
    free(v);
    return DPU_OK;
}

static dpu_error_t run_callback(struct dpu_rank_t *r, struct emu_job *j)
{
    struct emu_single_call *sc = j->single;
    if (sc == NULL) {
        if (j->cb_idx == UINT32_MAX && j->cb_set.kind == DPU_SET_RANKS && j->cb_set.list.nr_ranks > 1) {
            /* a synchronous single call: libdpu locks every rank of the set first */
            struct dpu_set_t s = j->cb_set;
            struct dpu_rank_t **ranks;
            uint32_t nr;
            if (set_ranks(&s, &ranks, &nr) == DPU_OK) drain(ranks, nr);
        }
        return j->fn(j->cb_set, j->cb_idx, j->args);
    }
    (void)r;
    dpu_error_t status = DPU_OK;
    pthread_mutex_lock(&sc->m);
    if (++sc->arrived == sc->nr_ranks && !sc->done) {
        pthread_mutex_unlock(&sc->m);
        status = sc->fn(sc->set, UINT32_MAX, sc->args); /* the last rank to get there calls it */
        pthread_mutex_lock(&sc->m);
        sc->done = true;
        sc->status = status;
        pthread_cond_broadcast(&sc->c);
    } else {
        while (!sc->done) pthread_cond_wait(&sc->c, &sc->m); /* blocking: the rank waits for the call */
    }
    pthread_mutex_unlock(&sc->m);
    single_call_unref(sc);
    return status;
}

/* Queued like libdpu's (dpu_set.c): one CALLBACK job per rank, called with the rank and its
 * index in the set, after the jobs queued before it; DPU_CALLBACK_ASYNC returns at once.
 * DPU_CALLBACK_SINGLE_CALL: once, with the whole set (index -1), when every rank got there
 * (synchronous: on the first rank, once the others are idle).  DPU_CALLBACK_NONBLOCKING is
 * not emulated: the rank waits for its callback as with a blocking one. */
dpu_error_t dpu_callback(struct dpu_set_t set, dpu_error_t (*callback)(struct dpu_set_t, uint32_t, void *), void *args,
    dpu_callback_flags_t flags)
{
    bool is_sync = (flags & DPU_CALLBACK_ASYNC) == 0;
    bool nonblocking = (flags & DPU_CALLBACK_NONBLOCKING) != 0;
    bool single = (flags & DPU_CALLBACK_SINGLE_CALL) != 0;
    if (is_sync && nonblocking) return DPU_ERR_NONBLOCKING_SYNC_CALLBACK;
    if (callback == NULL) return DPU_ERR_INTERNAL;
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    const bool whole_set = set.kind == DPU_SET_DPU || single;
    if (single && is_sync) nr = 1;
    struct emu_job **jobs = new_jobs(nr, JOB_CALLBACK);
    if (jobs == NULL) return DPU_ERR_SYSTEM;
    struct emu_single_call *sc = NULL;
    if (single && nr > 1) {
        sc = calloc(1, sizeof *sc);
        if (sc == NULL) {
            for (uint32_t i = 0; i < nr; ++i) free_job(jobs[i]);
            free(jobs);
            return DPU_ERR_SYSTEM;
        }
        pthread_mutex_init(&sc->m, NULL);
        pthread_cond_init(&sc->c, NULL);
        sc->nr_ranks = sc->refs = nr;
        sc->fn = callback;
        sc->args = args;
        sc->set = set;
    }
    for (uint32_t i = 0; i < nr; ++i) {
        jobs[i]->fn = callback;
        jobs[i]->args = args;
        jobs[i]->single = sc;
        if (whole_set) {
            jobs[i]->cb_set = set;
            jobs[i]->cb_idx = UINT32_MAX;
        } else {
            jobs[i]->cb_set.kind = DPU_SET_RANKS;
            jobs[i]->cb_set.list.nr_ranks = 1;
            jobs[i]->cb_set.list.ranks = &ranks[i];
            jobs[i]->cb_idx = i;
        }
    }
    err = do_jobs(ranks, nr, jobs, 1, is_sync);
    free(jobs);
    return err;
}

dpu_error_t dpu_log_read(struct dpu_set_t set, FILE *stream)
{
    if (set.kind != DPU_SET_DPU || set.dpu == NULL) return DPU_ERR_INVALID_DPU_SET;
    struct dpu_t *d = set.dpu;
    drain(&d->rank, 1);
    fprintf(stream, "=== DPU#0x%x ===\n", d->global_id);
    pthread_mutex_lock(&d->mtx);
    if (d->log_len) fwrite(d->log, 1, d->log_len, stream);
    if (d->log_truncated) fprintf(stream, "\n[log truncated at %u bytes]\n", LOG_CAP);
    pthread_mutex_unlock(&d->mtx);
    fflush(stream);
    return DPU_OK;
}

static dpu_error_t run_job(struct dpu_rank_t *r, struct emu_job *j)
{
    switch (j->type) {
        case JOB_LAUNCH_RANK:
        case JOB_LAUNCH_DPU: return run_launch(r, j);
        case JOB_SYNC: sync_release(j->sync, DPU_OK); return DPU_OK;
        case JOB_LOAD: return run_load(r, j);
        case JOB_CALLBACK: return run_callback(r, j);
        default: return run_transfer(r, j);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Emulator-only API                                                                          */

/* The DPUs of the set once the queues of its ranks have run out (no error is consumed):
 * counters and messages are read when no job of the set is running. */
static dpu_error_t drained_set(struct dpu_set_t set, struct dpu_t ***v, uint32_t *n)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    drain(ranks, nr);
    *v = set_dpus(set, n);
    return *v == NULL ? DPU_ERR_INVALID_DPU_SET : DPU_OK;
}

dpu_error_t dpuemu_wait_idle(struct dpu_set_t set)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    drain(ranks, nr);
    return DPU_OK;
}

dpu_error_t dpuemu_hold_launches(struct dpu_set_t set, bool hold)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    for (uint32_t i = 0; i < nr; ++i) {
        struct emu_alloc *a = ranks[i]->alloc;
        pthread_mutex_lock(&a->run_m);
        ranks[i]->held = hold;
        pthread_cond_broadcast(&a->run_c);
        pthread_mutex_unlock(&a->run_m);
    }
    return DPU_OK;
}

dpu_error_t dpuemu_nr_running(struct dpu_set_t set, uint32_t *nr_running)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    uint32_t running = 0;
    for (uint32_t i = 0; i < n; ++i) running += __atomic_load_n(&v[i]->running, __ATOMIC_ACQUIRE) ? 1u : 0u;
    *nr_running = running;
    free(v);
    return DPU_OK;
}

dpu_error_t dpuemu_queued_jobs(struct dpu_set_t set, uint32_t *nr_jobs)
{
    struct dpu_rank_t **ranks;
    uint32_t nr;
    dpu_error_t err = set_ranks(&set, &ranks, &nr);
    if (err != DPU_OK) return err;
    uint32_t jobs = 0;
    for (uint32_t i = 0; i < nr; ++i) {
        pthread_mutex_lock(&ranks[i]->qm);
        jobs += ranks[i]->nr_jobs;
        pthread_mutex_unlock(&ranks[i]->qm);
    }
    *nr_jobs = jobs;
    return DPU_OK;
}

dpu_error_t dpuemu_get_counters(struct dpu_set_t set, struct dpuemu_counters *c)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = drained_set(set, &v, &n);
    if (err != DPU_OK) return err;
    memset(c, 0, sizeof *c);
    c->nr_dpus = n;
    for (uint32_t i = 0; i < n; ++i) {
        const struct dpuemu_counters *s = &v[i]->ctr;
        if (s->nr_tasklets > c->nr_tasklets) c->nr_tasklets = s->nr_tasklets;
        c->launches += s->launches;
        c->host_to_dpu_bytes += s->host_to_dpu_bytes;
        c->dpu_to_host_bytes += s->dpu_to_host_bytes;
        c->host_to_dpu_calls += s->host_to_dpu_calls;
        c->dpu_to_host_calls += s->dpu_to_host_calls;
        c->dma_cycles_model += __atomic_load_n(&v[i]->dma_cycles, __ATOMIC_RELAXED);
        if (s->wram_static_bytes > c->wram_static_bytes) c->wram_static_bytes = s->wram_static_bytes;
        if (s->wram_heap_peak > c->wram_heap_peak) c->wram_heap_peak = s->wram_heap_peak;
        for (int t = 0; t < MAX_TASKLETS; ++t) {
            const struct dpuemu_tasklet_counters *a = &s->tasklet[t];
            struct dpuemu_tasklet_counters *b = &c->tasklet[t];
            b->mram_read_calls += a->mram_read_calls;
            b->mram_read_bytes += a->mram_read_bytes;
            b->mram_write_calls += a->mram_write_calls;
            b->mram_write_bytes += a->mram_write_bytes;
            c->mram_read_calls += a->mram_read_calls;
            c->mram_read_bytes += a->mram_read_bytes;
            c->mram_write_calls += a->mram_write_calls;
            c->mram_write_bytes += a->mram_write_bytes;
        }
    }
    free(v);
    return DPU_OK;
}

dpu_error_t dpuemu_reset_counters(struct dpu_set_t set)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = drained_set(set, &v, &n);
    if (err != DPU_OK) return err;
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t statics = v[i]->ctr.wram_static_bytes;
        memset(&v[i]->ctr, 0, sizeof v[i]->ctr);
        v[i]->ctr.wram_static_bytes = statics;
        v[i]->dma_cycles = v[i]->dma_instr = 0;
        v[i]->perf_base_cycles = v[i]->perf_base_instr = 0;
    }
    free(v);
    return DPU_OK;
}

dpu_error_t dpuemu_fault_message(struct dpu_set_t set, char *buffer, size_t size)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = drained_set(set, &v, &n);
    if (err != DPU_OK) return err;
    if (size > 0) buffer[0] = 0;
    for (uint32_t i = 0; i < n; ++i) {
        pthread_mutex_lock(&v[i]->mtx);
        bool found = v[i]->fault_msg[0] != 0;
        if (found && size > 0) snprintf(buffer, size, "%s", v[i]->fault_msg);
        pthread_mutex_unlock(&v[i]->mtx);
        if (found) break;
    }
    free(v);
    return DPU_OK;
}

dpu_error_t dpuemu_program_info(struct dpu_set_t set, uint32_t *nr_tasklets, uint32_t *wram_globals_bytes,
    uint32_t *stack_bytes_per_tasklet)
{
    uint32_t n;
    struct dpu_t **v;
    dpu_error_t err = drained_set(set, &v, &n);
    if (err != DPU_OK) return err;
    struct dpu_t *d = v[0];
    free(v);
    if (d->load_id == 0) return DPU_ERR_NO_PROGRAM_LOADED;
    *nr_tasklets = d->image.nr_tasklets;
    *wram_globals_bytes = d->image.globals_bytes;
    *stack_bytes_per_tasklet = d->image.stack_size;
    return DPU_OK;
}

dpu_error_t dpuemu_live_dpus(uint32_t *nr_dpus)
{
    if (nr_dpus == NULL) return DPU_ERR_INVALID_DPU_SET;
    *nr_dpus = live_dpus;
    return DPU_OK;
}
