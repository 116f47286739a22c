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
    bool running;  /* guarded by g_lock */
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
};

struct dpu_rank_t {
    uint32_t id;
    uint32_t nr_dpus;
    struct dpu_t *dpus;
    struct emu_alloc *alloc;
};

struct emu_alloc {
    uint32_t nr_ranks;
    struct dpu_rank_t **rank_list; /* what the set's list.ranks points to */
    struct dpu_rank_t *ranks;
    uint32_t parallel_dpus;
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

struct launch_job {
    struct launch_job *next;
    struct dpu_t **dpus;
    uint32_t nr_dpus;
    uint32_t next_idx; /* atomic */
    uint32_t finished; /* guarded by g_lock */
    uint32_t nr_workers;
    pthread_t *workers;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* running flags, jobs */
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
static struct launch_job *g_jobs;
static uint64_t g_load_counter;
static __thread struct tasklet *tl_self;

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */

const char *dpu_error_to_string(dpu_error_t status)
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
        default:
            if (status & DPU_ERR_ASYNC_JOBS) return "asynchronous job error";
            return "unknown error";
    }
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
    uint32_t nr_dpus, dpus_per_rank, parallel;
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
 * default: the number of CPUs).  Other keys (profiles written for the SDK) are ignored. */
static dpu_error_t parse_profile(const char *profile, struct profile *p)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    p->nr_dpus = DEFAULT_NR_DPUS;
    p->dpus_per_rank = DEFAULT_DPUS_PER_RANK;
    p->parallel = cpus > 0 ? (uint32_t)cpus : 1;
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
        }
#undef KEY
        s = end;
    }
    return DPU_OK;
}

