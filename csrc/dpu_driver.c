/* dpu_driver.c: the host driver of the DPU backend (see pim_dpu_driver.h).
 *
 * Written against UPMEM's libdpu API (dpu.h) only, so that the same file builds against the
 * real SDK and against pimloader's emulator. The emulator's extras (DMA counters, fault
 * details) are used only inside `#ifdef PIMLOADER_DPU_EMULATOR` blocks, at the end of the
 * file and in describe_fault(). No DPU_ASSERT, no exit(): every dpu_error_t becomes a return
 * code and a message naming the call and the DPU.
 *
 * One batch (pim_dpu_submit, then pim_dpu_wait; pim_dpu_run = both):
 *   1. check every sample and plan it (segment width, source buffer, row ring) against the
 *      per-tasklet WRAM arena of the loaded kernel (pim_dpu_layout.h); refuse what cannot fit;
 *      estimate its work per output row from its axis tables (row_work);
 *   2. split the samples into contiguous runs over the DPUs that minimise the largest run's
 *      estimated work (fewer samples than DPUs: the extra DPUs get an empty chunk), and each
 *      DPU's output rows into NR_TASKLETS bands of about equal estimated work;
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

#include <dpu.h>
#ifdef PIM_DPU_EMULATED
#include <dpu_emulator.h>
#endif

#include "pim_axis_check.h"
#include "pim_dpu_driver.h"
#include "pim_dpu_layout.h"
#include "pim_params.h"
#include "pim_error.h"

typedef struct chunk_info {
    uint32_t first, count;     /* samples [first, first + count) */
    uint64_t in_bytes, out_bytes;
    uint32_t tables_bytes, n_tables;
} chunk_info_t;

typedef struct gather_info { /* where a sample's rows go in the output batch */
    uint64_t dst_offset, out_bytes;
    uint32_t nrows, row_bytes, pitch;
} gather_info_t;

enum { SLOT_FREE, SLOT_QUEUED, SLOT_DRAINED };

/* Host staging of one batch in flight: what libdpu's queued jobs read and write until a
 * dpu_sync has returned, so it lives until the batch is waited or cancelled. */
typedef struct batch_slot {
    int state;               /* SLOT_FREE, SLOT_QUEUED (jobs may be queued), SLOT_DRAINED (they ran or were dropped) */
    uint32_t batch_id;
    uint64_t seq;            /* submit order */
    uint32_t n, active;
    uint64_t xfer, out_xfer;
    chunk_info_t *chunks;    /* per active DPU */
    gather_info_t *gathers;  /* per sample */
    pim_dpu_header_t *headers; /* per DPU */
    uint8_t *in, *out;       /* active x xfer, active x out_xfer */
    size_t chunks_cap, gathers_cap, in_cap, out_cap;
    uint8_t *rank_done;      /* per rank: the callback queued behind this batch's jobs ran */
    uint8_t *dst;            /* the output batch (the caller keeps it until wait/cancel) */
    /* the outcome, set when the batch's jobs have run (drain) */
    int rc;
    int32_t dpu;
    char msg[1024];
} batch_slot_t;

struct pim_dpu_driver {
    struct dpu_set_t set;
    uint32_t nr_dpus;
    uint32_t nr_tasklets;
    uint32_t arena;
    uint32_t batch_id;
    int32_t last_dpu;
    pim_dpu_run_info_t info;
    struct dpu_set_t *dpus;  /* each DPU as a one-DPU set, in DPU_FOREACH order */
    uint32_t nr_ranks;
    struct dpu_set_t *ranks; /* each rank as a one-rank set, in DPU_RANK_FOREACH order */
    uint32_t *rank_of;       /* DPU index -> rank index */
    char *binary;            /* the kernel, loaded again after a fault */
    char *profile;           /* for a new allocation after an asynchronous failure */
    uint32_t requested_dpus;
    bool lost;               /* the set could not be allocated again: every call fails */
    char lost_msg[400];
    /* A launch that faulted leaves the kernel's WRAM (its globals, and the state of its barriers
     * and mutexes: a barrier mid-round, a mutex still held by the tasklet that stopped) as the
     * fault found it; WRAM is not reset between launches, on hardware as on the emulator.
     * Launching that again would start with a barrier already partly counted (it releases the
     * tasklets early, then hangs or deadlocks a round later), so the next batch loads the
     * program again first (`recover`). And a failed asynchronous job leaves libdpu's rank
     * with a sticky error that only a new allocation clears (see recover()). */
    bool recover;
    dpu_error_t *rank_err;   /* first error dpu_sync returned per rank since the last recovery */
    uint32_t *rank_culprit;  /* batch whose job failed on the rank (0: none yet) */
    int32_t *rank_fault_dpu; /* the DPU found faulted there, -1 if none */
    uint32_t reloads, reallocs;
    uint64_t seq;
    batch_slot_t slots[PIM_DPU_MAX_PENDING];
};

