/* pim_cpu_hpass.h: the horizontal pass of 3-channel rows four outputs a step, for CPUs with
 * AVX-512 VBMI (csrc/cpu_hpass_vbmi.c). Called by csrc/cpu_kernels.c (not exported), which
 * picks it by its SIMD level; it computes pim_hpass_row's sums exactly.
 *
 * A step loads the 64 source bytes from its first output's window start and, for each pair
 * of taps, permutes the bytes every output and channel needs into int16 lanes (vpermb with
 * the odd bytes zeroed), then multiplies and adds them against the taps' weights (vpmaddwd):
 * int32 lane 4o + c holds channel c (c = 3 unused) of output o. Where the permutes and the
 * weights come from is the axis's plan, made once per sample. */
#ifndef PIM_CPU_HPASS_H
#define PIM_CPU_HPASS_H

#include <stddef.h>
#include <stdint.h>

#include "pim_params.h"

enum {
    PIM_HPASS_STEP = 4,     /* outputs per step */
    PIM_HPASS_WINDOW = 64,  /* source bytes a step reads from its first output's window */
};

/* Where each step of an axis reads and what it multiplies. */
typedef struct pim_hpass_plan {
    uint32_t steps, pairs, precision;
    const uint32_t *first;    /* [steps]: the step's first source pixel */
    const uint8_t *index;     /* [steps][pairs][64]: the window byte of each lane's low byte */
    const int16_t *weights;   /* [steps][pairs][32]: the weight of each int16 lane */
} pim_hpass_plan_t;

/* The memory a plan for n_out outputs of at most `taps` taps takes (a multiple of 64). */
size_t pim_hpass_plan_bytes(uint32_t n_out, uint32_t taps);

/* Makes `axis`'s plan in `memory` (pim_hpass_plan_bytes of room). Returns 0
 * when some output's window does not lie within its step's 64 bytes (a downscale of about
 * 4x or more): the caller then runs another pass. */
int pim_hpass_plan(const pim_axis_t *axis, void *memory, pim_hpass_plan_t *plan);

/* One row: src is the crop's left edge in the row, readable for 3 * n_in + 64 bytes; dst
 * gets 3 * n_out bytes and up to 16 bytes past them are overwritten. For CPUs with
 * AVX-512 VBMI (callers check). */
void pim_hpass_c3_vbmi(const uint8_t *src, const pim_hpass_plan_t *plan, uint8_t *dst);

/* Two rows with one pass over the plan (its loads shared): pim_hpass_c3_vbmi of each. */
void pim_hpass2_c3_vbmi(const uint8_t *src0, const uint8_t *src1,
                        const pim_hpass_plan_t *plan, uint8_t *dst0, uint8_t *dst1);

#endif /* PIM_CPU_HPASS_H */
