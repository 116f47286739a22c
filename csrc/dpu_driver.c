/* dpu_driver.c: the host driver of the DPU backend (see pim_dpu_driver.h).
 *
 * Written against UPMEM's libdpu API (dpu.h) only, so that the same file builds against the
 * real SDK and against pimloader's emulator. The emulator's extras (DMA counters, fault
 * details) are used only inside `#ifdef PIMLOADER_DPU_EMULATOR` blocks, in
 * dpu_emulator_hooks.c (pim_dpu_fault_detail and the counters). No DPU_ASSERT, no exit(): every dpu_error_t becomes a return
 * code and a message naming the call and the DPU.
 *
 * One batch (pim_dpu_submit, then pim_dpu_wait; pim_dpu_run = both):
 *   1. plan the batch (csrc/dpu_plan.c, pim_dpu_plan.h; the cost model reads the same plan):
 *      check every sample and plan it (segment width, source buffer, row ring) against the
 *      per-tasklet WRAM arena of the loaded kernel (pim_dpu_layout.h), refusing what cannot
 *      fit; estimate its work per output row from its axis tables (pim_dpu_row_work);
 *   2. the plan splits the samples into contiguous runs over the DPUs that minimise the largest
 *      run's estimated work (fewer samples than DPUs: the extra DPUs get an empty chunk), and
 *      each DPU's output rows into NR_TASKLETS bands of about equal estimated work; then the
 *      caller's buffers (sources, lookup table, output slots) are checked against the samples;
 *   3. pack each DPU's chunk into one of PIM_DPU_MAX_PENDING host staging slots: header,
 *      descriptors rewritten for the DPU, jobs, the axis tables its samples use, the lookup
 *      table, and each crop box's pixels (only the box travels, not the whole decoded image);
 *   4. queue, with libdpu's asynchronous calls: dpu_push_xfer(DPU_XFER_ASYNC) of the headers to
 *      every DPU (72 bytes each) and of the rest to the DPUs with samples, at one common padded
 *      length; dpu_launch(DPU_ASYNCHRONOUS); dpu_push_xfer(FROM_DPU, DPU_XFER_ASYNC) of the
 *      status blocks + outputs into staging; dpu_callback(DPU_CALLBACK_ASYNC) marking the
 *      batch done on each rank. Submit returns here: the host decodes the next batch while the
 *      DPUs work.
 *   5. wait: dpu_sync on each rank; a rank whose callback did not run failed the batch (the
 *      first such batch on the rank is the one whose job failed, dpu_status finds the faulted
 *      DPU; later ones were dropped by libdpu); else check each DPU's status and copy each
 *      sample's rows into its slot of the output batch. After a failure the next submit loads
 *      the program again, or allocates the DPUs again if libdpu kept the rank's error.
 * libdpu runs each rank's jobs in order and refuses host access to a rank's MRAM while any of
 * its DPUs runs, so one MRAM layout serves every batch: the next batch's transfer is queued
 * right behind this batch's launch and gather, and runs when they are done (see docs/dpu.md).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpu.h>
#ifdef PIM_DPU_EMULATED
#include <dpu_emulator.h>
#endif

#include "pim_dpu_chunk.h"
#include "pim_dpu_layout.h"
#include "pim_dpu_plan.h"
#include "pim_params.h"
#include "pim_error.h"


#include "pim_dpu_driver_state.h"

/* dpu_error_to_string: the SDK returns a string the caller frees, the emulator a constant. */
void pim_dpu_error_text(dpu_error_t e, char *buf, size_t n)
{
    const char *s = dpu_error_to_string(e);
    snprintf(buf, n, "%s (dpu_error_t 0x%x)", s ? s : "unknown error", (unsigned)e);
#ifndef PIMLOADER_DPU_EMULATOR
    free((void *)s);
#endif
}

int32_t pim_dpu_find_fault(const pim_dpu_driver_t *drv, uint32_t first, uint32_t count)
{
    for (uint32_t d = first; d < first + count; d++) {
        bool is_done = false, fault = false;
        if (dpu_status(drv->dpus[d], &is_done, &fault) == DPU_OK && fault)
            return (int32_t)d;
    }
    return -1;
}

/* The plain error of a libdpu status: a failed asynchronous job comes back (from later calls
 * on its rank) as DPU_ERR_ASYNC_JOBS | job type << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT | error. */
static dpu_error_t plain_error(dpu_error_t e)
{
    return (dpu_error_t)((uint32_t)e & ((1u << DPU_ERROR_ASYNC_JOB_TYPE_SHIFT) - 1));
}

static int dpu_fail(pim_dpu_driver_t *drv, char *err, uint32_t err_len, const char *call, int32_t dpu,
                    dpu_error_t e)
{
    char text[200];
    pim_dpu_error_text(e, text, sizeof text);
    if (drv)
        drv->last_dpu = dpu;
    if (dpu >= 0)
        set_err(err, err_len, "%s failed on DPU %d: %s", call, dpu, text);
    else if ((uint32_t)e & (uint32_t)DPU_ERR_ASYNC_JOBS)
        set_err(err, err_len, "%s refused: a job queued earlier on the DPUs failed (%s); wait for the batches "
                "in flight to see which DPU", call, text);
    else
        set_err(err, err_len, "%s failed on the set of %u DPUs: %s", call, drv ? drv->nr_dpus : 0u, text);
    return PIM_DPU_E_LIBDPU;
}

