/* dpu_driver.c: the host driver of the DPU backend (see pim_dpu_driver.h).
 *
 * Written against UPMEM's libdpu API (dpu.h) only, so that the same file builds against the
 * real SDK and against pimloader's emulator. The emulator's extras (DMA counters, fault
 * details) are used only inside `#ifdef PIMLOADER_DPU_EMULATOR` blocks, at the end of the
 * file and in describe_fault(). No DPU_ASSERT, no exit(): every dpu_error_t becomes a return
 * code and a message naming the call and the DPU.
 *
 * One run (pim_dpu_run):
 *   1. check every sample and plan it (segment width, source buffer) against the per-tasklet
 *      WRAM arena of the loaded kernel (pim_dpu_layout.h); refuse what cannot fit;
 *   2. split the samples into contiguous runs over the DPUs, balanced by output pixels
 *      (fewer samples than DPUs: the extra DPUs get an empty chunk);
 *   3. pack each DPU's chunk: header, descriptors rewritten for the DPU, jobs, the axis
 *      tables its samples use, the lookup table, and each crop box's pixels (only the box
 *      travels, not the whole decoded image);
 *   4. dpu_prepare_xfer + dpu_push_xfer: the headers to every DPU (72 bytes each), the rest
 *      to the DPUs with samples, at one common padded length;
 *   5. dpu_launch (synchronous); a fault is traced to its DPU with dpu_status; the program is
 *      loaded again before the next run (see `reload` below);
 *   6. dpu_push_xfer(FROM_DPU) of the status blocks + outputs (common length), check each
 *      DPU's status, copy each sample's rows into its slot of the output batch.
 * Not done: overlapping the next batch's transfer with this launch (double-buffered MRAM).
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

#include "pim_dpu_driver.h"
#include "pim_dpu_layout.h"
#include "pim_params.h"
#include "pim_error.h"

struct pim_dpu_driver {
    struct dpu_set_t set;
    uint32_t nr_dpus;
    uint32_t nr_tasklets;
    uint32_t arena;
    uint32_t batch_id;
    int32_t last_dpu;
    pim_dpu_run_info_t info;
    struct dpu_set_t *dpus; /* each DPU as a one-DPU set, in DPU_FOREACH order */
    char *binary;           /* the kernel, loaded again after a fault */
    /* A launch that faulted leaves the kernel's WRAM (its globals, and the state of its barriers
     * and mutexes: a barrier mid-round, a mutex still held by the tasklet that stopped) as the
     * fault found it; WRAM is not reset between launches, on hardware as on the emulator.
     * Launching that again would start with a barrier already partly counted (it releases the
     * tasklets early, then hangs or deadlocks a round later), so the next run loads the program
     * again first. */
    bool reload;
};

typedef struct plan {
    uint32_t seg_w, src_buf, pitch, planes, row_bytes;
    uint64_t crop_bytes, out_bytes;
} plan_t;


/* dpu_error_to_string: the SDK returns a string the caller frees, the emulator a constant. */
static void error_text(dpu_error_t e, char *buf, size_t n)
{
    const char *s = dpu_error_to_string(e);
    snprintf(buf, n, "%s (dpu_error_t %d)", s ? s : "unknown error", (int)e);
#ifndef PIMLOADER_DPU_EMULATOR
    free((void *)s);
#endif
}

static int dpu_fail(pim_dpu_driver_t *drv, char *err, uint32_t err_len, const char *call, int32_t dpu,
                    dpu_error_t e)
{
    char text[160];
    error_text(e, text, sizeof text);
    if (drv)
        drv->last_dpu = dpu;
    if (dpu >= 0)
        set_err(err, err_len, "%s failed on DPU %d: %s", call, dpu, text);
    else
        set_err(err, err_len, "%s failed on the set of %u DPUs: %s", call, drv ? drv->nr_dpus : 0u, text);
    return PIM_DPU_E_LIBDPU;
}