typedef struct plan {
    uint32_t seg_w, src_buf, ring_rows, pitch, planes, row_bytes;
    uint64_t crop_bytes, out_bytes;
    uint64_t work;       /* estimated work of the sample: sum of row_work over its rows */
} plan_t;


/* dpu_error_to_string: the SDK returns a string the caller frees, the emulator a constant. */
static void error_text(dpu_error_t e, char *buf, size_t n)
{
    const char *s = dpu_error_to_string(e);
    snprintf(buf, n, "%s (dpu_error_t 0x%x)", s ? s : "unknown error", (unsigned)e);
#ifndef PIMLOADER_DPU_EMULATOR
    free((void *)s);
#endif
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
    error_text(e, text, sizeof text);
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
        error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_alloc(%u DPUs, profile \"%s\") failed: %s", nr_dpus, drv->profile, text);
        free(drv->binary);
        free(drv->profile);
        free(drv);
        return PIM_DPU_E_LIBDPU;
    }
    int rc = bind_set(drv, err, err_len);
    if (rc != PIM_DPU_OK)
        goto fail;
    e = dpu_load(drv->set, binary, NULL);
    if (e != DPU_OK) {
        char text[200];
        error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_load(%s) failed on the set of %u DPUs: %s", binary, drv->nr_dpus, text);
        rc = PIM_DPU_E_LIBDPU;
        goto fail;
    }
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

/* ---- planning ------------------------------------------------------------------------ */

static uint32_t table_bytes(const pim_axis_t *a)
{
    return a->n_in == a->n_out ? (uint32_t)sizeof(pim_axis_t) : (uint32_t)PIM_AXIS_TABLE_BYTES(a->n_out, a->taps);
}

/* Largest source span (pixels) of the segments of width w, in the order the kernel walks them. */
static uint32_t max_span(const pim_axis_t *ax, int need_h, uint32_t n, uint32_t w, int hflip)
{
    if (!need_h)
        return w < n ? w : n;
    const pim_range_t *r = (const pim_range_t *)(const void *)((const uint8_t *)ax + sizeof(pim_axis_t));
    uint32_t best = 0;
    for (uint32_t d0 = 0; d0 < n; d0 += w) {
        const uint32_t m = n - d0 < w ? n - d0 : w;
        const uint32_t x0 = hflip ? n - d0 - m : d0;
        const uint32_t span = r[x0 + m - 1].first + r[x0 + m - 1].count - r[x0].first;
        if (span > best)
            best = span;
    }
    return best;
}

/* Estimated work (DPU instructions, roughly) of each output row of a sample, from its axis
 * tables and plan, to balance DPUs and tasklets; pimloader/cost_model.py (`row_work`) mirrors
 * it. Weights are the nominal instruction costs of docs/cost_model.md: per row y with C
 * channels, out_w outputs, Sx = sum of the horizontal taps, V(y) = vertical taps of row y,
 * fresh(y) = source rows resampled horizontally for row y (with the ring: the rows of its
 * window past the previous row's window; without: V(y); 1 when the height is kept),
 *     C * fresh(y) * (6 * Sx + 9 * out_w)      horizontal pass (when the width is resampled)
 *   + C * out_w * (9 * V(y) + 9)               vertical pass   (when the height is resampled)
 *   + C * out_w * 8 + 40 * segments            conversion and per-row bookkeeping
 * Writes every row's figure to rows[] when not NULL; returns the sample's sum. */