static dpu_error_t alloc_dpus(uint32_t nr_dpus, const struct profile *p, struct dpu_set_t *set)
{
    uint32_t nr_ranks = (nr_dpus + p->dpus_per_rank - 1) / p->dpus_per_rank;
    struct emu_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) return DPU_ERR_SYSTEM;
    a->nr_ranks = nr_ranks;
    a->parallel_dpus = p->parallel;
    a->rank_list = calloc(nr_ranks, sizeof *a->rank_list);
    a->ranks = calloc(nr_ranks, sizeof *a->ranks);
    if (a->rank_list == NULL || a->ranks == NULL) goto fail;
    uint32_t left = nr_dpus, id = 0;
    for (uint32_t r = 0; r < nr_ranks; ++r) {
        struct dpu_rank_t *rank = &a->ranks[r];
        a->rank_list[r] = rank;
        rank->id = r;
        rank->alloc = a;
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
    set->kind = DPU_SET_RANKS;
    set->list.nr_ranks = nr_ranks;
    set->list.ranks = a->rank_list;
    return DPU_OK;
fail:
    if (a->ranks != NULL)
        for (uint32_t r = 0; r < nr_ranks; ++r) free(a->ranks[r].dpus);
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
/* Running state                                                                              */

/* Joins the worker threads of every finished launch.  g_lock held. */
static void reap_jobs_locked(void)
{
    struct launch_job **pp = &g_jobs;
    while (*pp) {
        struct launch_job *j = *pp;
        if (j->finished == j->nr_dpus) {
            *pp = j->next;
            for (uint32_t w = 0; w < j->nr_workers; ++w) pthread_join(j->workers[w], NULL);
            free(j->workers);
            free(j->dpus);
            free(j);
        } else {
            pp = &j->next;
        }
    }
}

/* Waits until no DPU of v runs (later operations queue behind a launch, as on a rank). */
static void wait_idle(struct dpu_t **v, uint32_t n)
{
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; i < n; ++i)
        while (v[i]->running) pthread_cond_wait(&g_done, &g_lock);
    reap_jobs_locked();
    pthread_mutex_unlock(&g_lock);
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

dpu_error_t dpu_free(struct dpu_set_t set)
{
    if (set.kind != DPU_SET_RANKS || set.list.nr_ranks == 0) return DPU_ERR_INVALID_DPU_SET;
    struct emu_alloc *a = set.list.ranks[0]->alloc;
    if (a == NULL || set.list.ranks != a->rank_list || set.list.nr_ranks != a->nr_ranks) return DPU_ERR_INVALID_DPU_SET;
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v != NULL) {
        wait_idle(v, n);
        free(v);
    }
    for (uint32_t r = 0; r < a->nr_ranks; ++r) {
        for (uint32_t i = 0; i < a->ranks[r].nr_dpus; ++i) {
            struct dpu_t *d = &a->ranks[r].dpus[i];
            unload_image(d);
            free(d->log);
            pthread_mutex_destroy(&d->mtx);
            pthread_cond_destroy(&d->cond);
        }
        free(a->ranks[r].dpus);
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

static dpu_error_t load_one(struct dpu_t *d, const uint8_t *buf, size_t size, const struct elf_info *info, uint64_t load_id,
    char *why, size_t why_size)
{
    struct emu_image *im = &d->image;
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

dpu_error_t dpu_load(struct dpu_set_t set, const char *binary_path, struct dpu_program_t **program)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    wait_idle(v, n);
    dpu_error_t err;
    size_t size = 0;
    uint8_t *buf = read_file(binary_path, &size, &err);
    if (buf == NULL) {
        free(v);
        return err;
    }
    struct elf_info info;
    if (!parse_elf(buf, size, &info)) {
        free(buf);
        free(v);
        return DPU_ERR_ELF_INVALID_FILE;
    }
    pthread_mutex_lock(&g_lock);
    uint64_t load_id = ++g_load_counter;
    pthread_mutex_unlock(&g_lock);
    err = DPU_OK;
    for (uint32_t i = 0; i < n; ++i) {
        struct dpu_t *d = v[i];
        unload_image(d);
        char why[640] = "";
        dpu_error_t e = load_one(d, buf, size, &info, load_id, why, sizeof why);
        if (e != DPU_OK) {
            if (!d->load_fault) {
                /* not a rule of the hardware: leave no program, keep the reason readable */
                unload_image(d);
                pthread_mutex_lock(&d->mtx);
                snprintf(d->fault_msg, sizeof d->fault_msg, "dpu_load(%.200s) failed on DPU %u: %.400s", binary_path,
                    d->global_id, why);
                pthread_mutex_unlock(&d->mtx);
            }
            if (err == DPU_OK) err = e;
        }
    }
    if (program != NULL) *program = err == DPU_OK ? &v[0]->program : NULL;
    free(buf);
    free(v);
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

/* One buffer for every DPU (broadcast) or each DPU's prepared buffer (per_dpu). */
static dpu_error_t transfer(struct dpu_t **v, uint32_t n, struct dpu_symbol_t symbol, uint32_t offset, size_t length,
    bool to_dpu, void *common, bool per_dpu)
{
    dpu_error_t err = DPU_OK;
    for (uint32_t i = 0; i < n && err == DPU_OK; ++i) {
        uint8_t *p;
        void *host = per_dpu ? v[i]->xfer_buffer : common;
        if (host == NULL) continue; /* no buffer prepared for this DPU: not transferred */
        err = resolve(v[i], symbol, offset, length, &p);
        if (err != DPU_OK) break;
        if (to_dpu) memcpy(p, host, length);
        else memcpy(host, p, length);
        count_host(v[i], length, to_dpu);
    }
    return err;
}

static dpu_error_t with_set(struct dpu_set_t set, struct dpu_t ***v, uint32_t *n)
{
    *v = set_dpus(set, n);
    if (*v == NULL) return DPU_ERR_INVALID_DPU_SET;
    wait_idle(*v, *n);
    return DPU_OK;
}

dpu_error_t dpu_broadcast_to_symbol(struct dpu_set_t set, struct dpu_symbol_t symbol, uint32_t symbol_offset, const void *src,
    size_t length, dpu_xfer_flags_t flags)
{
    (void)flags;
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    for (uint32_t i = 0; i < n && err == DPU_OK; ++i)
        if (v[i]->load_id == 0) err = DPU_ERR_NO_PROGRAM_LOADED;
    if (err == DPU_OK) err = transfer(v, n, symbol, symbol_offset, length, true, (void *)src, false);
    free(v);
    return err;
}

/* The symbol `name` as every DPU of the set has it (the same program loaded on all). */
static dpu_error_t set_symbol(struct dpu_set_t set, const char *name, struct dpu_symbol_t *symbol)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    err = common_symbol(v, n, name, symbol);
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
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    err = transfer(v, n, symbol, symbol_offset, length, false, dst, false);
    free(v);
    return err;
}

dpu_error_t dpu_copy_from(struct dpu_set_t set, const char *symbol_name, uint32_t symbol_offset, void *dst, size_t length)
{
    if (set.kind != DPU_SET_DPU) return set.kind == DPU_SET_RANKS ? DPU_ERR_INVALID_DPU_SET : DPU_ERR_INTERNAL;
    struct dpu_symbol_t symbol;
    dpu_error_t err = symbol_of(set.dpu, symbol_name, &symbol);
    if (err != DPU_OK) return err;
    return dpu_copy_from_symbol(set, symbol, symbol_offset, dst, length);
}

dpu_error_t dpu_prepare_xfer(struct dpu_set_t set, void *buffer)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    for (uint32_t i = 0; i < n; ++i) v[i]->xfer_buffer = buffer;
    free(v);
    return DPU_OK;
}

dpu_error_t dpu_push_xfer_symbol(struct dpu_set_t set, dpu_xfer_t xfer, struct dpu_symbol_t symbol, uint32_t symbol_offset,
    size_t length, dpu_xfer_flags_t flags)
{
    if (xfer != DPU_XFER_TO_DPU && xfer != DPU_XFER_FROM_DPU) return DPU_ERR_INVALID_MEMORY_TRANSFER;
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    err = transfer(v, n, symbol, symbol_offset, length, xfer == DPU_XFER_TO_DPU, NULL, true);
    if (flags != DPU_XFER_NO_RESET) /* as the SDK: any other flags value clears the buffers */
        for (uint32_t i = 0; i < n; ++i) v[i]->xfer_buffer = NULL;
    free(v);
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
    pthread_mutex_lock(&d->mtx);
    d->tasklets = NULL;
    d->nr_run = 0;
    pthread_mutex_unlock(&d->mtx);
    free(ts);
}

static void *worker_main(void *arg)
{
    struct launch_job *j = arg;
    for (;;) {
        uint32_t i = __atomic_fetch_add(&j->next_idx, 1, __ATOMIC_RELAXED);
        if (i >= j->nr_dpus) break;
        run_dpu(j->dpus[i]);
        pthread_mutex_lock(&g_lock);
        j->dpus[i]->running = false;
        j->finished++;
        pthread_cond_broadcast(&g_done);
        pthread_mutex_unlock(&g_lock);
    }
    return NULL;
}

static dpu_error_t faults_of(struct dpu_t **v, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i)
        if (is_faulted(v[i])) return DPU_ERR_DPU_FAULT;
    return DPU_OK;
}