/* ---- lifetime ------------------------------------------------------------------------ */

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
    drv->binary = strdup(binary ? binary : "");
    if (drv->binary == NULL) {
        set_err(err, err_len, "out of host memory");
        free(drv);
        return PIM_DPU_E_NOMEM;
    }
    dpu_error_t e = dpu_alloc(nr_dpus, profile ? profile : "", &drv->set);
    if (e != DPU_OK) {
        char text[160];
        error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_alloc(%u DPUs, profile \"%s\") failed: %s", nr_dpus, profile ? profile : "",
                text);
        free(drv->binary);
        free(drv);
        return PIM_DPU_E_LIBDPU;
    }
    int rc = PIM_DPU_OK;
    e = dpu_get_nr_dpus(drv->set, &drv->nr_dpus);
    if (e != DPU_OK) {
        rc = dpu_fail(drv, err, err_len, "dpu_get_nr_dpus", -1, e);
        goto fail;
    }
    drv->dpus = calloc(drv->nr_dpus ? drv->nr_dpus : 1, sizeof *drv->dpus);
    if (drv->dpus == NULL) {
        set_err(err, err_len, "out of host memory");
        rc = PIM_DPU_E_NOMEM;
        goto fail;
    }
    struct dpu_set_t dpu;
    uint32_t i;
    DPU_FOREACH(drv->set, dpu, i)
    {
        if (i < drv->nr_dpus)
            drv->dpus[i] = dpu;
    }
    e = dpu_load(drv->set, binary, NULL);
    if (e != DPU_OK) {
        char text[160];
        error_text(e, text, sizeof text);
        set_err(err, err_len, "dpu_load(%s) failed on the set of %u DPUs: %s", binary, drv->nr_dpus, text);
        rc = PIM_DPU_E_LIBDPU;
        goto fail;
    }
    *out = drv;
    return PIM_DPU_OK;
fail:
    dpu_free(drv->set);
    free(drv->dpus);
    free(drv->binary);
    free(drv);
    return rc;
}