static uint64_t sample_work(const pim_sample_t *s, const pim_axis_t *ax, const pim_axis_t *ay, const plan_t *p,
                            uint64_t *rows)
{
    const int need_h = s->crop_w != s->out_w, need_v = s->crop_h != s->out_h;
    const uint64_t C = s->channels, ow = s->out_w;
    uint64_t sx = 0;
    if (need_h) {
        const pim_range_t *xr = (const pim_range_t *)(const void *)((const uint8_t *)ax + sizeof(pim_axis_t));
        for (uint32_t x = 0; x < s->out_w; x++)
            sx += xr[x].count;
    }
    const pim_range_t *yr = need_v ? (const pim_range_t *)(const void *)((const uint8_t *)ay + sizeof(pim_axis_t))
                                   : NULL;
    const uint64_t segments = (s->out_w + p->seg_w - 1) / p->seg_w;
    uint64_t total = 0, prev_end = 0;
    for (uint32_t y = 0; y < s->out_h; y++) {
        uint64_t fresh = 1, work = C * ow * 8 + 40 * segments;
        if (need_v) {
            const uint64_t first = yr[y].first, end = first + yr[y].count;
            fresh = yr[y].count;
            if (p->ring_rows)
                fresh = end > (prev_end > first ? prev_end : first) ? end - (prev_end > first ? prev_end : first) : 0;
            prev_end = end;
            work += C * ow * (9 * (uint64_t)yr[y].count + 9);
        }
        if (need_h)
            work += C * fresh * (6 * sx + 9 * ow);
        if (rows)
            rows[y] = work;
        total += work;
    }
    return total;
}

/* Contiguous runs of samples over `active` DPUs that minimise the largest run's work: the
 * smallest bound L such that cutting greedily (each DPU takes samples while its run stays
 * within L) needs at most `active` runs, found by bisection; then the same greedy cut, leaving
 * at least one sample for each DPU after. */
static int fits_in(const plan_t *plans, uint32_t n, uint32_t active, uint64_t bound)
{
    uint32_t runs = 1;
    uint64_t load = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (plans[i].work > bound)
            return 0;
        if (load + plans[i].work > bound) {
            runs++;
            load = 0;
        }
        load += plans[i].work;
    }
    return runs <= active;
}