dpu_error_t dpu_launch(struct dpu_set_t set, dpu_launch_policy_t policy)
{
    if (policy != DPU_SYNCHRONOUS && policy != DPU_ASYNCHRONOUS) return DPU_ERR_INVALID_LAUNCH_POLICY;
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    for (uint32_t i = 0; i < n && err == DPU_OK; ++i) {
        if (v[i]->load_fault) err = DPU_ERR_DPU_FAULT;
        else if (v[i]->load_id == 0) err = DPU_ERR_NO_PROGRAM_LOADED;
    }
    if (err != DPU_OK) {
        free(v);
        return err;
    }
    pthread_once(&g_signals_once, install_signal_handlers);
    struct launch_job *j = calloc(1, sizeof *j);
    uint32_t parallel = v[0]->rank->alloc->parallel_dpus;
    if (set.kind == DPU_SET_DPU) parallel = 1;
    uint32_t nw = n < parallel ? n : parallel;
    if (j == NULL || (j->workers = calloc(nw, sizeof *j->workers)) == NULL) {
        free(j);
        free(v);
        return DPU_ERR_SYSTEM;
    }
    j->dpus = v;
    j->nr_dpus = n;
    for (uint32_t i = 0; i < n; ++i) {
        struct dpu_t *d = v[i];
        pthread_mutex_lock(&d->mtx);
        d->faulted = false;
        d->fault_msg[0] = 0;
        d->log_len = 0;
        d->log_truncated = false;
        pthread_mutex_unlock(&d->mtx);
    }
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; i < n; ++i) v[i]->running = true;
    for (uint32_t w = 0; w < nw; ++w) {
        if (pthread_create(&j->workers[w], NULL, worker_main, j) != 0) break;
        j->nr_workers++;
    }
    if (j->nr_workers == 0) {
        for (uint32_t i = 0; i < n; ++i) v[i]->running = false;
        pthread_mutex_unlock(&g_lock);
        free(j->workers);
        free(j);
        free(v);
        return DPU_ERR_SYSTEM;
    }
    j->next = g_jobs;
    g_jobs = j;
    pthread_mutex_unlock(&g_lock);
    if (policy == DPU_ASYNCHRONOUS) return DPU_OK;
    return dpu_sync(set);
}

