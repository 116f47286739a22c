/* crop_resize.c: the fused crop + resize + flip + convert step on a DPU (UPMEM DPU C).
 *
 * Input: one chunk of a batch at DPU_MRAM_HEAP_POINTER, laid out as pim_dpu_layout.h says.
 * The arithmetic is pim_resample.h's, shared with the CPU kernel (csrc/cpu_kernels.c), so
 * both agree bit for bit; this file only moves rows between MRAM and WRAM.
 *
 * Work split: the chunk's output rows (all samples, in order) are cut into NR_TASKLETS
 * contiguous bands, one per tasklet, at the row indices the host wrote at bands_off (it cuts
 * them so that the bands carry about equal work). A tasklet walks its band sample by sample;
 * inside a sample it computes `seg_w` output pixels at a time (a segment, so that any row
 * width fits WRAM). For each output row y of its band, the vertical window [first, first +
 * count) of source rows is needed horizontally resampled. The windows only move forward
 * (pim_params.h), so the tasklet keeps the last `ring_rows` resampled rows of the segment in
 * a ring: source row r lives in slot r mod ring_rows, and only the rows of the window not
 * seen yet are read (mram_read) and resampled (pim_hpass_row). The window's rows are then
 * accumulated (pim_vpass_mac), rounded, flipped, converted through the lookup table and the
 * segment is written to MRAM. So each source row of a band is resampled once per segment.
 * A sample whose ring does not fit WRAM (ring_rows = 0: extreme downscales) streams the
 * vertical taps one source row at a time instead, resampling a row for every tap that uses
 * it. Every DMA is 8-byte aligned, a multiple of 8 bytes and at most 2048 bytes; WRAM
 * buffers come from mem_alloc.
 *
 * Build: dpu-upmem-dpurte-clang -O2 -DNR_TASKLETS=16 -DSTACK_SIZE_DEFAULT=1024
 *        -I include -o crop_resize dpu_src/crop_resize.c
 * (pimloader._emulator.compile_kernel builds the same source for the emulator.)
 */
#include <stdint.h>

#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>
#include <mutex.h>

#define PIM_MUL_8X8 1 /* weight x pixel from two 8x8-bit multiplies (native on DPUs) */
#include "pim_dpu_layout.h"
#include "pim_dpu_mram.h"
#include "pim_resample.h"

#ifndef NR_TASKLETS
#define NR_TASKLETS 1
#endif
#ifndef STACK_SIZE_DEFAULT
#define STACK_SIZE_DEFAULT 1024
#endif


BARRIER_INIT(phase_barrier, NR_TASKLETS);
MUTEX_INIT(status_mutex);

static pim_dpu_header_t header __dma_aligned;
static pim_dpu_status_t status __dma_aligned;
static uint8_t *lut; /* WRAM copy of the lookup table, or 0 */
static uint32_t chunk; /* MRAM address of the chunk */
static uint32_t arena_bytes; /* this build's per-tasklet arena, computed once per launch */
static uint32_t bands[(NR_TASKLETS + 2) & ~1u] __dma_aligned; /* tasklet t: rows [bands[t], bands[t+1]) */

static void fail(uint32_t code, uint32_t sample, uint32_t detail)
{
    mutex_lock(status_mutex);
    if (status.code == PIM_DPU_STATUS_OK) {
        status.code = code;
        status.sample = sample;
        status.detail = detail;
    }
    mutex_unlock(status_mutex);
}



/* The parts of an arena for one sample (head: descriptor, job, axis headers). */
typedef struct {
    pim_sample_t *s;
    pim_dpu_job_t *job;
    pim_axis_t *xh, *yh;   /* axis headers as stored in MRAM */
    uint8_t *src;          /* source span of one row (job->src_buf bytes) */
    uint8_t *hrow;         /* one resampled (or finished) row segment */
    uint8_t *ring;         /* job->ring_rows resampled row segments, round8(seg_w * C) apart */
    uint8_t *obuf;         /* one output segment, converted */
    pim_axis_t *xseg;      /* header + ranges + weights of the segment's columns */
    int32_t *acc;          /* vertical accumulator */
    uint8_t *yw;           /* one output row's vertical range + weights */
} parts_t;

static uint32_t axis_bytes(const pim_axis_t *a)
{
    return (uint32_t)PIM_AXIS_TABLE_BYTES(a->n_out, a->taps);
}