int pim_dpu_close(pim_dpu_driver_t *drv, char *err, uint32_t err_len)
{
    if (drv == NULL)
        return PIM_DPU_OK;
    int rc = PIM_DPU_OK;
    dpu_error_t e = dpu_free(drv->set);
    if (e != DPU_OK)
        rc = dpu_fail(NULL, err, err_len, "dpu_free", -1, e);
    free(drv->dpus);
    free(drv->binary);
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

/* ---- planning ------------------------------------------------------------------------ */

static uint32_t table_bytes(const pim_axis_t *a)
{
    return a->n_in == a->n_out ? (uint32_t)sizeof(pim_axis_t) : (uint32_t)PIM_AXIS_TABLE_BYTES(a->n_out, a->taps);
}

static const pim_axis_t *check_axis(const uint8_t *tables, uint64_t tables_bytes, uint32_t offset, uint32_t n_in,
                                    uint32_t n_out, const char *name, char *msg, size_t msg_len)
{
    if (offset % 8 || (uint64_t)offset + sizeof(pim_axis_t) > tables_bytes) {
        snprintf(msg, msg_len, "%s table offset %u is misaligned or outside the tables", name, offset);
        return NULL;
    }
    const pim_axis_t *a = (const pim_axis_t *)(const void *)(tables + offset);
    if (a->n_in != n_in || a->n_out != n_out) {
        snprintf(msg, msg_len, "%s table maps %u -> %u, the sample needs %u -> %u", name, a->n_in, a->n_out, n_in,
                 n_out);
        return NULL;
    }
    if (n_in == n_out)
        return a;
    if (a->taps == 0 || a->taps % 4 || a->precision < PIM_MIN_PRECISION || a->precision > PIM_MAX_PRECISION ||
        (uint64_t)offset + table_bytes(a) > tables_bytes) {
        snprintf(msg, msg_len, "%s table is malformed (taps %u, precision %u)", name, a->taps, a->precision);
        return NULL;
    }
    const pim_range_t *r = (const pim_range_t *)(const void *)((const uint8_t *)a + sizeof(pim_axis_t));
    uint32_t prev_first = 0, prev_end = 0;
    for (uint32_t j = 0; j < n_out; j++) {
        if (r[j].count > a->taps || r[j].first > n_in || r[j].count > n_in - r[j].first || r[j].first < prev_first ||
            r[j].first + r[j].count < prev_end) {
            snprintf(msg, msg_len, "%s table output %u has a bad window", name, j);
            return NULL;
        }
        prev_first = r[j].first;
        prev_end = r[j].first + r[j].count;
    }
    return a;
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
    const pim_axis_t *ax = check_axis(tables, tables_bytes, s->xtab_offset, s->crop_w, s->out_w, "horizontal", msg,
                                      msg_len);
    if (ax == NULL)
        return 0;
    const pim_axis_t *ay = check_axis(tables, tables_bytes, s->ytab_offset, s->crop_h, s->out_h, "vertical", msg,
                                      msg_len);
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
    for (uint32_t w = pim_dpu_round8(s->out_w); w >= 8; w -= 8) {
        const uint32_t src_buf = pim_dpu_round8(max_span(ax, need_h, s->out_w, w, hflip) * C + 7u);
        const uint64_t need = PIM_DPU_ARENA_HEAD + (uint64_t)pim_dpu_sample_wram(w, C, es, tx, ty, src_buf);
        if (need <= drv->arena) {
            p->seg_w = w;
            p->src_buf = src_buf;
            return 1;
        }
    }
    const uint32_t src8 = pim_dpu_round8(max_span(ax, need_h, s->out_w, 8, hflip) * C + 7u);
    snprintf(msg, msg_len, "a %ux%u crop resized to %ux%u (%u horizontal, %u vertical filter taps) needs %u bytes "
             "of WRAM per tasklet even 8 output pixels at a time, and a kernel with %u tasklets has %u: use fewer "
             "tasklets or resize in two steps", s->crop_h, s->crop_w, s->out_h, s->out_w, tx, ty,
             PIM_DPU_ARENA_HEAD + pim_dpu_sample_wram(8, C, es, tx, ty, src8), drv->nr_tasklets, drv->arena);
    return 0;
}

/* ---- one batch ----------------------------------------------------------------------- */

typedef struct chunk_info {
    uint32_t first, count;     /* samples [first, first + count) */
    uint64_t in_bytes, out_bytes;
    uint32_t tables_bytes, n_tables;
} chunk_info_t;

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

int pim_dpu_run(pim_dpu_driver_t *drv, const pim_sample_t *samples, uint32_t n, const uint8_t *const *srcs,
                const uint64_t *src_bytes, const uint8_t *tables, uint64_t tables_bytes, const void *lut,
                uint32_t lut_bytes, uint8_t *dst, uint64_t dst_bytes, uint32_t debug, int32_t debug_dpu, char *err,
                uint32_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (drv == NULL) {
        set_err(err, err_len, "the DPU driver is closed");
        return PIM_DPU_E_ARG;
    }
    drv->last_dpu = -1;
    memset(&drv->info, 0, sizeof drv->info);
    if (n == 0)
        return PIM_DPU_OK;
    if (samples == NULL || srcs == NULL || tables == NULL || dst == NULL) {
        set_err(err, err_len, "null samples, sources, tables or output");
        return PIM_DPU_E_ARG;
    }
    if (lut_bytes > PIM_DPU_LUT_MAX) {
        set_err(err, err_len, "lookup table of %u bytes (at most %u fit the kernel's WRAM)", lut_bytes,
                PIM_DPU_LUT_MAX);
        return PIM_DPU_E_ARG;
    }
    const uint32_t D = drv->nr_dpus, active = n < D ? n : D;
    int rc = PIM_DPU_OK;
    plan_t *plans = calloc(n, sizeof *plans);
    chunk_info_t *chunks = calloc(active, sizeof *chunks);
    uint32_t *old_off = malloc(2 * (size_t)n * sizeof(uint32_t));
    uint32_t *new_off = malloc(2 * (size_t)n * sizeof(uint32_t));
    pim_dpu_header_t *headers = calloc(D, sizeof *headers);
    uint8_t *in = NULL, *out = NULL;
    if (!plans || !chunks || !old_off || !new_off || !headers) {
        set_err(err, err_len, "out of host memory");
        rc = PIM_DPU_E_NOMEM;
        goto done;
    }

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

    /* 2. contiguous runs balanced by output pixels; every active DPU gets at least one sample */
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += (uint64_t)samples[i].out_h * samples[i].out_w;
    {
        uint32_t i = 0;
        uint64_t prefix = 0;
        for (uint32_t d = 0; d < active; d++) {
            chunks[d].first = i;
            const uint32_t left_after = active - d - 1; /* DPUs still to serve after this one */
            do {
                prefix += (uint64_t)samples[i].out_h * samples[i].out_w;
                i++;
            } while (i < n - left_after && prefix * active < total * (d + 1));
            chunks[d].count = i - chunks[d].first;
        }
    }

    /* 3. sizes of each chunk, then the common transfer lengths */
    uint64_t xfer = 0, out_xfer = 0;
    const uint32_t lut_len = lut ? pim_dpu_round8(lut_bytes) : 0;
    for (uint32_t d = 0; d < active; d++) {
        chunk_info_t *c = &chunks[d];
        uint64_t off = sizeof(pim_dpu_header_t) + (uint64_t)c->count * (sizeof(pim_sample_t) + sizeof(pim_dpu_job_t));
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
        drv->info.in_real_bytes += off;
        drv->info.out_real_bytes += outs;
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
    drv->info.active_dpus = active;
    drv->info.arena_bytes = drv->arena;
    drv->info.xfer_bytes = xfer;
    drv->info.out_xfer_bytes = out_xfer;

    in = malloc((size_t)active * xfer);
    out = malloc((size_t)active * out_xfer);
    if (!in || !out) {
        set_err(err, err_len, "out of host memory for %llu bytes of DPU chunks",
                (unsigned long long)((uint64_t)active * (xfer + out_xfer)));
        rc = PIM_DPU_E_NOMEM;
        goto done;
    }
    drv->batch_id++;

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
        h->tables_off = h->jobs_off + c->count * (uint32_t)sizeof(pim_dpu_job_t);
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
            rows += s->out_h;
        }
        h->total_rows = rows;
        memset(base + c->in_bytes, 0, xfer - c->in_bytes);
        if ((debug & PIM_DPU_DEBUG_CORRUPT) && (int32_t)d == debug_dpu)
            ds[0].crop_h = ds[0].src_h + 1; /* the kernel must refuse it */
        memcpy(base, h, sizeof *h);
    }

    /* 5. host -> DPUs: headers to every DPU, the rest to the DPUs with samples; first a fresh
     *    copy of the program where the last launch faulted (drv->reload) */
    dpu_error_t e;
    if (drv->reload) {
        e = dpu_load(drv->set, drv->binary, NULL);
        if (e != DPU_OK) {
            char text[160];
            error_text(e, text, sizeof text);
            set_err(err, err_len, "dpu_load(%s) after a DPU fault failed on the set of %u DPUs: %s", drv->binary,
                    drv->nr_dpus, text);
            rc = PIM_DPU_E_LIBDPU;
            goto done;
        }
        drv->reload = false;
    }
    for (uint32_t d = 0; d < D; d++) {
        e = dpu_prepare_xfer(drv->dpus[d], &headers[d]);
        if (e != DPU_OK) {
            rc = dpu_fail(drv, err, err_len, "dpu_prepare_xfer(headers)", (int32_t)d, e);
            goto done;
        }
    }
    e = dpu_push_xfer(drv->set, DPU_XFER_TO_DPU, DPU_MRAM_HEAP_POINTER_NAME, 0, sizeof(pim_dpu_header_t),
                      DPU_XFER_DEFAULT);
    if (e != DPU_OK) {
        rc = dpu_fail(drv, err, err_len, "dpu_push_xfer(TO_DPU, headers)", -1, e);
        goto done;
    }
    for (uint32_t d = 0; d < active; d++) {
        e = dpu_prepare_xfer(drv->dpus[d], in + (size_t)d * xfer + sizeof(pim_dpu_header_t));
        if (e != DPU_OK) {
            rc = dpu_fail(drv, err, err_len, "dpu_prepare_xfer(chunks)", (int32_t)d, e);
            goto done;
        }
    }
    e = dpu_push_xfer(drv->set, DPU_XFER_TO_DPU, DPU_MRAM_HEAP_POINTER_NAME, sizeof(pim_dpu_header_t),
                      xfer - sizeof(pim_dpu_header_t), DPU_XFER_DEFAULT);
    if (e != DPU_OK) {
        rc = dpu_fail(drv, err, err_len, "dpu_push_xfer(TO_DPU, chunks)", -1, e);
        goto done;
    }

    /* 6. launch; a fault is traced to its DPU */
    e = dpu_launch(drv->set, DPU_SYNCHRONOUS);
    if (e != DPU_OK) {
        drv->reload = true; /* whatever failed, the DPUs' WRAM is not trusted any more */
        int32_t bad = -1;
        for (uint32_t d = 0; d < D && bad < 0; d++) {
            bool is_done = false, fault = false;
            if (dpu_status(drv->dpus[d], &is_done, &fault) == DPU_OK && fault)
                bad = (int32_t)d;
        }
        char text[160], detail[600] = "";
#ifdef PIMLOADER_DPU_EMULATOR
        if (bad >= 0) {
            char buf[560];
            if (dpuemu_fault_message(drv->dpus[bad], buf, sizeof buf) == DPU_OK && buf[0])
                snprintf(detail, sizeof detail, ": %s", buf);
        }
#endif
        error_text(e, text, sizeof text);
        drv->last_dpu = bad;
        if (bad >= 0) {
            const uint32_t first = (uint32_t)bad < active ? chunks[bad].first : 0;
            const uint32_t count = (uint32_t)bad < active ? chunks[bad].count : 0;
            set_err(err, err_len, "dpu_launch: DPU %d faulted (batch samples %u..%u): %s%s", bad, first,
                    first + count - (count ? 1 : 0), text, detail);
            rc = PIM_DPU_E_FAULT;
        } else {
            set_err(err, err_len, "dpu_launch failed on the set of %u DPUs: %s", D, text);
            rc = e == DPU_ERR_DPU_FAULT ? PIM_DPU_E_FAULT : PIM_DPU_E_LIBDPU;
        }
        goto done;
    }

    /* 7. DPUs -> host: status + outputs, then each sample into its slot */
    for (uint32_t d = 0; d < active; d++) {
        e = dpu_prepare_xfer(drv->dpus[d], out + (size_t)d * out_xfer);
        if (e != DPU_OK) {
            rc = dpu_fail(drv, err, err_len, "dpu_prepare_xfer(outputs)", (int32_t)d, e);
            goto done;
        }
    }
    e = dpu_push_xfer(drv->set, DPU_XFER_FROM_DPU, DPU_MRAM_HEAP_POINTER_NAME, (uint32_t)xfer, out_xfer,
                      DPU_XFER_DEFAULT);
    if (e != DPU_OK) {
        rc = dpu_fail(drv, err, err_len, "dpu_push_xfer(FROM_DPU, outputs)", -1, e);
        goto done;
    }
    for (uint32_t d = 0; d < active; d++) {
        pim_dpu_status_t st;
        memcpy(&st, out + (size_t)d * out_xfer, sizeof st);
        if (st.code != PIM_DPU_STATUS_OK || st.batch_id != drv->batch_id) {
            static const char *const what[] = { "no status (the kernel did not finish)", "a bad chunk header",
                                                "a kernel built for other NR_TASKLETS/STACK_SIZE_DEFAULT",
                                                "an invalid descriptor or table", "a segment larger than its WRAM" };
            const uint32_t code = st.batch_id != drv->batch_id ? 0 : (st.code <= 4 ? st.code : 0);
            drv->last_dpu = (int32_t)d;
            set_err(err, err_len, "DPU %u kernel refused its chunk: %s (status 0x%x, sample %u of the batch, "
                    "detail %u)", d, what[code], st.code, chunks[d].first + st.sample, st.detail);
            rc = PIM_DPU_E_KERNEL;
            goto done;
        }
        const uint8_t *o = out + (size_t)d * out_xfer + sizeof(pim_dpu_status_t);
        for (uint32_t k = 0; k < chunks[d].count; k++) {
            const uint32_t i = chunks[d].first + k;
            const plan_t *p = &plans[i];
            uint8_t *slot = dst + samples[i].dst_offset;
            const uint32_t nrows = p->planes * samples[i].out_h;
            if (p->pitch == p->row_bytes)
                memcpy(slot, o, (size_t)nrows * p->row_bytes);
            else
                for (uint32_t r = 0; r < nrows; r++)
                    memcpy(slot + (size_t)r * p->row_bytes, o + (size_t)r * p->pitch, p->row_bytes);
            o += p->out_bytes;
        }
    }

done:
    free(plans);
    free(chunks);
    free(old_off);
    free(new_off);
    free(headers);
    free(in);
    free(out);
    return rc;
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
