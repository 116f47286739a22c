/* cpu_hpass_vbmi.c: the horizontal pass of 3-channel rows with AVX-512 VBMI, four outputs a
 * step (pim_cpu_hpass.h says how). */
#include <string.h>

#include "pim_cpu_hpass.h"
#include "pim_resample.h"

enum { BYTES_PER_PAIR = 64 };   /* one pair of taps' permute (or weights) of a step */

size_t pim_hpass_plan_bytes(uint32_t n_out, uint32_t taps)
{
    const size_t steps = (n_out + PIM_HPASS_STEP - 1) / PIM_HPASS_STEP;
    const size_t pairs = (taps + 1) / 2;
    const size_t firsts = (steps * sizeof(uint32_t) + 63) & ~(size_t)63;
    return 2 * steps * pairs * BYTES_PER_PAIR + firsts;
}

/* Lane 4o + c of step s, pair p: taps 2p and 2p + 1 of channel c of output o. */
static void plan_output(const pim_axis_t *axis, uint32_t j, uint32_t step_first, uint8_t *index,
                        int16_t *weights, uint32_t o)
{
    const pim_range_t range = pim_axis_ranges(axis)[j];
    const int16_t *w = pim_axis_weights(axis) + (size_t)j * axis->taps;
    const uint32_t offset = range.first - step_first;
    for (uint32_t t = 0; t < range.count; t++) {
        const uint32_t p = t / 2, k = t % 2;
        for (uint32_t c = 0; c < 3; c++) {
            const uint32_t lane = 4 * o + c;
            index[p * BYTES_PER_PAIR + 4 * lane + 2 * k] = (uint8_t)(3 * (offset + t) + c);
            weights[p * (BYTES_PER_PAIR / 2) + 2 * lane + k] = w[t];
        }
    }
}

/* The most taps any output uses (taps are rounded up, their weights 0), or 0 when some
 * output's window does not lie within its step's 64 bytes. */
static uint32_t widest_fitting(const pim_axis_t *axis)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    uint32_t widest = 0;
    for (uint32_t j = 0; j < axis->n_out; j++) {
        const uint32_t step_first = ranges[j - j % PIM_HPASS_STEP].first;
        if (ranges[j].first < step_first ||
            3 * ((size_t)ranges[j].first - step_first + ranges[j].count) > PIM_HPASS_WINDOW)
            return 0;
        if (ranges[j].count > widest)
            widest = ranges[j].count;
    }
    return widest;
}

int pim_hpass_plan(const pim_axis_t *axis, void *memory, pim_hpass_plan_t *plan)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const uint32_t n = axis->n_out, widest = widest_fitting(axis);
    if (widest == 0)
        return 0;
    plan->steps = (n + PIM_HPASS_STEP - 1) / PIM_HPASS_STEP;
    plan->pairs = (widest + 1) / 2;
    plan->precision = axis->precision;
    const size_t table = (size_t)plan->steps * plan->pairs * BYTES_PER_PAIR;
    uint8_t *index = memory;
    int16_t *weights = (int16_t *)(void *)(index + table);
    uint32_t *first = (uint32_t *)(void *)(index + 2 * table);
    memset(memory, 0, pim_hpass_plan_bytes(n, widest));   /* taps past a count: weight 0 */
    for (uint32_t s = 0; s < plan->steps; s++) {
        first[s] = ranges[s * PIM_HPASS_STEP].first;
        for (uint32_t o = 0; o < PIM_HPASS_STEP && s * PIM_HPASS_STEP + o < n; o++)
            plan_output(axis, s * PIM_HPASS_STEP + o, first[s],
                        index + (size_t)s * plan->pairs * BYTES_PER_PAIR,
                        weights + (size_t)s * plan->pairs * (BYTES_PER_PAIR / 2), o);
    }
    plan->index = index;
    plan->weights = weights;
    plan->first = first;
    return 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

#define VBMI_INLINE \
    __attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline

/* The source row a few steps on: the decoded rows come from further than L1 (a run's
 * samples are decoded before they are resampled), and the prefetch halved the pass's time
 * in the loader. */