/* Reads sample i's descriptor, job and axis headers into the arena head and checks them. */
static int load_sample(uint32_t i, uint8_t *arena, parts_t *p)
{
    p->s = (pim_sample_t *)(void *)arena;
    p->job = (pim_dpu_job_t *)(void *)(arena + sizeof(pim_sample_t));
    p->xh = (pim_axis_t *)(void *)(arena + sizeof(pim_sample_t) + sizeof(pim_dpu_job_t));
    p->yh = p->xh + 1;
    read_big(chunk + header.samples_off + i * (uint32_t)sizeof(pim_sample_t), p->s, sizeof(pim_sample_t));
    read_big(chunk + header.jobs_off + i * (uint32_t)sizeof(pim_dpu_job_t), p->job, sizeof(pim_dpu_job_t));
    const pim_sample_t *s = p->s;
    const pim_dpu_job_t *j = p->job;
    if ((s->channels != 1 && s->channels != 3) || (s->out_esize != 1 && s->out_esize != 2 && s->out_esize != 4) ||
        (s->out_esize > 1 && header.lut_bytes < 256u * s->channels * s->out_esize) ||
        (s->flags & ~(PIM_FLAG_HFLIP | PIM_FLAG_VFLIP | PIM_FLAG_NHWC)) || s->crop_h == 0 || s->crop_w == 0 ||
        s->out_h == 0 || s->out_w == 0 || s->crop_top + (uint64_t)s->crop_h > s->src_h ||
        s->crop_left + (uint64_t)s->crop_w > s->src_w || s->src_stride < (uint64_t)s->src_w * s->channels ||
        s->xtab_offset % 8 || s->ytab_offset % 8 || s->xtab_offset + 16ull > header.tables_bytes ||
        s->ytab_offset + 16ull > header.tables_bytes) {
        fail(PIM_DPU_ERR_SAMPLE, i, 1);
        return 0;
    }
    const uint64_t src_end = s->src_offset + (uint64_t)(s->src_h - 1) * s->src_stride + (uint64_t)s->src_w * s->channels;
    const uint32_t planes = (s->flags & PIM_FLAG_NHWC) ? 1u : s->channels;
    const uint32_t row = (s->flags & PIM_FLAG_NHWC) ? s->out_w * s->channels * s->out_esize : s->out_w * s->out_esize;
    const uint64_t dst_end = s->dst_offset + (uint64_t)planes * s->out_h * j->out_pitch;
    if (src_end > header.in_bytes || s->dst_offset % 8 ||
        s->dst_offset < (uint64_t)header.out_off + sizeof(pim_dpu_status_t) ||
        dst_end > (uint64_t)header.out_off + header.out_bytes || j->out_pitch != pim_dpu_round8(row) ||
        j->seg_w == 0 || j->seg_w % 8 || j->src_buf % 8 || j->row_base + (uint64_t)s->out_h > header.total_rows) {
        fail(PIM_DPU_ERR_SAMPLE, i, 2);
        return 0;
    }
    read_big(chunk + header.tables_off + s->xtab_offset, p->xh, sizeof(pim_axis_t));
    read_big(chunk + header.tables_off + s->ytab_offset, p->yh, sizeof(pim_axis_t));
    const pim_axis_t *ax = p->xh, *ay = p->yh;
    const int need_h = s->crop_w != s->out_w, need_v = s->crop_h != s->out_h;
    if (ax->n_in != s->crop_w || ax->n_out != s->out_w || ay->n_in != s->crop_h || ay->n_out != s->out_h ||
        (need_h && (ax->taps == 0 || ax->taps % 4 || ax->precision < PIM_MIN_PRECISION ||
                    ax->precision > PIM_MAX_PRECISION ||
                    s->xtab_offset + (uint64_t)axis_bytes(ax) > header.tables_bytes)) ||
        (need_v && (ay->taps == 0 || ay->taps % 4 || ay->precision < PIM_MIN_PRECISION ||
                    ay->precision > PIM_MAX_PRECISION ||
                    s->ytab_offset + (uint64_t)axis_bytes(ay) > header.tables_bytes))) {
        fail(PIM_DPU_ERR_SAMPLE, i, 3);
        return 0;
    }
    if (j->ring_rows && (!need_h || !need_v || j->ring_rows > ay->taps)) {
        fail(PIM_DPU_ERR_SAMPLE, i, 6);
        return 0;
    }
    const uint32_t need = PIM_DPU_ARENA_HEAD + pim_dpu_sample_wram(j->seg_w, s->channels, s->out_esize,
                                                                   need_h ? ax->taps : 0, need_v ? ay->taps : 0,
                                                                   j->src_buf, j->ring_rows);
    if (need > arena_bytes) {
        fail(PIM_DPU_ERR_WRAM, i, need);
        return 0;
    }
    /* carve the rest of the arena (every size is a multiple of 8) */
    const uint32_t w = j->seg_w, C = s->channels;
    uint8_t *at = arena + PIM_DPU_ARENA_HEAD;
    p->src = at;
    at += j->src_buf;
    p->hrow = at;
    at += pim_dpu_round8(w * C);
    p->ring = at;
    at += j->ring_rows * pim_dpu_round8(w * C);
    p->obuf = at;
    at += w * C * s->out_esize;
    p->xseg = (pim_axis_t *)(void *)at;
    if (need_h)
        at += sizeof(pim_axis_t) + w * sizeof(pim_range_t) + w * ax->taps * 2u;
    p->acc = (int32_t *)(void *)at;
    if (need_v)
        at += w * C * 4u;
    p->yw = at;
    return 1;
}