int pim_dpu_load_program(pim_dpu_driver_t *drv, const char *binary, char *err, uint32_t err_len)
{
    struct dpu_program_t *program = NULL;
    dpu_error_t e = dpu_load(drv->set, binary, &program);
    drv->loads++;
    struct dpu_symbol_t heap = { 0, 0 };
    if (e == DPU_OK && program != NULL)
        e = dpu_get_symbol(program, DPU_MRAM_HEAP_POINTER_NAME, &heap);
    if (e != DPU_OK) {
        char text[200];
        pim_dpu_error_text(e, text, sizeof text);
        drv->loaded = NULL;
        drv->recover = true;
        set_err(err, err_len, "dpu_load(%s) failed on the set of %u DPUs: %s", binary, drv->nr_dpus, text);
        return PIM_DPU_E_LIBDPU;
    }
    drv->loaded = binary;
    drv->loaded_heap = heap.address;
    if (binary == drv->binary)
        drv->kernel_heap = heap.address;
    return PIM_DPU_OK;
}

uint32_t pim_dpu_loads(const pim_dpu_driver_t *drv)
{
    return drv ? drv->loads : 0;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void unbind_set(pim_dpu_driver_t *drv)
{
    free(drv->dpus);
    free(drv->ranks);
    free(drv->rank_of);
    free(drv->rank_err);
    free(drv->rank_culprit);
    free(drv->rank_fault_dpu);
    drv->dpus = drv->ranks = NULL;
    drv->rank_of = drv->rank_culprit = NULL;
    drv->rank_err = NULL;
    drv->rank_fault_dpu = NULL;
    for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING; k++) {
        free(drv->slots[k].headers);
        free(drv->slots[k].rank_done);
        drv->slots[k].headers = NULL;
        drv->slots[k].rank_done = NULL;
    }
}

/* The per-DPU and per-rank views of drv->set (DPU_FOREACH order inside DPU_RANK_FOREACH). */
static int bind_set(pim_dpu_driver_t *drv, char *err, uint32_t err_len)
{
    dpu_error_t e = dpu_get_nr_dpus(drv->set, &drv->nr_dpus);
    if (e == DPU_OK)
        e = dpu_get_nr_ranks(drv->set, &drv->nr_ranks);
    if (e != DPU_OK)
        return dpu_fail(drv, err, err_len, "dpu_get_nr_dpus/dpu_get_nr_ranks", -1, e);
    const uint32_t D = drv->nr_dpus ? drv->nr_dpus : 1, R = drv->nr_ranks ? drv->nr_ranks : 1;
    drv->dpus = calloc(D, sizeof *drv->dpus);
    drv->rank_of = calloc(D, sizeof *drv->rank_of);
    drv->ranks = calloc(R, sizeof *drv->ranks);
    drv->rank_err = calloc(R, sizeof *drv->rank_err);
    drv->rank_culprit = calloc(R, sizeof *drv->rank_culprit);
    drv->rank_fault_dpu = calloc(R, sizeof *drv->rank_fault_dpu);
    bool ok = drv->dpus && drv->rank_of && drv->ranks && drv->rank_err && drv->rank_culprit && drv->rank_fault_dpu;
    for (uint32_t k = 0; ok && k < PIM_DPU_MAX_PENDING; k++) {
        drv->slots[k].headers = calloc(D, sizeof *drv->slots[k].headers);
        drv->slots[k].rank_done = calloc(R, 1);
        ok = drv->slots[k].headers && drv->slots[k].rank_done;
    }
    if (!ok) {
        unbind_set(drv);
        set_err(err, err_len, "out of host memory");
        return PIM_DPU_E_NOMEM;
    }
    struct dpu_set_t rank, dpu;
    uint32_t r, k = 0;
    DPU_RANK_FOREACH(drv->set, rank, r)
    {
        if (r < drv->nr_ranks)
            drv->ranks[r] = rank;
        DPU_FOREACH(rank, dpu)
        {
            if (k < drv->nr_dpus) {
                drv->dpus[k] = dpu;
                drv->rank_of[k] = r;
            }
            k++;
        }
    }
    if (k != drv->nr_dpus) {
        unbind_set(drv);
        set_err(err, err_len, "the ranks of the set hold %u DPUs, dpu_get_nr_dpus says %u", k, drv->nr_dpus);
        return PIM_DPU_E_LIBDPU;
    }
    for (uint32_t i = 0; i < drv->nr_ranks; i++)
        drv->rank_fault_dpu[i] = -1;
    return PIM_DPU_OK;
}

int pim_dpu_open(const char *profile, uint32_t nr_dpus, const char *binary, uint32_t nr_tasklets,
                 uint32_t stack_bytes, pim_dpu_driver_t **out, char *err, uint32_t err_len)
{
    if (out == NULL) {
        set_err(err, err_len, "pim_dpu_open: no output pointer");
        return PIM_DPU_E_ARG;
    }
    *out = NULL;
    const uint32_t arena = pim_dpu_arena_bytes(nr_tasklets, stack_bytes);
    if (arena == 0) {
        set_err(err, err_len, "%u tasklets with %u-byte stacks leave no WRAM for the kernel (1..24 tasklets)",
                nr_tasklets, stack_bytes);
        return PIM_DPU_E_ARG;
    }
    pim_dpu_driver_t *drv = calloc(1, sizeof *drv);
    if (drv == NULL) {
        set_err(err, err_len, "out of host memory");
        return PIM_DPU_E_NOMEM;
    }
    drv->nr_tasklets = nr_tasklets;
    drv->arena = arena;
    drv->last_dpu = -1;
    drv->requested_dpus = nr_dpus;
    drv->binary = strdup(binary ? binary : "");
    drv->profile = strdup(profile ? profile : "");
    if (drv->binary == NULL || drv->profile == NULL) {
        set_err(err, err_len, "out of host memory");
        free(drv->binary);
        free(drv->profile);
        free(drv);
        return PIM_DPU_E_NOMEM;
    }
    dpu_error_t e = dpu_alloc(nr_dpus, drv->profile, &drv->set);
    if (e != DPU_OK) {
        char text[200];
        pim_dpu_error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_alloc(%u DPUs, profile \"%s\") failed: %s", nr_dpus, drv->profile, text);
        free(drv->binary);
        free(drv->profile);
        free(drv);
        return PIM_DPU_E_LIBDPU;
    }
    int rc = bind_set(drv, err, err_len);
    if (rc != PIM_DPU_OK)
        goto fail;
    rc = pim_dpu_load_program(drv, drv->binary, err, err_len);
    if (rc != PIM_DPU_OK)
        goto fail;
    *out = drv;
    return PIM_DPU_OK;
fail:
    dpu_free(drv->set);
    unbind_set(drv);
    free(drv->binary);
    free(drv->profile);
    free(drv);
    return rc;
}

