/* dpu_plan.c: how the DPU host driver plans a batch (see pim_dpu_plan.h): each sample checked and
 * fitted to a tasklet's WRAM arena, its work estimated row by row from its axis tables, the
 * samples split over DPUs and each DPU's rows over its tasklets by that estimate. Pure
 * computation on the host, no libdpu: csrc/dpu_driver.c runs it for every batch, and the cost
 * model (pimloader's costmodel) reads the same plan through the cffi module.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pim_axis_check.h"
#include "pim_dpu_layout.h"
#include "pim_dpu_plan.h"
#include "pim_error.h"
#include "pim_params.h"

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

/* pim_dpu_row_work: the estimate (weights and formula in pim_dpu_plan.h) balancing DPUs and
 * tasklets. Writes every row's figure to rows[] when not NULL; returns the sample's sum. */
uint64_t pim_dpu_row_work(const pim_sample_t *s, const uint8_t *tables, const pim_dpu_sample_plan_t *p,
                          uint64_t *rows)
{
    const pim_axis_t *ax = (const pim_axis_t *)(const void *)(tables + s->xtab_offset);
    const pim_axis_t *ay = (const pim_axis_t *)(const void *)(tables + s->ytab_offset);
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

/* pim_dpu_split (pim_dpu_plan.h): the least bound L that a greedy cut fits in `active` runs,
 * by bisection, then that greedy cut, leaving at least one sample for each DPU after. */
static int fits_in(const uint64_t *work, uint32_t n, uint32_t active, uint64_t bound)
{
    uint32_t runs = 1;
    uint64_t load = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (work[i] > bound)
            return 0;
        if (load + work[i] > bound) {
            runs++;
            load = 0;
        }
        load += work[i];
    }
    return runs <= active;
}

uint32_t pim_dpu_split(const uint64_t *work, uint32_t n, uint32_t nr_dpus, uint32_t *first)
{
    const uint32_t active = n < nr_dpus ? n : nr_dpus;
    first[0] = 0;
    if (active == 0)
        return 0;
    uint64_t lo = 0, hi = 0;
    for (uint32_t i = 0; i < n; i++) {
        hi += work[i];
        if (work[i] > lo)
            lo = work[i];
    }
    while (lo < hi) { /* the least bound that fits */
        const uint64_t mid = lo + (hi - lo) / 2;
        if (fits_in(work, n, active, mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    uint32_t i = 0;
    for (uint32_t d = 0; d < active; d++) {
        const uint32_t left_after = active - d - 1; /* DPUs still to serve after this one */
        uint64_t load = 0;
        do {
            load += work[i];
            i++;
        } while (i < n - left_after && (d == active - 1 || load + work[i] <= lo));
        first[d + 1] = i;
    }
    return active;
}

/* pim_dpu_cut_bands: band t starts at the first row whose work before it reaches t / T. */
void pim_dpu_cut_bands(const uint64_t *row_work, uint32_t rows, uint32_t T, uint32_t *edges)
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

int pim_dpu_plan_sample(const pim_sample_t *s, const uint8_t *tables, uint64_t tables_bytes, uint32_t arena_bytes,
                        uint32_t nr_tasklets, pim_dpu_sample_plan_t *p, char *msg, uint32_t msg_len)
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
    if (s->flags & ~(PIM_FLAG_HFLIP | PIM_FLAG_VFLIP | PIM_FLAG_NHWC)) {
        snprintf(msg, msg_len, "unknown flags 0x%x", s->flags);
        return 0;
    }
    if (s->crop_h == 0 || s->crop_w == 0 || s->out_h == 0 || s->out_w == 0 ||
        (uint64_t)s->crop_top + s->crop_h > s->src_h || (uint64_t)s->crop_left + s->crop_w > s->src_w ||
        (uint64_t)s->src_stride < (uint64_t)s->src_w * C) {
        snprintf(msg, msg_len, "an empty crop/output, or crop box top %u left %u height %u width %u not inside the "
                 "%ux%u image", s->crop_top, s->crop_left, s->crop_h, s->crop_w, s->src_h, s->src_w);
        return 0;
    }
    const pim_axis_t *ax = pim_check_axis(tables, tables_bytes, s->xtab_offset, s->crop_w, s->out_w, "horizontal",
                                          msg, msg_len);
    if (ax == NULL)
        return 0;
    const pim_axis_t *ay = pim_check_axis(tables, tables_bytes, s->ytab_offset, s->crop_h, s->out_h, "vertical",
                                          msg, msg_len);
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
            if (need <= arena_bytes) {
                p->seg_w = w;
                p->src_buf = src_buf;
                p->ring_rows = rows;
                return 1;
            }
        }
    }
    const uint32_t src8 = pim_dpu_round8(max_span(ax, need_h, s->out_w, 8, hflip) * C + 7u);
    snprintf(msg, msg_len, "a %ux%u crop resized to %ux%u (%u horizontal, %u vertical filter taps) needs %u bytes "
             "of WRAM per tasklet even 8 output pixels at a time, and a kernel with %u tasklets has %u: use fewer "
             "tasklets or resize in two steps", s->crop_h, s->crop_w, s->out_h, s->out_w, tx, ty,
             PIM_DPU_ARENA_HEAD + pim_dpu_sample_wram(8, C, es, tx, ty, src8, 0), nr_tasklets, arena_bytes);
    return 0;
}

int pim_dpu_plan(const pim_sample_t *samples, uint32_t n, const uint8_t *tables, uint64_t tables_bytes,
                 uint32_t nr_dpus, uint32_t nr_tasklets, uint32_t arena_bytes, pim_dpu_plan_t *plan, char *err,
                 uint32_t err_len)
{
    if (plan == NULL || (n && (samples == NULL || tables == NULL)) || nr_dpus == 0 || nr_tasklets == 0) {
        set_err(err, err_len, "pim_dpu_plan: no plan, samples or tables, or no DPUs or tasklets");
        return -1;
    }
    uint64_t row = 0;
    for (uint32_t i = 0; i < n; i++) {
        char msg[400];
        if (!pim_dpu_plan_sample(&samples[i], tables, tables_bytes, arena_bytes, nr_tasklets, &plan->samples[i], msg,
                                 sizeof msg)) {
            set_err(err, err_len, "sample %u: %s", i, msg);
            return (int)i + 1;
        }
        plan->work[i] = pim_dpu_row_work(&samples[i], tables, &plan->samples[i], plan->row_work + row);
        row += samples[i].out_h;
    }
    if (plan->extra_work == NULL) {
        plan->active = pim_dpu_split(plan->work, n, nr_dpus, plan->first);
    } else { /* one split for both stages: each sample's transform and decode work */
        uint64_t *both = malloc((size_t)(n ? n : 1) * sizeof *both);
        if (both == NULL) {
            set_err(err, err_len, "pim_dpu_plan: out of host memory");
            return -1;
        }
        for (uint32_t i = 0; i < n; i++)
            both[i] = plan->work[i] + plan->extra_work[i];
        plan->active = pim_dpu_split(both, n, nr_dpus, plan->first);
        free(both);
    }
    row = 0;
    for (uint32_t d = 0; d < plan->active; d++) {
        uint32_t rows = 0;
        for (uint32_t i = plan->first[d]; i < plan->first[d + 1]; i++)
            rows += samples[i].out_h;
        pim_dpu_cut_bands(plan->row_work + row, rows, nr_tasklets, plan->bands + (size_t)d * (nr_tasklets + 1));
        row += rows;
    }
    return 0;
}
