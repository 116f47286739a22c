/* pim_dpu_layout.h: the MRAM layout of one DPU's chunk of a batch, shared by the host driver
 * (csrc/dpu_driver.c, dpu_plan.c, dpu_chunk.c) and the DPU kernel (dpu_src/crop_resize.c), as
 * PrIM's common.h.
 *
 * A chunk starts at DPU_MRAM_HEAP_POINTER (the host writes it at DPU_MRAM_HEAP_POINTER_NAME,
 * offset 0). Every offset below counts bytes from that start; every part is 8-byte aligned.
 *
 *   [0, 64)            pim_dpu_header_t
 *   samples_off        n_samples x pim_sample_t (pim_params.h), rewritten for the DPU:
 *                      src_offset / dst_offset count from the chunk start, xtab_offset /
 *                      ytab_offset from tables_off; the source is the crop box alone
 *                      (crop_top = crop_left = 0, src_stride = crop_w * channels)
 *   jobs_off           n_samples x pim_dpu_job_t: how the kernel walks each sample
 *   bands_off          nr_tasklets + 1 uint32 (padded to 8 bytes): tasklet t computes the
 *                      chunk's output rows [bands[t], bands[t + 1]), cut by the host so that
 *                      the bands carry about equal work (pim_dpu_row_work, csrc/dpu_plan.c)
 *   tables_off         the axis tables the chunk's samples use (pim_params.h format)
 *   lut_off            channels x 256 output bit patterns (lut_bytes, 0 when uint8 out)
 *   ...                the crop boxes' pixels, each 8-byte aligned
 *   in_bytes           end of what the host writes (real length; padded to a common length
 *                      across DPUs for dpu_push_xfer)
 *   out_off            pim_dpu_status_t, then each sample's output (out_bytes in all,
 *                      status included). out_off is the same on every DPU of a batch, so
 *                      one dpu_push_xfer(FROM_DPU) gathers them.
 *
 * A sample's output in MRAM: `planes` x out_h rows of `out_pitch` bytes (NCHW: planes =
 * channels, a row is out_w elements; NHWC: planes = 1, a row is out_w x channels elements),
 * out_pitch = that row rounded up to 8 bytes so that every DMA is 8-byte aligned. The host
 * drops the padding when it copies the sample into its slot of the output batch.
 *
 * WRAM: tasklet 0 holds the lookup table (at most PIM_DPU_LUT_MAX bytes) for all tasklets;
 * each tasklet owns one arena of pim_dpu_arena_bytes(NR_TASKLETS, stack) bytes from mem_alloc.
 * An arena holds a 120-byte sample header (descriptor, job, axis headers) and the buffers of
 * pim_dpu_sample_wram(); the host picks each sample's segment width (output pixels computed
 * per pass) and row ring (the last `ring_rows` horizontally resampled rows of a segment, kept
 * for the vertical taps of the next output rows) so that they fit; a sample whose ring does
 * not fit even 8 pixels wide runs without it (each source row resampled once per vertical
 * tap), and one that does not fit at all is refused.
 *
 * Integer arithmetic only (the kernel includes this header).
 */
#ifndef PIM_DPU_LAYOUT_H
#define PIM_DPU_LAYOUT_H

#include <stdint.h>

#include "pim_params.h"

/* cffi-cdef-begin */
#define PIM_DPU_MAGIC 0x50494D44      /* "PIMD" */
#define PIM_DPU_VERSION 2
#define PIM_DPU_STATUS_OK 0x600D600D

/* kernel-detected errors (pim_dpu_status_t.code) */
#define PIM_DPU_ERR_HEADER 1          /* bad magic/version or inconsistent chunk offsets */
#define PIM_DPU_ERR_BUILD 2           /* NR_TASKLETS or arena size differ from the host's */
#define PIM_DPU_ERR_SAMPLE 3          /* a descriptor, job or table is invalid */
#define PIM_DPU_ERR_WRAM 4            /* a segment needs more WRAM than planned */

/* test hooks (pim_dpu_header_t.debug) */
#define PIM_DPU_DEBUG_HALT 1          /* the last tasklet calls halt(): a DPU fault */

#define PIM_DPU_WRAM_BYTES 65536
#define PIM_DPU_WRAM_RESERVE 2048     /* globals of the kernel and the runtime (assumed) */
#define PIM_DPU_LUT_MAX 3072          /* 3 channels x 256 x 4 bytes */
#define PIM_DPU_ARENA_HEAD 120        /* descriptor 64 + job 24 + two axis headers 16 */
#define PIM_DPU_MRAM_BUDGET 66060288 /* bytes of MRAM a chunk may use: 63 MB of the 64 */