static void drain(pim_dpu_driver_t *drv);

int pim_dpu_close(pim_dpu_driver_t *drv, char *err, uint32_t err_len)
{
    if (drv == NULL)
        return PIM_DPU_OK;
    int rc = PIM_DPU_OK;
    /* batches in flight: libdpu's queued jobs still read and write their staging, so they
     * are run to the end (dpu_sync) and their outputs dropped before anything is freed */
    pim_dpu_release_hold(drv);
    drain(drv);
    if (!drv->lost) {
        dpu_error_t e = dpu_free(drv->set);
        if (e != DPU_OK)
            rc = dpu_fail(NULL, err, err_len, "dpu_free", -1, e);
    }
    unbind_set(drv);
    for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING; k++) {
        batch_slot_t *sl = &drv->slots[k];
        free(sl->chunks);
        free(sl->gathers);
        free(sl->in);
        free(sl->out);
    }
    free(drv->binary);
    free(drv->profile);
    free(drv);
    return rc;
}

uint32_t pim_dpu_nr_dpus(const pim_dpu_driver_t *drv)
{
    return drv ? drv->nr_dpus : 0;
}

int32_t pim_dpu_last_dpu(const pim_dpu_driver_t *drv)
{
    return drv ? drv->last_dpu : -1;
}

void pim_dpu_run_info(const pim_dpu_driver_t *drv, pim_dpu_run_info_t *info)
{
    if (drv && info)
        *info = drv->info;
}

void pim_dpu_release_hold(pim_dpu_driver_t *drv)
{
    if (drv)
        __atomic_store_n(&drv->held, 0, __ATOMIC_RELEASE);
}

uint32_t pim_dpu_pending(const pim_dpu_driver_t *drv)
{
    uint32_t n = 0;
    for (uint32_t k = 0; drv && k < PIM_DPU_MAX_PENDING; k++)
        n += drv->slots[k].state != SLOT_FREE;
    return n;
}

void pim_dpu_recoveries(const pim_dpu_driver_t *drv, uint32_t *reloads, uint32_t *reallocs)
{
    if (reloads)
        *reloads = drv ? drv->reloads : 0;
    if (reallocs)
        *reallocs = drv ? drv->reallocs : 0;
}

/* ---- one batch ----------------------------------------------------------------------- */

/* ---- batches in flight --------------------------------------------------------------- */

/* Queued behind a batch's gather on each rank (dpu_callback, DPU_CALLBACK_ASYNC): it runs only
 * if every earlier job of the batch ran on that rank. libdpu drops the queued jobs behind a
 * failed one without running them (dpu_thread_update_status), so after a dpu_sync a rank whose
 * flag is still clear did not finish the batch. */
static dpu_error_t batch_done_on_rank(struct dpu_set_t rank, uint32_t rank_index, void *arg)
{
    (void)rank;
    batch_slot_t *sl = arg;
    __atomic_store_n(&sl->rank_done[rank_index], 1, __ATOMIC_RELEASE);
    return DPU_OK;
}

static void describe_rank_failure(pim_dpu_driver_t *drv, batch_slot_t *sl, uint32_t r);

/* PIM_DPU_DEBUG_HOLD (a test hook): queued on every rank ahead of a batch's jobs, it keeps the
 * rank's queue waiting until pim_dpu_release_hold, so that a test can see what the host does
 * while a batch has certainly not run. */
static dpu_error_t hold_rank(struct dpu_set_t rank, uint32_t rank_index, void *arg)
{
    (void)rank;
    (void)rank_index;
    const pim_dpu_driver_t *drv = arg;
    const struct timespec pause = { 0, 1000000 };
    while (__atomic_load_n(&drv->held, __ATOMIC_ACQUIRE))
        nanosleep(&pause, NULL);
    return DPU_OK;
}