dpu_error_t dpu_sync(struct dpu_set_t set)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    err = faults_of(v, n);
    free(v);
    return err;
}

/* Does not wait (the SDK's dpu_status also synchronises first; polling works with both). */
dpu_error_t dpu_status(struct dpu_set_t set, bool *done, bool *fault)
{
    uint32_t n;
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    *done = true;
    *fault = false;
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; i < n; ++i) {
        if (v[i]->running) *done = false;
        else if (is_faulted(v[i])) *fault = true;
    }
    reap_jobs_locked();
    pthread_mutex_unlock(&g_lock);
    free(v);
    return DPU_OK;
}

dpu_error_t dpu_callback(struct dpu_set_t set, dpu_error_t (*callback)(struct dpu_set_t, uint32_t, void *), void *args,
    dpu_callback_flags_t flags)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
    if (err != DPU_OK) return err;
    free(v);
    /* run in the calling thread, after the set's pending work, whatever the flags */
    if ((flags & DPU_CALLBACK_SINGLE_CALL) && (flags & DPU_CALLBACK_ASYNC) && (flags & DPU_CALLBACK_NONBLOCKING))
        return callback(set, 0, args);
    struct dpu_set_t rank;
    uint32_t i;
    DPU_RANK_FOREACH(set, rank, i)
    {
        err = callback(rank, i, args);
        if (err != DPU_OK) return err;
    }
    return DPU_OK;
}

dpu_error_t dpu_log_read(struct dpu_set_t set, FILE *stream)
{
    if (set.kind != DPU_SET_DPU || set.dpu == NULL) return DPU_ERR_INVALID_DPU_SET;
    struct dpu_t *d = set.dpu;
    struct dpu_t *v[1] = { d };
    wait_idle(v, 1);
    fprintf(stream, "=== DPU#0x%x ===\n", d->global_id);
    pthread_mutex_lock(&d->mtx);
    if (d->log_len) fwrite(d->log, 1, d->log_len, stream);
    if (d->log_truncated) fprintf(stream, "\n[log truncated at %u bytes]\n", LOG_CAP);
    pthread_mutex_unlock(&d->mtx);
    fflush(stream);
    return DPU_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Emulator-only API                                                                          */

dpu_error_t dpuemu_get_counters(struct dpu_set_t set, struct dpuemu_counters *c)
{
    struct dpu_t **v;
    uint32_t n;
    dpu_error_t err = with_set(set, &v, &n);
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
    dpu_error_t err = with_set(set, &v, &n);
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
    dpu_error_t err = with_set(set, &v, &n);
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
    struct dpu_t **v = set_dpus(set, &n);
    if (v == NULL) return DPU_ERR_INVALID_DPU_SET;
    struct dpu_t *d = v[0];
    free(v);
    if (d->load_id == 0) return DPU_ERR_NO_PROGRAM_LOADED;
    *nr_tasklets = d->image.nr_tasklets;
    *wram_globals_bytes = d->image.globals_bytes;
    *stack_bytes_per_tasklet = d->image.stack_size;
    return DPU_OK;
}