VBMI_INLINE void prefetch_ahead(const uint8_t *window)
{
    _mm_prefetch((const char *)(window + 384), _MM_HINT_T0);
}

/* One pair of taps of a step: the pixels the permute picks, times their weights. */
VBMI_INLINE __m512i pair_sums(__m512i window, __m512i index, __m512i weights)
{
    const __m512i pixels = _mm512_maskz_permutexvar_epi8(
        (__mmask64)0x5555555555555555ULL, index, window);
    return _mm512_madd_epi16(pixels, weights);
}

/* The step's four pixels, pim_acc_to_u8 of each sum (below 0: 0, above 255: 255), stored
 * as 12 bytes (and 4 more that the next step or the row's slack takes). */
VBMI_INLINE void store_step(__m512i acc, __m128i shift, uint8_t *dst)
{
    const __m128i pack_rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    acc = _mm512_max_epi32(_mm512_sra_epi32(acc, shift), _mm512_setzero_si512());
    _mm_storeu_si128((__m128i *)(void *)dst,
                     _mm_shuffle_epi8(_mm512_cvtusepi32_epi8(acc), pack_rgb));
}

/* One row, or two (`two`, a constant where it is inlined) with each load of the plan
 * shared. */
VBMI_INLINE void hpass_rows(const uint8_t *src0, const uint8_t *src1,
                            const pim_hpass_plan_t *plan, uint8_t *dst0, uint8_t *dst1,
                            int two)
{
    const __m512i init = _mm512_set1_epi32(pim_acc_init(plan->precision));
    const __m128i shift = _mm_cvtsi32_si128((int)plan->precision);
    const uint8_t *index = plan->index;
    const int16_t *weights = plan->weights;
    const uint32_t *first = plan->first;
    const uint32_t steps = plan->steps, pairs = plan->pairs;   /* (no reload after a store) */
    for (uint32_t s = 0; s < steps; s++) {
        prefetch_ahead(src0 + 3u * first[s]);
        if (two)
            prefetch_ahead(src1 + 3u * first[s]);
        const __m512i window0 = _mm512_loadu_si512(src0 + 3u * first[s]);
        const __m512i window1 = two ? _mm512_loadu_si512(src1 + 3u * first[s]) : window0;
        __m512i acc0 = init, acc1 = init;
        for (uint32_t p = 0; p < pairs; p++) {
            const __m512i i = _mm512_loadu_si512(index), w = _mm512_loadu_si512(weights);
            acc0 = _mm512_add_epi32(acc0, pair_sums(window0, i, w));
            if (two)
                acc1 = _mm512_add_epi32(acc1, pair_sums(window1, i, w));
            index += BYTES_PER_PAIR;
            weights += BYTES_PER_PAIR / 2;
        }
        store_step(acc0, shift, dst0 + 3u * PIM_HPASS_STEP * s);
        if (two)
            store_step(acc1, shift, dst1 + 3u * PIM_HPASS_STEP * s);
    }
}

VBMI void pim_hpass_c3_vbmi(const uint8_t *src, const pim_hpass_plan_t *plan, uint8_t *dst)
{
    hpass_rows(src, src, plan, dst, dst, 0);
}

VBMI void pim_hpass2_c3_vbmi(const uint8_t *src0, const uint8_t *src1,
                             const pim_hpass_plan_t *plan, uint8_t *dst0, uint8_t *dst1)
{
    hpass_rows(src0, src1, plan, dst0, dst1, 1);
}

#else /* no x86-64 SIMD: never called (pim_cpu_simd never reaches level 3) */

void pim_hpass_c3_vbmi(const uint8_t *src, const pim_hpass_plan_t *plan, uint8_t *dst)
{
    (void)src, (void)plan, (void)dst;
}

void pim_hpass2_c3_vbmi(const uint8_t *src0, const uint8_t *src1,
                        const pim_hpass_plan_t *plan, uint8_t *dst0, uint8_t *dst1)
{
    (void)src0, (void)src1, (void)plan, (void)dst0, (void)dst1;
}
#endif