/* The outcome of a batch whose jobs have run or were dropped (in submit order). */
static void settle(pim_dpu_driver_t *drv, batch_slot_t *sl)
{
    sl->rc = PIM_DPU_OK;
    sl->dpu = -1;
    sl->msg[0] = '\0';
    /* a rank that did not finish the batch and reported an error first (the batch may also be
     * unfinished on a healthy rank, when its submit met an earlier batch's error half-way) */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t r = 0; r < drv->nr_ranks; r++) {
            if (__atomic_load_n(&sl->rank_done[r], __ATOMIC_ACQUIRE) || (pass == 0 && drv->rank_err[r] == DPU_OK))
                continue;
            describe_rank_failure(drv, sl, r);
            return;
        }
    for (uint32_t d = 0; d < sl->active; d++) {
        pim_dpu_status_t st;
        memcpy(&st, sl->out + (size_t)d * sl->out_xfer, sizeof st);
        if (st.code != PIM_DPU_STATUS_OK || st.batch_id != sl->batch_id) {
            static const char *const what[] = { "no status (the kernel did not finish)", "a bad chunk header",
                                                "a kernel built for other NR_TASKLETS/STACK_SIZE_DEFAULT",
                                                "an invalid descriptor or table", "a segment larger than its WRAM" };
            const uint32_t code = st.batch_id != sl->batch_id ? 0 : (st.code <= 4 ? st.code : 0);
            sl->dpu = (int32_t)d;
            set_err(sl->msg, sizeof sl->msg, "DPU %u kernel refused its chunk: %s (status 0x%x, sample %u of the "
                    "batch, detail %u)", d, what[code], st.code, sl->chunks[d].first + st.sample, st.detail);
            sl->rc = PIM_DPU_E_KERNEL;
            return;
        }
    }
}

/* Batch `sl` did not finish on rank r. The first such batch of the rank is the one whose job
 * failed (libdpu runs a rank's jobs in order); later ones were dropped behind it. */
static void describe_rank_failure(pim_dpu_driver_t *drv, batch_slot_t *sl, uint32_t r)
{
    const dpu_error_t e = drv->rank_err[r];
    char text[200];
    pim_dpu_error_text(e, text, sizeof text);
    uint32_t first_dpu = 0, count = 0;
    for (uint32_t d = 0; d < drv->nr_dpus; d++)
        if (drv->rank_of[d] == r) {
            if (count == 0)
                first_dpu = d;
            count++;
        }
    if (e == DPU_OK) {
        sl->rc = PIM_DPU_E_LIBDPU;
        set_err(sl->msg, sizeof sl->msg, "batch %u did not finish on DPUs %u..%u (rank %u) and libdpu reported "
                "no error", sl->batch_id, first_dpu, first_dpu + count - 1, r);
        return;
    }
    if (drv->rank_culprit[r] != 0 && drv->rank_culprit[r] != sl->batch_id) {
        sl->rc = PIM_DPU_E_LIBDPU;
        sl->dpu = drv->rank_fault_dpu[r];
        set_err(sl->msg, sizeof sl->msg, "batch %u was not run on DPUs %u..%u (rank %u): libdpu dropped the rank's "
                "queued jobs after batch %u failed there (%s)", sl->batch_id, first_dpu, first_dpu + count - 1, r,
                drv->rank_culprit[r], text);
        return;
    }
    drv->rank_culprit[r] = sl->batch_id;
    const int32_t bad = pim_dpu_find_fault(drv, first_dpu, count);
    drv->rank_fault_dpu[r] = bad;
    sl->dpu = bad;
    if (bad >= 0 || plain_error(e) == DPU_ERR_DPU_FAULT) {
        char detail[600];
        pim_dpu_fault_detail(drv, bad, detail, sizeof detail);
        if (bad >= 0) {
            const uint32_t first = (uint32_t)bad < sl->active ? sl->chunks[bad].first : 0;
            const uint32_t n = (uint32_t)bad < sl->active ? sl->chunks[bad].count : 0;
            set_err(sl->msg, sizeof sl->msg, "dpu_launch: DPU %d faulted (batch %u, samples %u..%u): %s%s", bad,
                    sl->batch_id, first, first + n - (n ? 1 : 0), text, detail);
        } else {
            set_err(sl->msg, sizeof sl->msg, "dpu_launch failed on DPUs %u..%u (rank %u), batch %u: %s", first_dpu,
                    first_dpu + count - 1, r, sl->batch_id, text);
        }
        sl->rc = PIM_DPU_E_FAULT;
        return;
    }
    /* not a fault: a transfer, a load or the callback failed; the job type is in the error */
    static const char *const calls[] = { "dpu_launch", "dpu_launch", "dpu_sync", "dpu_push_xfer(TO_DPU, WRAM)",
                                         "dpu_push_xfer(TO_DPU, IRAM)", "dpu_push_xfer(TO_DPU, chunks)",
                                         "dpu_push_xfer(FROM_DPU, WRAM)", "dpu_push_xfer(FROM_DPU, IRAM)",
                                         "dpu_push_xfer(FROM_DPU, outputs)", "dpu_broadcast_to", "dpu_broadcast_to",
                                         "dpu_broadcast_to", "dpu_callback", "dpu_load" };
    const uint32_t type = ((uint32_t)e & ~(uint32_t)DPU_ERR_ASYNC_JOBS) >> DPU_ERROR_ASYNC_JOB_TYPE_SHIFT;
    const char *call = ((uint32_t)e & (uint32_t)DPU_ERR_ASYNC_JOBS) && type < sizeof calls / sizeof calls[0]
                           ? calls[type] : "an asynchronous libdpu job";
    sl->dpu = (int32_t)first_dpu;
    set_err(sl->msg, sizeof sl->msg, "%s failed on DPUs %u..%u (rank %u), batch %u: %s", call, first_dpu,
            first_dpu + count - 1, r, sl->batch_id, text);
    sl->rc = PIM_DPU_E_LIBDPU;
}

/* Runs every queued job to its end: dpu_sync on each rank (a rank's failure does not stop the
 * others', and a sync on one rank returns only once that rank's queue ran or was dropped);
 * then settles the batches that were in flight, oldest first. */