/* Source row r of the crop, pixels [lo, lo + n) of it: `n * C` bytes in p->src; returns where
 * they start (the read starts at the 8-byte boundary below). 0 when the buffer is too short. */
static const uint8_t *read_span(const parts_t *p, uint32_t r, uint32_t lo, uint32_t n)
{
    const pim_sample_t *s = p->s;
    const uint32_t C = s->channels;
    const uint32_t at = chunk + (uint32_t)s->src_offset + (s->crop_top + r) * s->src_stride + (s->crop_left + lo) * C;
    const uint32_t start = at & ~7u;
    const uint32_t len = pim_dpu_round8(at - start + n * C);
    if (len > p->job->src_buf)
        return 0;
    read_big(start, p->src, len);
    return p->src + (at - start);
}

/* Crop row r (columns lo..lo+n), resampled horizontally into p->hrow when the sample needs
 * it; 0 when the span does not fit the source buffer. */
static const uint8_t *source_row(const parts_t *p, uint32_t r, uint32_t lo, uint32_t n,
                                 int need_h)
{
    const uint8_t *row = read_span(p, r, lo, n);
    if (row == 0 || !need_h)
        return row;
    pim_hpass_row(row, p->s->channels, p->xseg, p->hrow);
    return p->hrow;
}

/* Output rows [ya, yb) of sample i (this tasklet's part of it). */
static void run_rows(uint32_t i, const parts_t *p, uint32_t ya, uint32_t yb)
{
    const pim_sample_t *s = p->s;
    const uint32_t C = s->channels, es = s->out_esize, n = s->out_w, w = p->job->seg_w;
    const uint32_t pitch = p->job->out_pitch;
    const int hflip = (s->flags & PIM_FLAG_HFLIP) != 0, vflip = (s->flags & PIM_FLAG_VFLIP) != 0;
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0;
    const int need_h = s->crop_w != s->out_w, need_v = s->crop_h != s->out_h;
    const pim_axis_t *ax = p->xh, *ay = p->yh;
    const uint32_t xtab = chunk + header.tables_off + s->xtab_offset;
    const uint32_t ytab = chunk + header.tables_off + s->ytab_offset;
    const uint32_t out = chunk + (uint32_t)s->dst_offset;
    const uint32_t plane = s->out_h * pitch;
    pim_range_t *yr = (pim_range_t *)(void *)p->yw;
    const int16_t *yweights = (const int16_t *)(const void *)(p->yw + sizeof(pim_range_t));

    for (uint32_t d0 = 0; d0 < n; d0 += w) {
        const uint32_t m = n - d0 < w ? n - d0 : w; /* pixels in this segment */
        const uint32_t x0 = hflip ? n - d0 - m : d0;  /* output columns computed: [x0, x0 + m) */
        uint32_t lo = x0, span = m;                    /* source pixels read per row */
        if (need_h) {
            pim_axis_t *xs = p->xseg;
            pim_range_t *xr = (pim_range_t *)(void *)((uint8_t *)xs + sizeof(pim_axis_t));
            xs->n_in = ax->n_in;
            xs->n_out = m;
            xs->taps = ax->taps;
            xs->precision = ax->precision;
            read_big(xtab + (uint32_t)sizeof(pim_axis_t) + x0 * (uint32_t)sizeof(pim_range_t), xr,
                     m * (uint32_t)sizeof(pim_range_t));
            read_big(xtab + (uint32_t)sizeof(pim_axis_t) + n * (uint32_t)sizeof(pim_range_t) + x0 * ax->taps * 2u,
                     xr + m, m * ax->taps * 2u);
            lo = xr[0].first;
            const uint32_t hi = xr[m - 1].first + xr[m - 1].count;
            for (uint32_t k = 0; k < m; k++) {
                if (xr[k].count > ax->taps || xr[k].first < lo || xr[k].first + xr[k].count > hi ||
                    hi > ax->n_in) {
                    fail(PIM_DPU_ERR_SAMPLE, i, 4);
                    return;
                }
                xr[k].first -= lo;
            }
            span = hi - lo;
        }
        const uint32_t len = m * C;
        /* the ring, empty at the start of each segment: source rows [next - ring_rows, next)
         * are resampled, row r in slot r mod ring_rows; next_slot is the slot of row `next` */
        const uint32_t ring_rows = p->job->ring_rows, ring_pitch = pim_dpu_round8(w * C);
        uint32_t next = 0, next_slot = 0, prev_first = 0;
        for (uint32_t y = ya; y < yb; y++) {
            const uint8_t *row;
            if (need_v) {
                read_big(ytab + (uint32_t)sizeof(pim_axis_t) + y * (uint32_t)sizeof(pim_range_t), yr,
                         sizeof(pim_range_t));
                read_big(ytab + (uint32_t)sizeof(pim_axis_t) + s->out_h * (uint32_t)sizeof(pim_range_t) +
                             y * ay->taps * 2u,
                         p->yw + sizeof(pim_range_t), ay->taps * 2u);
                const uint32_t first = yr->first, count = yr->count;
                if (count > ay->taps || first + count > ay->n_in) {
                    fail(PIM_DPU_ERR_SAMPLE, i, 5);
                    return;
                }
                pim_vpass_init(p->acc, len, ay->precision);
                if (ring_rows) {
                    /* windows only move forward, and one fits the ring */
                    if (count > ring_rows || first < prev_first || first + count < next) {
                        fail(PIM_DPU_ERR_SAMPLE, i, 7);
                        return;
                    }
                    prev_first = first;
                    if (next < first) { /* no row of the ring is in this window */
                        next = first;
                        next_slot = 0;
                    }
                    for (; next < first + count; next++) { /* the window's new rows, resampled once */
                        const uint8_t *src = read_span(p, next, lo, span);
                        if (src == 0) {
                            fail(PIM_DPU_ERR_WRAM, i, span * C);
                            return;
                        }
                        pim_hpass_row(src, C, p->xseg, p->ring + next_slot * ring_pitch);
                        next_slot = next_slot + 1 == ring_rows ? 0 : next_slot + 1;
                    }
                    /* row `first` is next - first <= ring_rows rows behind `next` */
                    const uint32_t back = next - first;
                    uint32_t slot = next_slot >= back ? next_slot - back : next_slot + ring_rows - back;
                    for (uint32_t t = 0; t < count; t++) {
                        pim_vpass_mac(p->acc, p->ring + slot * ring_pitch, yweights[t], len);
                        slot = slot + 1 == ring_rows ? 0 : slot + 1;
                    }
                } else {
                    for (uint32_t t = 0; t < count; t++) { /* no ring: one source row per tap */
                        const uint8_t *src = source_row(p, first + t, lo, span, need_h);
                        if (src == 0) {
                            fail(PIM_DPU_ERR_WRAM, i, span * C);
                            return;
                        }
                        pim_vpass_mac(p->acc, src, yweights[t], len);
                    }
                }
                pim_vpass_finish(p->acc, ay->precision, p->hrow, len);
                row = p->hrow;
            } else {
                row = source_row(p, y, lo, span, need_h);
                if (row == 0) {
                    fail(PIM_DPU_ERR_WRAM, i, span * C);
                    return;
                }
            }
            const uint32_t yy = vflip ? s->out_h - 1 - y : y;
            if (nhwc) {
                pim_emit_row(row, m, C, hflip, 1, es, lut, p->obuf, 0);
                write_big(p->obuf, out + yy * pitch + d0 * C * es, pim_dpu_round8(m * C * es));
            } else {
                const uint32_t seg = pim_dpu_round8(m * es);
                pim_emit_row(row, m, C, hflip, 0, es, lut, p->obuf, seg);
                for (uint32_t c = 0; c < C; c++)
                    write_big(p->obuf + c * seg, out + c * plane + yy * pitch + d0 * es, seg);
            }
        }
    }
}

