/* pim_dpu_plan.h: how the DPU host driver plans a batch (csrc/dpu_plan.c), exported so that
 * the driver (csrc/dpu_driver.c) and the cost model (pimloader's costmodel, through the cffi
 * module pimloader._dpu_emulated) read one plan instead of two copies of it.
 *
 * A plan, for a kernel whose tasklets each own an arena of `arena_bytes` of WRAM
 * (pim_dpu_arena_bytes, pim_dpu_layout.h):
 *   per sample   checked against its axis tables (pim_check_axis) and the kernel's limits;
 *                the widest segment (output pixels per pass) whose WRAM fits the arena with a
 *                ring of the widest vertical window, else without a ring; its MRAM pitch and
 *                sizes; its estimated work per output row (pim_dpu_row_work);
 *   over DPUs    contiguous runs of samples minimising the largest run's estimated work
 *                (pim_dpu_split), every active DPU at least one sample;
 *   per DPU      its output rows (its samples', in order) cut into nr_tasklets bands of
 *                about equal estimated work (pim_dpu_cut_bands).
 * No libdpu here: planning needs no DPU.
 */
#ifndef PIM_DPU_PLAN_H
#define PIM_DPU_PLAN_H

#include <stdint.h>

#include "pim_params.h"

/* cffi-cdef-begin */
typedef struct pim_dpu_sample_plan {
    uint32_t seg_w;       /* output pixels per segment, a multiple of 8 */
    uint32_t src_buf;     /* bytes of the source-row buffer of a segment (multiple of 8) */
    uint32_t ring_rows;   /* horizontally resampled rows kept in WRAM (0: no ring) */
    uint32_t pitch;       /* bytes between two output rows in MRAM (row_bytes rounded up to 8) */
    uint32_t planes;      /* NCHW: channels; NHWC: 1 */
    uint32_t row_bytes;   /* bytes of one output row (plane row) in the output batch */
    uint64_t crop_bytes;  /* the crop box's pixels, as sent (before the 8-byte padding) */
    uint64_t out_bytes;   /* the sample's output in MRAM: planes x out_h x pitch */
} pim_dpu_sample_plan_t;

/* A batch's plan. The caller provides the arrays (sizes in brackets; n samples, D = nr_dpus,
 * T = nr_tasklets, rows = sum of the samples' out_h). */
typedef struct pim_dpu_plan {
    pim_dpu_sample_plan_t *samples; /* [n] */
    uint64_t *work;                 /* [n] estimated work per sample (sum of its row_work) */
    uint64_t *row_work;             /* [rows] estimated work per output row, batch order */
    uint32_t *first;                /* [D + 1] DPU d gets samples [first[d], first[d + 1]), d < active */
    uint32_t *bands;                /* [D x (T + 1)] DPU d's band edges, rows of its chunk: tasklet t
                                       computes rows [bands[d (T+1) + t], bands[d (T+1) + t + 1]) */
    uint32_t active;                /* DPUs with samples: min(n, D) */
    const uint64_t *extra_work;     /* [n] or NULL: work of an earlier stage on the same DPUs
                                       (the JPEG decoder's), added to each sample's for the split */
} pim_dpu_plan_t;

/* Checks sample s against its tables and plans it for a kernel of nr_tasklets tasklets whose
 * arena is arena_bytes (refusing what cannot fit). Returns 1, or 0 with a message in err. */
int pim_dpu_plan_sample(const pim_sample_t *s, const uint8_t *tables, uint64_t tables_bytes,
                        uint32_t arena_bytes, uint32_t nr_tasklets, pim_dpu_sample_plan_t *plan,
                        char *err, uint32_t err_len);

/* The estimate of each output row's work (rows[out_h], when not NULL) of a sample planned by
 * pim_dpu_plan_sample (its tables already checked); returns the sum. Weights are the nominal
 * instruction costs of docs/cost_model.md, per row y with C channels, out_w outputs, Sx = sum
 * of the horizontal taps, V(y) = vertical taps of row y, fresh(y) = source rows resampled
 * horizontally for row y (with the ring: the rows of its window past the previous row's
 * window; without: V(y); 1 when the height is kept):
 *     C * fresh(y) * (6 * Sx + 9 * out_w)      horizontal pass (when the width is resampled)
 *   + C * out_w * (9 * V(y) + 9)               vertical pass   (when the height is resampled)
 *   + C * out_w * 8 + 40 * segments            conversion and per-row bookkeeping */
uint64_t pim_dpu_row_work(const pim_sample_t *s, const uint8_t *tables,
                          const pim_dpu_sample_plan_t *plan, uint64_t *rows);

/* Contiguous runs of n samples of estimated work[i] over at most nr_dpus DPUs, minimising the
 * largest run's work: the least bound L for which a greedy cut (each run takes samples while
 * it stays within L) needs at most `active` = min(n, nr_dpus) runs, found by bisection; then
 * that cut, leaving at least one sample for each later DPU. Writes first[0..active] and
 * returns active. */
uint32_t pim_dpu_split(const uint64_t *work, uint32_t n, uint32_t nr_dpus, uint32_t *first);

/* Band edges of one DPU's rows: tasklet t gets rows [edges[t], edges[t + 1]), band t starting
 * at the first row whose work before it reaches t / T of the DPU's work (edges[T + 1]). */
void pim_dpu_cut_bands(const uint64_t *row_work, uint32_t rows, uint32_t nr_tasklets,
                       uint32_t *edges);

/* The whole plan of n samples over nr_dpus DPUs of nr_tasklets tasklets (what pim_dpu_submit
 * runs); the split weighs work[i] + extra_work[i] when plan->extra_work is set. Returns 0;
 * i + 1 when sample i is refused (message "sample i: ..." in err); -1 for bad arguments or
 * host memory. */
int pim_dpu_plan(const pim_sample_t *samples, uint32_t n, const uint8_t *tables,
                 uint64_t tables_bytes, uint32_t nr_dpus, uint32_t nr_tasklets,
                 uint32_t arena_bytes, pim_dpu_plan_t *plan, char *err, uint32_t err_len);
/* cffi-cdef-end */

/* Bytes of the axis table `a` (a header alone when its axis is not resampled). */
static inline uint32_t pim_dpu_table_bytes(const pim_axis_t *a)
{
    return a->n_in == a->n_out ? (uint32_t)sizeof(pim_axis_t)
                               : (uint32_t)PIM_AXIS_TABLE_BYTES(a->n_out, a->taps);
}

#endif /* PIM_DPU_PLAN_H */