static void drain(pim_dpu_driver_t *drv)
{
    bool queued = false;
    for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING; k++)
        queued |= drv->slots[k].state == SLOT_QUEUED;
    if (!queued || drv->lost)
        return;
    for (uint32_t r = 0; r < drv->nr_ranks; r++) {
        const dpu_error_t e = dpu_sync(drv->ranks[r]);
        if (e != DPU_OK) {
            if (drv->rank_err[r] == DPU_OK)
                drv->rank_err[r] = e;
            drv->recover = true;
        }
    }
    for (;;) {
        batch_slot_t *oldest = NULL;
        for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING; k++)
            if (drv->slots[k].state == SLOT_QUEUED && (oldest == NULL || drv->slots[k].seq < oldest->seq))
                oldest = &drv->slots[k];
        if (oldest == NULL)
            break;
        settle(drv, oldest);
        oldest->state = SLOT_DRAINED;
        if (oldest->rc == PIM_DPU_E_FAULT)
            drv->recover = true;
    }
}

/* Before a new batch, once nothing is queued: after a failed asynchronous job libdpu keeps the
 * rank's error (rank->api.job_error) and refuses every later job with it; only a synchronous
 * call that was waiting when the job failed clears it, and only a new allocation clears it
 * otherwise (dpu_thread_job.c: "we need to allocate the rank again"). So each rank is asked
 * with dpu_sync: if one still answers an error the set is freed and allocated again; else the
 * program is loaded again (a fault leaves WRAM, barriers included, as it stopped). */
int pim_dpu_recover(pim_dpu_driver_t *drv, char *err, uint32_t err_len)
{
    bool sticky = false;
    for (uint32_t r = 0; r < drv->nr_ranks; r++)
        if (dpu_sync(drv->ranks[r]) != DPU_OK)
            sticky = true;
    if (sticky) {
        const uint32_t before = drv->nr_dpus;
        dpu_error_t e = dpu_free(drv->set);
        unbind_set(drv);
        if (e == DPU_OK)
            e = dpu_alloc(drv->requested_dpus, drv->profile, &drv->set);
        char text[200];
        if (e != DPU_OK) {
            pim_dpu_error_text(e, text, sizeof text);
            snprintf(drv->lost_msg, sizeof drv->lost_msg, "the DPUs could not be allocated again after a failure "
                     "(dpu_free/dpu_alloc: %s)", text);
            drv->lost = true;
            set_err(err, err_len, "%s", drv->lost_msg);
            return PIM_DPU_E_LIBDPU;
        }
        int rc = bind_set(drv, err, err_len);
        if (rc == PIM_DPU_OK && drv->nr_dpus != before) {
            set_err(err, err_len, "the new allocation after a failure has %u DPUs, not %u", drv->nr_dpus, before);
            rc = PIM_DPU_E_LIBDPU;
        }
        if (rc != PIM_DPU_OK) {
            snprintf(drv->lost_msg, sizeof drv->lost_msg, "the DPUs could not be allocated again after a failure");
            dpu_free(drv->set);
            unbind_set(drv);
            drv->lost = true;
            return rc;
        }
        drv->reallocs++;
    }
    drv->loaded = NULL; /* a fault leaves WRAM as it stopped: load even the program that is there */
    const int rc = pim_dpu_load_program(drv, drv->binary, err, err_len);
    if (rc != PIM_DPU_OK)
        return rc;
    drv->reloads++;
    for (uint32_t r = 0; r < drv->nr_ranks; r++) {
        drv->rank_err[r] = DPU_OK;
        drv->rank_culprit[r] = 0;
        drv->rank_fault_dpu[r] = -1;
    }
    drv->recover = false;
    return PIM_DPU_OK;
}

static batch_slot_t *find_slot(pim_dpu_driver_t *drv, uint32_t ticket)
{
    for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING; k++)
        if (drv->slots[k].state != SLOT_FREE && drv->slots[k].batch_id == ticket)
            return &drv->slots[k];
    return NULL;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 1;
    void *q = realloc(*p, need);
    if (q == NULL)
        return 0;
    *p = q;
    *cap = need;
    return 1;
}