int main(void)
{
    const uint32_t id = me();
    if (id == 0) {
        mem_reset();
        chunk = (uint32_t)DPU_MRAM_HEAP_POINTER;
        arena_bytes = pim_dpu_arena_bytes(NR_TASKLETS, STACK_SIZE_DEFAULT);
        lut = 0;
        mram_read((__mram_ptr void const *)chunk, &header, sizeof(header));
        status.code = PIM_DPU_STATUS_OK;
        status.batch_id = header.batch_id;
        status.sample = 0;
        status.detail = 0;
        if (header.magic != PIM_DPU_MAGIC || header.version != PIM_DPU_VERSION || header.out_off % 8 ||
            header.out_off < header.in_bytes || header.out_off + (uint64_t)header.out_bytes > PIM_DPU_MRAM_BUDGET ||
            header.out_bytes < sizeof(pim_dpu_status_t) || header.lut_bytes > PIM_DPU_LUT_MAX ||
            header.lut_off % 8 || header.samples_off % 8 || header.jobs_off % 8 || header.tables_off % 8 ||
            (header.total_rows && (header.bands_off % 8 ||
                                   header.bands_off + (uint64_t)sizeof(bands) > header.in_bytes))) {
            status.code = PIM_DPU_ERR_HEADER;
        } else if (header.nr_tasklets != NR_TASKLETS || header.arena_bytes != arena_bytes || arena_bytes == 0) {
            status.code = PIM_DPU_ERR_BUILD;
            status.detail = arena_bytes;
        } else {
            if (header.lut_bytes) {
                lut = (uint8_t *)mem_alloc(pim_dpu_round8(header.lut_bytes));
                read_big(chunk + header.lut_off, lut, pim_dpu_round8(header.lut_bytes));
            }
            if (header.total_rows) { /* the tasklets' bands: row 0 to total_rows, never backwards */
                read_big(chunk + header.bands_off, bands, sizeof(bands));
                for (uint32_t t = 0; t < NR_TASKLETS; t++)
                    if (bands[t] > bands[t + 1])
                        status.code = PIM_DPU_ERR_HEADER;
                if (bands[0] != 0 || bands[NR_TASKLETS] != header.total_rows)
                    status.code = PIM_DPU_ERR_HEADER;
            }
        }
    }
    barrier_wait(&phase_barrier);
    const int header_ok = status.code == PIM_DPU_STATUS_OK;
    uint8_t *arena = header_ok ? (uint8_t *)mem_alloc(arena_bytes) : 0;
    if (header_ok && header.debug == PIM_DPU_DEBUG_HALT && id == NR_TASKLETS - 1)
        halt();

    /* phase 1: every descriptor is checked before any output is written */
    parts_t parts;
    if (header_ok)
        for (uint32_t i = id; i < header.n_samples; i += NR_TASKLETS)
            if (!load_sample(i, arena, &parts))
                break;
    barrier_wait(&phase_barrier);

    /* phase 2: this tasklet's band of output rows [r0, r1) (checked by tasklet 0) */
    if (status.code == PIM_DPU_STATUS_OK && header.total_rows) {
        uint32_t r0 = bands[id], r1 = bands[id + 1];
        for (uint32_t i = 0; i < header.n_samples && r0 < r1 && status.code == PIM_DPU_STATUS_OK; i++) {
            if (!load_sample(i, arena, &parts))
                break;
            const uint32_t base = parts.job->row_base, end = base + parts.s->out_h;
            if (end <= r0)
                continue;
            const uint32_t ya = r0 - base, yb = (r1 < end ? r1 : end) - base;
            run_rows(i, &parts, ya, yb);
            r0 = base + yb;
        }
    }
    barrier_wait(&phase_barrier);
    if (id == 0 && header.magic == PIM_DPU_MAGIC && header.out_off % 8 == 0 &&
        header.out_off + (uint64_t)sizeof(status) <= PIM_DPU_MRAM_BUDGET)
        mram_write(&status, (__mram_ptr void *)(chunk + header.out_off), sizeof(status));
    return 0;
}