static void split_by_work(const plan_t *plans, uint32_t n, uint32_t active, chunk_info_t *chunks)
{
    uint64_t lo = 0, hi = 0;
    for (uint32_t i = 0; i < n; i++) {
        hi += plans[i].work;
        if (plans[i].work > lo)
            lo = plans[i].work;
    }
    while (lo < hi) { /* the least bound that fits */
        const uint64_t mid = lo + (hi - lo) / 2;
        if (fits_in(plans, n, active, mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    uint32_t i = 0;
    for (uint32_t d = 0; d < active; d++) {
        const uint32_t left_after = active - d - 1; /* DPUs still to serve after this one */
        uint64_t load = 0;
        chunks[d].first = i;
        do {
            load += plans[i].work;
            i++;
        } while (i < n - left_after && (d == active - 1 || load + plans[i].work <= lo));
        chunks[d].count = i - chunks[d].first;
    }
}

/* Band edges of one DPU: tasklet t gets the chunk's rows [edges[t], edges[t + 1]), the first
 * row whose work before it reaches t / T of the chunk's work starting band t. */
static void cut_bands(const uint64_t *row_work, uint32_t rows, uint32_t T, uint32_t *edges)
{
    uint64_t total = 0;
    for (uint32_t g = 0; g < rows; g++)
        total += row_work[g];
    uint64_t before = 0; /* work of rows [0, g) */
    uint32_t g = 0;
    edges[0] = 0;
    for (uint32_t t = 1; t < T; t++) {
        while (g < rows && before * T < total * t)
            before += row_work[g++];
        edges[t] = g;
    }
    edges[T] = rows;
}

static int plan_sample(const pim_dpu_driver_t *drv, const pim_sample_t *s, const uint8_t *src, const uint64_t *src_bytes,
                       uint32_t i, const uint8_t *tables, uint64_t tables_bytes, const void *lut, uint32_t lut_bytes,
                       uint64_t dst_bytes, plan_t *p, char *msg, size_t msg_len)
{
    const uint32_t C = s->channels, es = s->out_esize;
    if (C != 1 && C != 3) {
        snprintf(msg, msg_len, "%u channels (1 or 3 supported)", C);
        return 0;
    }
    if (es != 1 && es != 2 && es != 4) {
        snprintf(msg, msg_len, "output element size %u (1, 2 or 4 supported)", es);
        return 0;
    }
    if (es > 1 && (lut == NULL || lut_bytes < 256u * C * es)) {
        snprintf(msg, msg_len, "output element size %u needs a %u-byte lookup table", es, 256u * C * es);
        return 0;
    }
    if (s->flags & ~(PIM_FLAG_HFLIP | PIM_FLAG_VFLIP | PIM_FLAG_NHWC)) {
        snprintf(msg, msg_len, "unknown flags 0x%x", s->flags);
        return 0;
    }
    if (src == NULL || s->crop_h == 0 || s->crop_w == 0 || s->out_h == 0 || s->out_w == 0 ||
        (uint64_t)s->crop_top + s->crop_h > s->src_h || (uint64_t)s->crop_left + s->crop_w > s->src_w ||
        (uint64_t)s->src_stride < (uint64_t)s->src_w * C) {
        snprintf(msg, msg_len, "no source, an empty crop/output, or crop box top %u left %u height %u width %u "
                 "not inside the %ux%u image", s->crop_top, s->crop_left, s->crop_h, s->crop_w, s->src_h, s->src_w);
        return 0;
    }
    if (src_bytes != NULL &&
        s->src_offset + (uint64_t)(s->src_h - 1) * s->src_stride + (uint64_t)s->src_w * C > src_bytes[i]) {
        snprintf(msg, msg_len, "image does not fit its %llu-byte source", (unsigned long long)src_bytes[i]);
        return 0;
    }
    const uint64_t out_bytes = (uint64_t)s->out_h * s->out_w * C * es;
    if (s->dst_offset > dst_bytes || out_bytes > dst_bytes - s->dst_offset) {
        snprintf(msg, msg_len, "output slot at %llu (%llu bytes) is outside the %llu-byte output",
                 (unsigned long long)s->dst_offset, (unsigned long long)out_bytes, (unsigned long long)dst_bytes);
        return 0;
    }
    const pim_axis_t *ax = pim_check_axis(tables, tables_bytes, s->xtab_offset, s->crop_w, s->out_w, "horizontal",
                                          msg, (uint32_t)msg_len);
    if (ax == NULL)
        return 0;
    const pim_axis_t *ay = pim_check_axis(tables, tables_bytes, s->ytab_offset, s->crop_h, s->out_h, "vertical",
                                          msg, (uint32_t)msg_len);
    if (ay == NULL)
        return 0;
    const int need_h = s->crop_w != s->out_w, need_v = s->crop_h != s->out_h;
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0, hflip = (s->flags & PIM_FLAG_HFLIP) != 0;
    p->planes = nhwc ? 1u : C;
    p->row_bytes = nhwc ? s->out_w * C * es : s->out_w * es;
    p->pitch = pim_dpu_round8(p->row_bytes);
    p->crop_bytes = (uint64_t)s->crop_h * s->crop_w * C;
    p->out_bytes = (uint64_t)p->planes * s->out_h * p->pitch;
    if (p->crop_bytes > PIM_DPU_MRAM_BUDGET / 2 || p->out_bytes > PIM_DPU_MRAM_BUDGET / 2 ||
        (uint64_t)s->crop_w * C > (1u << 24) || (uint64_t)s->out_w * C * es > (1u << 24)) {
        snprintf(msg, msg_len, "a %ux%u crop to %ux%u is too large for one DPU's MRAM", s->crop_h, s->crop_w,
                 s->out_h, s->out_w);
        return 0;
    }
    const uint32_t tx = need_h ? ax->taps : 0, ty = need_v ? ay->taps : 0;
    /* the ring holds the widest vertical window (only when both axes are resampled) */
    uint32_t ring = 0;
    if (need_h && need_v) {
        const pim_range_t *yr = (const pim_range_t *)(const void *)((const uint8_t *)ay + sizeof(pim_axis_t));
        for (uint32_t y = 0; y < s->out_h; y++)
            if (yr[y].count > ring)
                ring = yr[y].count;
    }
    /* the widest segment with the ring; without it only when the ring does not fit at all */
    for (int with_ring = 1; with_ring >= 0; with_ring--) {
        const uint32_t rows = with_ring ? ring : 0;
        if (with_ring && ring == 0)
            continue;
        for (uint32_t w = pim_dpu_round8(s->out_w); w >= 8; w -= 8) {
            const uint32_t src_buf = pim_dpu_round8(max_span(ax, need_h, s->out_w, w, hflip) * C + 7u);
            const uint64_t need = PIM_DPU_ARENA_HEAD + (uint64_t)pim_dpu_sample_wram(w, C, es, tx, ty, src_buf, rows);
            if (need <= drv->arena) {
                p->seg_w = w;
                p->src_buf = src_buf;
                p->ring_rows = rows;
                p->work = sample_work(s, ax, ay, p, NULL);
                return 1;
            }
        }
    }
    const uint32_t src8 = pim_dpu_round8(max_span(ax, need_h, s->out_w, 8, hflip) * C + 7u);
    snprintf(msg, msg_len, "a %ux%u crop resized to %ux%u (%u horizontal, %u vertical filter taps) needs %u bytes "
             "of WRAM per tasklet even 8 output pixels at a time, and a kernel with %u tasklets has %u: use fewer "
             "tasklets or resize in two steps", s->crop_h, s->crop_w, s->out_h, s->out_w, tx, ty,
             PIM_DPU_ARENA_HEAD + pim_dpu_sample_wram(8, C, es, tx, ty, src8, 0), drv->nr_tasklets, drv->arena);
    return 0;
}

/* ---- one batch ----------------------------------------------------------------------- */

/* The tables the DPU's samples use, packed (dedup by their offset in `tables`); returns bytes. */
static uint32_t pack_tables(const pim_sample_t *samples, const chunk_info_t *c, const uint8_t *tables, uint8_t *out,
                            uint32_t *old_off, uint32_t *new_off, uint32_t *n_tab, pim_sample_t *rewritten)
{
    uint32_t used = 0, n = 0;
    for (uint32_t k = 0; k < c->count; k++) {
        const pim_sample_t *s = &samples[c->first + k];
        uint32_t offs[2] = { s->xtab_offset, s->ytab_offset }, got[2];
        for (int a = 0; a < 2; a++) {
            uint32_t t = 0;
            while (t < n && old_off[t] != offs[a])
                t++;
            if (t == n) {
                const pim_axis_t *ax = (const pim_axis_t *)(const void *)(tables + offs[a]);
                const uint32_t len = table_bytes(ax);
                if (out)
                    memcpy(out + used, ax, len);
                old_off[n] = offs[a];
                new_off[n] = used;
                used += pim_dpu_round8(len);
                n++;
            }
            got[a] = new_off[t];
        }
        if (rewritten) {
            rewritten[k].xtab_offset = got[0];
            rewritten[k].ytab_offset = got[1];
        }
    }
    *n_tab = n;
    return used;
}

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
    error_text(e, text, sizeof text);
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
    int32_t bad = -1;
    for (uint32_t d = first_dpu; d < first_dpu + count && bad < 0; d++) {
        bool is_done = false, fault = false;
        if (dpu_status(drv->dpus[d], &is_done, &fault) == DPU_OK && fault)
            bad = (int32_t)d;
    }
    drv->rank_fault_dpu[r] = bad;
    sl->dpu = bad;
    if (bad >= 0 || plain_error(e) == DPU_ERR_DPU_FAULT) {
        char detail[600] = "";
#ifdef PIMLOADER_DPU_EMULATOR
        if (bad >= 0) {
            char buf[560];
            if (dpuemu_fault_message(drv->dpus[bad], buf, sizeof buf) == DPU_OK && buf[0])
                snprintf(detail, sizeof detail, ": %s", buf);
        }
#endif
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
static int recover(pim_dpu_driver_t *drv, char *err, uint32_t err_len)
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
            error_text(e, text, sizeof text);
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
    dpu_error_t e = dpu_load(drv->set, drv->binary, NULL);
    if (e != DPU_OK) {
        char text[200];
        error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_load(%s) after a failure failed on the set of %u DPUs: %s", drv->binary,
                drv->nr_dpus, text);
        return PIM_DPU_E_LIBDPU;
    }
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
                   uint32_t lut_bytes, uint8_t *dst, uint64_t dst_bytes, uint32_t debug, int32_t debug_dpu,
                   uint32_t *ticket, char *err, uint32_t err_len)
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
    const uint32_t D = drv->nr_dpus, active = n < D ? n : D;
    int rc = PIM_DPU_OK;
    plan_t *plans = calloc(n, sizeof *plans);
    uint32_t *old_off = malloc(2 * (size_t)n * sizeof(uint32_t));
    uint32_t *new_off = malloc(2 * (size_t)n * sizeof(uint32_t));
    uint64_t all_rows = 0;
    for (uint32_t i = 0; i < n; i++)
        all_rows += samples[i].out_h;
    uint64_t *row_work = malloc((size_t)(all_rows ? all_rows : 1) * sizeof(uint64_t)); /* one DPU's rows at a time */
    if (!plans || !old_off || !new_off || !row_work || !grow((void **)&sl->chunks, &sl->chunks_cap, (size_t)n * sizeof(chunk_info_t)) ||
        !grow((void **)&sl->gathers, &sl->gathers_cap, (size_t)n * sizeof(gather_info_t))) {
        set_err(err, err_len, "out of host memory");
        rc = PIM_DPU_E_NOMEM;
        goto done;
    }
    gather_info_t *gathers = sl->gathers;
    chunk_info_t *chunks = sl->chunks;
    memset(chunks, 0, (size_t)active * sizeof *chunks);
    pim_dpu_header_t *headers = sl->headers;
    memset(headers, 0, (size_t)D * sizeof *headers);

    /* 1. check and plan every sample */
    for (uint32_t i = 0; i < n; i++) {
        char msg[400];
        if (!plan_sample(drv, &samples[i], srcs[i], src_bytes, i, tables, tables_bytes, lut, lut_bytes, dst_bytes,
                         &plans[i], msg, sizeof msg)) {
            set_err(err, err_len, "sample %u: %s", i, msg);
            rc = PIM_DPU_E_ARG;
            goto done;
        }
    }

    /* 2. contiguous runs balanced by estimated work; every active DPU gets at least one sample */
    split_by_work(plans, n, active, chunks);

    /* 3. sizes of each chunk, then the common transfer lengths */
    pim_dpu_run_info_t info;
    memset(&info, 0, sizeof info);
    uint64_t xfer = 0, out_xfer = 0;
    const uint32_t lut_len = lut ? pim_dpu_round8(lut_bytes) : 0;
    const uint32_t bands_bytes = pim_dpu_round8((drv->nr_tasklets + 1) * (uint32_t)sizeof(uint32_t));
    for (uint32_t d = 0; d < active; d++) {
        chunk_info_t *c = &chunks[d];
        uint64_t off = sizeof(pim_dpu_header_t) + (uint64_t)c->count * (sizeof(pim_sample_t) + sizeof(pim_dpu_job_t)) +
                       bands_bytes;
        c->tables_bytes = pack_tables(samples, c, tables, NULL, old_off, new_off, &c->n_tables, NULL);
        off += c->tables_bytes + lut_len;
        uint64_t outs = sizeof(pim_dpu_status_t);
        for (uint32_t k = 0; k < c->count; k++) {
            off += (plans[c->first + k].crop_bytes + 7u) & ~7ull;
            outs += plans[c->first + k].out_bytes;
        }
        c->in_bytes = off;
        c->out_bytes = outs;
        if (off > xfer)
            xfer = off;
        if (outs > out_xfer)
            out_xfer = outs;
        info.in_real_bytes += off;
        info.out_real_bytes += outs;
    }
    xfer = (xfer + 7u) & ~7ull;
    out_xfer = (out_xfer + 7u) & ~7ull;
    for (uint32_t d = 0; d < active; d++) {
        if (xfer + chunks[d].out_bytes > PIM_DPU_MRAM_BUDGET) {
            set_err(err, err_len, "DPU %u would need %llu bytes of MRAM for samples %u..%u (at most %u): use more "
                    "DPUs or smaller batches", d, (unsigned long long)(xfer + chunks[d].out_bytes), chunks[d].first,
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
        rc = recover(drv, err, err_len);
        if (rc != PIM_DPU_OK)
            goto done;
        headers = sl->headers; /* a new allocation binds new arrays */
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
        h->in_bytes = sizeof(pim_dpu_header_t);
        h->out_off = (uint32_t)xfer;
        h->out_bytes = sizeof(pim_dpu_status_t);
        h->samples_off = h->jobs_off = h->tables_off = h->lut_off = sizeof(pim_dpu_header_t);
        if ((debug & 0xff) && (int32_t)d == debug_dpu)
            h->debug = debug & 0xff;
    }
    for (uint32_t d = 0; d < active; d++) {
        const chunk_info_t *c = &chunks[d];
        pim_dpu_header_t *h = &headers[d];
        uint8_t *base = in + (size_t)d * xfer;
        h->n_samples = c->count;
        h->samples_off = sizeof(pim_dpu_header_t);
        h->jobs_off = h->samples_off + c->count * (uint32_t)sizeof(pim_sample_t);
        h->bands_off = h->jobs_off + c->count * (uint32_t)sizeof(pim_dpu_job_t);
        h->tables_off = h->bands_off + bands_bytes;
        h->tables_bytes = c->tables_bytes;
        h->lut_off = h->tables_off + c->tables_bytes;
        h->lut_bytes = lut ? lut_bytes : 0;
        h->in_bytes = (uint32_t)c->in_bytes;
        h->out_bytes = (uint32_t)c->out_bytes;
        pim_sample_t *ds = (pim_sample_t *)(void *)(base + h->samples_off);
        pim_dpu_job_t *jobs = (pim_dpu_job_t *)(void *)(base + h->jobs_off);
        uint32_t n_tab;
        pack_tables(samples, c, tables, base + h->tables_off, old_off, new_off, &n_tab, ds);
        if (lut)
            memcpy(base + h->lut_off, lut, lut_bytes);
        uint64_t src_at = h->lut_off + lut_len, dst_at = h->out_off + sizeof(pim_dpu_status_t);
        uint32_t rows = 0;
        for (uint32_t k = 0; k < c->count; k++) {
            const uint32_t i = c->first + k;
            const pim_sample_t *s = &samples[i];
            const plan_t *p = &plans[i];
            const uint32_t xt = ds[k].xtab_offset, yt = ds[k].ytab_offset;
            ds[k] = *s;
            ds[k].xtab_offset = xt;
            ds[k].ytab_offset = yt;
            /* the crop box alone travels: a crop_h x crop_w image */
            const uint32_t row = s->crop_w * s->channels;
            const uint8_t *from = srcs[i] + s->src_offset + (size_t)s->crop_top * s->src_stride +
                                  (size_t)s->crop_left * s->channels;
            for (uint32_t y = 0; y < s->crop_h; y++)
                memcpy(base + src_at + (size_t)y * row, from + (size_t)y * s->src_stride, row);
            ds[k].src_offset = src_at;
            ds[k].src_h = s->crop_h;
            ds[k].src_w = s->crop_w;
            ds[k].src_stride = row;
            ds[k].crop_top = 0;
            ds[k].crop_left = 0;
            ds[k].dst_offset = dst_at;
            const uint64_t padded = (p->crop_bytes + 7u) & ~7ull;
            memset(base + src_at + p->crop_bytes, 0, padded - p->crop_bytes);
            src_at += padded;
            dst_at += p->out_bytes;
            jobs[k].seg_w = p->seg_w;
            jobs[k].src_buf = p->src_buf;
            jobs[k].out_pitch = p->pitch;
            jobs[k].row_base = rows;
            jobs[k].ring_rows = p->ring_rows;
            jobs[k].reserved = 0;
            sample_work(s, (const pim_axis_t *)(const void *)(tables + s->xtab_offset),
                        (const pim_axis_t *)(const void *)(tables + s->ytab_offset), p, row_work + rows);
            rows += s->out_h;
        }
        h->total_rows = rows;
        memset(base + h->bands_off, 0, bands_bytes);
        cut_bands(row_work, rows, drv->nr_tasklets, (uint32_t *)(void *)(base + h->bands_off));
        memset(base + c->in_bytes, 0, xfer - c->in_bytes);
        if ((debug & PIM_DPU_DEBUG_CORRUPT) && (int32_t)d == debug_dpu)
            ds[0].crop_h = ds[0].src_h + 1; /* the kernel must refuse it */
        memcpy(base, h, sizeof *h);
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
        (e = dpu_push_xfer(drv->set, DPU_XFER_FROM_DPU, DPU_MRAM_HEAP_POINTER_NAME, (uint32_t)xfer, out_xfer,
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
    free(plans);
    free(old_off);
    free(new_off);
    free(row_work);
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
                uint32_t lut_bytes, uint8_t *dst, uint64_t dst_bytes, uint32_t debug, int32_t debug_dpu, char *err,
                uint32_t err_len)
{
    uint32_t ticket = 0;
    int rc = pim_dpu_submit(drv, samples, n, srcs, src_bytes, tables, tables_bytes, lut, lut_bytes, dst, dst_bytes,
                            debug, debug_dpu, &ticket, err, err_len);
    if (rc != PIM_DPU_OK)
        return rc;
    return pim_dpu_wait(drv, ticket, err, err_len);
}

/* ---- optional emulator hooks (not libdpu) ------------------------------------------- */

int pim_dpu_emulated(void)
{
#ifdef PIMLOADER_DPU_EMULATOR
    return 1;
#else
    return 0;
#endif
}

int pim_dpu_tasklet_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || values == NULL || index >= drv->nr_dpus)
        return -1;
    struct dpuemu_counters c;
    if (dpuemu_get_counters(drv->dpus[index], &c) != DPU_OK)
        return -1;
    for (uint32_t t = 0; t < drv->nr_tasklets && t < DPUEMU_MAX_TASKLETS; t++) {
        values[4 * t + 0] = c.tasklet[t].mram_read_calls;
        values[4 * t + 1] = c.tasklet[t].mram_read_bytes;
        values[4 * t + 2] = c.tasklet[t].mram_write_calls;
        values[4 * t + 3] = c.tasklet[t].mram_write_bytes;
    }
    return 0;
#else
    (void)drv;
    (void)index;
    (void)values;
    return -1;
#endif
}

int pim_dpu_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || values == NULL || (index != 0xFFFFFFFFu && index >= drv->nr_dpus))
        return -1;
    struct dpuemu_counters c;
    if (dpuemu_get_counters(index == 0xFFFFFFFFu ? drv->set : drv->dpus[index], &c) != DPU_OK)
        return -1;
    values[0] = c.mram_read_calls;
    values[1] = c.mram_read_bytes;
    values[2] = c.mram_write_calls;
    values[3] = c.mram_write_bytes;
    values[4] = c.host_to_dpu_bytes;
    values[5] = c.dpu_to_host_bytes;
    values[6] = c.launches;
    values[7] = c.dma_cycles_model;
    values[8] = c.wram_static_bytes;
    values[9] = c.wram_heap_peak;
    return 0;
#else
    (void)drv;
    (void)index;
    (void)values;
    return -1;
#endif
}

int pim_dpu_reset_counters(pim_dpu_driver_t *drv)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || dpuemu_reset_counters(drv->set) != DPU_OK)
        return -1;
    return 0;
#else
    (void)drv;
    return -1;
#endif
}