int pim_dpu_submit(pim_dpu_driver_t *drv, const pim_sample_t *samples, uint32_t n, const uint8_t *const *srcs,
                   const uint64_t *src_bytes, const uint8_t *tables, uint64_t tables_bytes, const void *lut,
                   uint32_t lut_bytes, uint8_t *dst, uint64_t dst_bytes, const pim_dpu_mram_sources_t *mram,
                   uint32_t debug, int32_t debug_dpu, uint32_t *ticket, char *err, uint32_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (ticket)
        *ticket = 0;
    if (drv == NULL) {
        set_err(err, err_len, "the DPU driver is closed");
        return PIM_DPU_E_ARG;
    }
    drv->last_dpu = -1;
    if (ticket == NULL) {
        set_err(err, err_len, "no ticket pointer");
        return PIM_DPU_E_ARG;
    }
    if (drv->lost) {
        set_err(err, err_len, "%s", drv->lost_msg);
        return PIM_DPU_E_LIBDPU;
    }
    memset(&drv->info, 0, sizeof drv->info);
    if (n == 0)
        return PIM_DPU_OK; /* ticket 0: nothing to wait for */
    if (samples == NULL || srcs == NULL || tables == NULL || dst == NULL) {
        set_err(err, err_len, "null samples, sources, tables or output");
        return PIM_DPU_E_ARG;
    }
    if (lut_bytes > PIM_DPU_LUT_MAX) {
        set_err(err, err_len, "lookup table of %u bytes (at most %u fit the kernel's WRAM)", lut_bytes,
                PIM_DPU_LUT_MAX);
        return PIM_DPU_E_ARG;
    }
    batch_slot_t *sl = NULL;
    for (uint32_t k = 0; k < PIM_DPU_MAX_PENDING && sl == NULL; k++)
        if (drv->slots[k].state == SLOT_FREE)
            sl = &drv->slots[k];
    if (sl == NULL) {
        set_err(err, err_len, "%u batches are already in flight: wait for one first", PIM_DPU_MAX_PENDING);
        return PIM_DPU_E_BUSY;
    }
    const uint32_t D = drv->nr_dpus, T = drv->nr_tasklets, active = n < D ? n : D;
    int rc = PIM_DPU_OK;
    uint32_t *offs = malloc(4 * (size_t)n * sizeof(uint32_t)); /* scratch of pim_dpu_chunk_size/pack */
    uint64_t all_rows = 0;
    for (uint32_t i = 0; i < n; i++)
        all_rows += samples[i].out_h;
    pim_dpu_plan_t plan = {
        .samples = calloc(n, sizeof(pim_dpu_sample_plan_t)),
        .work = calloc(n, sizeof(uint64_t)),
        .row_work = malloc((size_t)(all_rows ? all_rows : 1) * sizeof(uint64_t)),
        .first = calloc((size_t)D + 1, sizeof(uint32_t)),
        .bands = calloc((size_t)D * (T + 1), sizeof(uint32_t)),
        .extra_work = mram ? mram->extra_work : NULL,
    };
    const uint64_t *mram_src = mram ? mram->offsets : NULL;
    const pim_dpu_sample_plan_t *plans = plan.samples;
    if (!plan.samples || !plan.work || !plan.row_work || !plan.first || !plan.bands || !offs ||
        !grow((void **)&sl->chunks, &sl->chunks_cap, (size_t)n * sizeof(pim_dpu_chunk_t)) ||
        !grow((void **)&sl->gathers, &sl->gathers_cap, (size_t)n * sizeof(gather_info_t))) {
        set_err(err, err_len, "out of host memory");
        rc = PIM_DPU_E_NOMEM;
        goto done;
    }
    gather_info_t *gathers = sl->gathers;
    pim_dpu_chunk_t *chunks = sl->chunks;
    memset(chunks, 0, (size_t)active * sizeof *chunks);
    pim_dpu_header_t *headers = sl->headers;
    memset(headers, 0, (size_t)D * sizeof *headers);

    /* 1-2. check and plan every sample, split them over the DPUs and each DPU's rows over its
     *      tasklets (dpu_plan.c); then check the caller's buffers against the samples */
    if (pim_dpu_plan(samples, n, tables, tables_bytes, D, T, drv->arena, &plan, err, err_len) != 0) {
        rc = PIM_DPU_E_ARG;
        goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        char msg[400];
        const bool ok = mram_src && mram_src[i] != PIM_DPU_HOST_SOURCE
                            ? pim_dpu_check_in_mram(&samples[i], mram, i, lut, lut_bytes, dst_bytes, msg, sizeof msg)
                            : pim_dpu_check_buffers(&samples[i], srcs[i], src_bytes ? src_bytes[i] : UINT64_MAX, lut,
                                                    lut_bytes, dst_bytes, msg, sizeof msg);
        if (!ok) {
            set_err(err, err_len, "sample %u: %s", i, msg);
            rc = PIM_DPU_E_ARG;
            goto done;
        }
    }
    for (uint32_t d = 0; d < active; d++) {
        chunks[d].first = plan.first[d];
        chunks[d].count = plan.first[d + 1] - plan.first[d];
    }

    /* 3. sizes of each chunk, then the common transfer lengths */
    pim_dpu_run_info_t info;
    memset(&info, 0, sizeof info);
    uint64_t xfer = 0, out_xfer = 0;
    for (uint32_t d = 0; d < active; d++) {
        pim_dpu_chunk_t *c = &chunks[d];
        pim_dpu_chunk_size(c, samples, plans, mram_src, tables, lut ? lut_bytes : 0, T, offs);
        if (c->in_bytes > xfer)
            xfer = c->in_bytes;
        if (c->out_bytes > out_xfer)
            out_xfer = c->out_bytes;
        info.in_real_bytes += c->in_bytes;
        info.out_real_bytes += c->out_bytes;
    }
    xfer = (xfer + 7u) & ~7ull;
    out_xfer = (out_xfer + 7u) & ~7ull;
    /* the outputs follow the chunk, and the sources in MRAM when there are */
    const bool keeps = mram && mram->keep_to > 0; /* sources in MRAM (a region to keep) */
    const uint64_t out_off = keeps && ((mram->keep_to + 7u) & ~7ull) > xfer ? (mram->keep_to + 7u) & ~7ull : xfer;
    if (keeps && xfer > mram->keep_from) {
        set_err(err, err_len, "the DPUs' chunks need %llu bytes of MRAM, past the %llu where the sources in MRAM "
                "start: the stage before must leave them room", (unsigned long long)xfer,
                (unsigned long long)mram->keep_from);
        rc = PIM_DPU_E_ARG;
        goto done;
    }
    for (uint32_t d = 0; d < active; d++) {
        if (out_off + chunks[d].out_bytes > PIM_DPU_MRAM_BUDGET) {
            set_err(err, err_len, "DPU %u would need %llu bytes of MRAM for samples %u..%u (at most %u): use more "
                    "DPUs or smaller batches", d, (unsigned long long)(out_off + chunks[d].out_bytes), chunks[d].first,
                    chunks[d].first + chunks[d].count - 1, PIM_DPU_MRAM_BUDGET);
            drv->last_dpu = (int32_t)d;
            rc = PIM_DPU_E_ARG;
            goto done;
        }
    }
    info.active_dpus = active;
    info.arena_bytes = drv->arena;
    info.xfer_bytes = xfer;
    info.out_xfer_bytes = out_xfer;
    if (!grow((void **)&sl->in, &sl->in_cap, (size_t)active * xfer) ||
        !grow((void **)&sl->out, &sl->out_cap, (size_t)active * out_xfer)) {
        set_err(err, err_len, "out of host memory for %llu bytes of DPU chunks",
                (unsigned long long)((uint64_t)active * (xfer + out_xfer)));
        rc = PIM_DPU_E_NOMEM;
        goto done;
    }

    /* a failure seen by an earlier wait: make the DPUs usable again before queuing more */
    if (drv->recover) {
        rc = pim_dpu_recover(drv, err, err_len);
        if (rc != PIM_DPU_OK)
            goto done;
        headers = sl->headers; /* a new allocation binds new arrays */
    }
    /* a stage before (pim_dpu_run_stage) loaded its own program: the kernel again, MRAM kept */
    if (drv->loaded != drv->binary) {
        rc = pim_dpu_load_program(drv, drv->binary, err, err_len);
        if (rc != PIM_DPU_OK)
            goto done;
    }
    drv->batch_id = drv->batch_id + 1 ? drv->batch_id + 1 : 1; /* 0 means "no batch" */
    uint8_t *in = sl->in, *out = sl->out;

    /* 4. pack */
    for (uint32_t d = 0; d < D; d++) {
        pim_dpu_header_t *h = &headers[d];
        h->magic = PIM_DPU_MAGIC;
        h->version = PIM_DPU_VERSION;
        h->batch_id = drv->batch_id;
        h->arena_bytes = drv->arena;
        h->nr_tasklets = drv->nr_tasklets;
        h->in_bytes = keeps ? (uint32_t)mram->keep_to : sizeof(pim_dpu_header_t);
        h->out_off = (uint32_t)out_off;
        h->out_bytes = sizeof(pim_dpu_status_t);
        h->samples_off = h->jobs_off = h->tables_off = h->lut_off = sizeof(pim_dpu_header_t);
        if ((debug & 0xff) && (int32_t)d == debug_dpu)
            h->debug = debug & 0xff;
    }
    for (uint32_t d = 0; d < active; d++) {
        uint8_t *base = in + (size_t)d * xfer;
        pim_dpu_chunk_pack(&chunks[d], &headers[d], base, xfer, samples, plans, plan.bands + (size_t)d * (T + 1), T,
                           srcs, mram_src, tables, lut, lut_bytes, offs);
        if ((debug & PIM_DPU_DEBUG_CORRUPT) && (int32_t)d == debug_dpu) {
            pim_sample_t *ds = (pim_sample_t *)(void *)(base + headers[d].samples_off);
            ds[0].crop_h = ds[0].src_h + 1; /* the kernel must refuse it */
        }
        memset(out + (size_t)d * out_xfer, 0, sizeof(pim_dpu_status_t)); /* no status until the gather */
    }
    for (uint32_t i = 0; i < n; i++) {
        gathers[i].dst_offset = samples[i].dst_offset;
        gathers[i].out_bytes = plans[i].out_bytes;
        gathers[i].nrows = plans[i].planes * samples[i].out_h;
        gathers[i].row_bytes = plans[i].row_bytes;
        gathers[i].pitch = plans[i].pitch;
    }
    sl->batch_id = drv->batch_id;
    sl->seq = ++drv->seq;
    sl->n = n;
    sl->active = active;
    sl->xfer = xfer;
    sl->out_xfer = out_xfer;
    sl->dst = dst;
    memset(sl->rank_done, 0, drv->nr_ranks);
    drv->info = info;

    /* 5. queue on every rank, in this order: headers to every DPU and chunks to the DPUs with
     *    samples (DPU_XFER_ASYNC), the launch (DPU_ASYNCHRONOUS), the gather of status blocks +
     *    outputs (DPU_XFER_ASYNC, FROM_DPU), and the rank's completion callback. Each rank runs
     *    its queue in order: the next batch's transfers wait behind this launch and gather. */
    sl->state = SLOT_QUEUED; /* from the first queued job on, the staging is libdpu's until a dpu_sync */
    const char *call = NULL;
    int32_t at = -1;
    dpu_error_t e = DPU_OK;
    if (debug & PIM_DPU_DEBUG_HOLD) {
        __atomic_store_n(&drv->held, 1, __ATOMIC_RELEASE);
        if ((e = dpu_callback(drv->set, hold_rank, drv, DPU_CALLBACK_ASYNC)) != DPU_OK)
            call = "dpu_callback(hold)";
    }
    for (uint32_t d = 0; d < D && e == DPU_OK; d++)
        if ((e = dpu_prepare_xfer(drv->dpus[d], &headers[d])) != DPU_OK) {
            call = "dpu_prepare_xfer(headers)";
            at = (int32_t)d;
        }
    if (e == DPU_OK &&
        (e = dpu_push_xfer(drv->set, DPU_XFER_TO_DPU, DPU_MRAM_HEAP_POINTER_NAME, 0, sizeof(pim_dpu_header_t),
                           DPU_XFER_ASYNC)) != DPU_OK)
        call = "dpu_push_xfer(TO_DPU, headers)";
    for (uint32_t d = 0; d < active && e == DPU_OK; d++)
        if ((e = dpu_prepare_xfer(drv->dpus[d], in + (size_t)d * xfer + sizeof(pim_dpu_header_t))) != DPU_OK) {
            call = "dpu_prepare_xfer(chunks)";
            at = (int32_t)d;
        }
    if (e == DPU_OK &&
        (e = dpu_push_xfer(drv->set, DPU_XFER_TO_DPU, DPU_MRAM_HEAP_POINTER_NAME, sizeof(pim_dpu_header_t),
                           xfer - sizeof(pim_dpu_header_t), DPU_XFER_ASYNC)) != DPU_OK)
        call = "dpu_push_xfer(TO_DPU, chunks)";
    if (e == DPU_OK && (e = dpu_launch(drv->set, DPU_ASYNCHRONOUS)) != DPU_OK)
        call = "dpu_launch(DPU_ASYNCHRONOUS)";
    for (uint32_t d = 0; d < active && e == DPU_OK; d++)
        if ((e = dpu_prepare_xfer(drv->dpus[d], out + (size_t)d * out_xfer)) != DPU_OK) {
            call = "dpu_prepare_xfer(outputs)";
            at = (int32_t)d;
        }
    if (e == DPU_OK &&
        (e = dpu_push_xfer(drv->set, DPU_XFER_FROM_DPU, DPU_MRAM_HEAP_POINTER_NAME, (uint32_t)out_off, out_xfer,
                           DPU_XFER_ASYNC)) != DPU_OK)
        call = "dpu_push_xfer(FROM_DPU, outputs)";
    if (e == DPU_OK && (e = dpu_callback(drv->set, batch_done_on_rank, sl, DPU_CALLBACK_ASYNC)) != DPU_OK)
        call = "dpu_callback(DPU_CALLBACK_ASYNC)";
    if (e != DPU_OK && ((uint32_t)e & (uint32_t)DPU_ERR_ASYNC_JOBS)) {
        /* libdpu refused the job with the sticky error of an earlier batch's failed job: this
         * batch is accepted, and its wait reports it as not run behind that failure (what is
         * queued of it is run out now; the batches in flight are settled in order) */
        drv->recover = true;
        drain(drv);
        *ticket = sl->batch_id;
        goto done;
    }
    if (e != DPU_OK) {
        /* part of the batch may be queued: run it out before the staging is reused, and
         * drop this batch (the jobs of the other batch in flight are settled as usual) */
        rc = dpu_fail(drv, err, err_len, call, at, e);
        drv->recover = true;
        drain(drv);
        sl->state = SLOT_FREE;
        goto done;
    }
    *ticket = sl->batch_id;

done:
    free(plan.samples);
    free(plan.work);
    free(plan.row_work);
    free(plan.first);
    free(plan.bands);
    free(offs);
    return rc;
}