typedef struct pim_dpu_header {
    uint32_t magic;        /* PIM_DPU_MAGIC */
    uint32_t version;      /* PIM_DPU_VERSION */
    uint32_t batch_id;     /* echoed in the status: stale outputs are detected */
    uint32_t n_samples;
    uint32_t total_rows;   /* sum of the samples' out_h */
    uint32_t samples_off;
    uint32_t jobs_off;
    uint32_t tables_off;
    uint32_t tables_bytes;
    uint32_t lut_off;
    uint32_t lut_bytes;    /* 0: no table (uint8 outputs) */
    uint32_t in_bytes;     /* real bytes written by the host, header included */
    uint32_t out_off;      /* pim_dpu_status_t, then the outputs */
    uint32_t out_bytes;    /* status + outputs */
    uint32_t arena_bytes;  /* per-tasklet WRAM arena the host planned with */
    uint32_t nr_tasklets;  /* and the tasklet count it planned for */
    uint32_t debug;        /* PIM_DPU_DEBUG_* test hooks, 0 in production */
    uint32_t bands_off;    /* nr_tasklets + 1 row indices: the tasklets' bands of output rows */
} pim_dpu_header_t;

typedef struct pim_dpu_job {
    uint32_t seg_w;        /* output pixels per segment: a multiple of 8 */
    uint32_t src_buf;      /* bytes of the source-row buffer a segment needs (multiple of 8) */
    uint32_t out_pitch;    /* bytes between two output rows in MRAM (multiple of 8) */
    uint32_t row_base;     /* global index of this sample's first output row in the chunk */
    uint32_t ring_rows;    /* resampled rows kept for the vertical taps (0: no ring) */
    uint32_t reserved;     /* 0 */
} pim_dpu_job_t;

typedef struct pim_dpu_status {
    uint32_t code;         /* PIM_DPU_STATUS_OK or PIM_DPU_ERR_* */
    uint32_t batch_id;     /* the header's */
    uint32_t sample;       /* index in the chunk of the sample an error is about */
    uint32_t detail;       /* error-specific number (e.g. WRAM bytes needed) */
} pim_dpu_status_t;
/* cffi-cdef-end */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(pim_dpu_header_t) == 72, "pim_dpu_header_t layout");
_Static_assert(sizeof(pim_dpu_header_t) % 8 == 0, "MRAM transfers need multiples of 8");
_Static_assert(sizeof(pim_dpu_job_t) == 24, "pim_dpu_job_t layout");
_Static_assert(sizeof(pim_dpu_status_t) == 16, "pim_dpu_status_t layout");
_Static_assert(PIM_DPU_ARENA_HEAD == sizeof(pim_sample_t) + sizeof(pim_dpu_job_t) + 2 * sizeof(pim_axis_t),
               "arena head");
#endif

static inline uint32_t pim_dpu_round8(uint32_t v)
{
    return (v + 7u) & ~7u;
}

/* WRAM bytes of one tasklet's arena for a kernel built with NR_TASKLETS = nr_tasklets and
 * STACK_SIZE_DEFAULT = stack_bytes (0 when they cannot fit at all). */
static inline uint32_t pim_dpu_arena_bytes(uint32_t nr_tasklets, uint32_t stack_bytes)
{
    const uint32_t fixed = PIM_DPU_WRAM_RESERVE + PIM_DPU_LUT_MAX;
    if (nr_tasklets == 0 || nr_tasklets > 24 || stack_bytes > PIM_DPU_WRAM_BYTES / nr_tasklets)
        return 0;
    const uint32_t stacks = nr_tasklets * stack_bytes;
    if (stacks + fixed >= PIM_DPU_WRAM_BYTES)
        return 0;
    uint32_t left = PIM_DPU_WRAM_BYTES - stacks - fixed;
    uint32_t per = 0; /* left / nr_tasklets without a division instruction (once per launch) */
    while ((per + 8u) * nr_tasklets <= left)
        per += 8u;
    return per;
}

/* WRAM bytes (after the arena head) a sample needs with segment width w (pixels):
 * taps_x = 0 when the width is not resampled, taps_y = 0 when the height is not;
 * ring_rows horizontally resampled rows kept for the vertical pass (0: no ring). */
static inline uint32_t pim_dpu_sample_wram(uint32_t w, uint32_t channels, uint32_t esize,
                                           uint32_t taps_x, uint32_t taps_y, uint32_t src_buf,
                                           uint32_t ring_rows)
{
    uint32_t n = src_buf;
    n += pim_dpu_round8(w * channels);                   /* resampled (or finished) row */
    n += ring_rows * pim_dpu_round8(w * channels);       /* the ring of resampled rows */
    n += w * channels * esize;                           /* output segment (w % 8 == 0) */
    if (taps_x)
        n += (uint32_t)sizeof(pim_axis_t) + w * (uint32_t)sizeof(pim_range_t) + w * taps_x * 2u;
    if (taps_y)
        n += w * channels * 4u + (uint32_t)sizeof(pim_range_t) + taps_y * 2u;
    return n;
}

#endif /* PIM_DPU_LAYOUT_H */