/* Copies a settled batch's rows into its output batch, dropping the MRAM row padding. */
static void scatter(const batch_slot_t *sl)
{
    for (uint32_t d = 0; d < sl->active; d++) {
        const uint8_t *o = sl->out + (size_t)d * sl->out_xfer + sizeof(pim_dpu_status_t);
        for (uint32_t k = 0; k < sl->chunks[d].count; k++) {
            const gather_info_t *g = &sl->gathers[sl->chunks[d].first + k];
            uint8_t *slot = sl->dst + g->dst_offset;
            if (g->pitch == g->row_bytes)
                memcpy(slot, o, (size_t)g->nrows * g->row_bytes);
            else
                for (uint32_t r = 0; r < g->nrows; r++)
                    memcpy(slot + (size_t)r * g->row_bytes, o + (size_t)r * g->pitch, g->row_bytes);
            o += g->out_bytes;
        }
    }
}

int pim_dpu_wait(pim_dpu_driver_t *drv, uint32_t ticket, char *err, uint32_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (drv == NULL) {
        set_err(err, err_len, "the DPU driver is closed");
        return PIM_DPU_E_ARG;
    }
    drv->last_dpu = -1;
    if (ticket == 0)
        return PIM_DPU_OK; /* an empty batch */
    batch_slot_t *sl = find_slot(drv, ticket);
    if (sl == NULL) {
        set_err(err, err_len, "batch %u is not in flight (already waited for or cancelled)", ticket);
        return PIM_DPU_E_ARG;
    }
    if (sl->state == SLOT_QUEUED)
        drain(drv);
    const int rc = sl->rc;
    if (rc == PIM_DPU_OK)
        scatter(sl);
    else {
        drv->last_dpu = sl->dpu;
        set_err(err, err_len, "%s", sl->msg);
    }
    sl->state = SLOT_FREE;
    return rc;
}

int pim_dpu_cancel(pim_dpu_driver_t *drv, uint32_t ticket)
{
    if (drv == NULL || ticket == 0)
        return PIM_DPU_OK;
    batch_slot_t *sl = find_slot(drv, ticket);
    if (sl == NULL)
        return PIM_DPU_E_ARG;
    if (sl->state == SLOT_QUEUED)
        drain(drv);
    sl->state = SLOT_FREE;
    return PIM_DPU_OK;
}

int pim_dpu_run(pim_dpu_driver_t *drv, const pim_sample_t *samples, uint32_t n, const uint8_t *const *srcs,
                const uint64_t *src_bytes, const uint8_t *tables, uint64_t tables_bytes, const void *lut,
                uint32_t lut_bytes, uint8_t *dst, uint64_t dst_bytes, const pim_dpu_mram_sources_t *mram, uint32_t debug,
                int32_t debug_dpu, char *err, uint32_t err_len)
{
    uint32_t ticket = 0;
    int rc = pim_dpu_submit(drv, samples, n, srcs, src_bytes, tables, tables_bytes, lut, lut_bytes, dst, dst_bytes,
                            mram, debug, debug_dpu, &ticket, err, err_len);
    if (rc != PIM_DPU_OK)
        return rc;
    return pim_dpu_wait(drv, ticket, err, err_len);
}
