/* cpu_kernels.c: the fused crop + resize + flip + convert step on the CPU.
 *
 * How rows move on the host; the arithmetic itself is pim_resample.h's, shared with the DPU
 * kernels. Per sample: horizontally resample the crop's source rows as the vertical pass
 * needs them (into a ring of `taps` + 1 rows, since the vertical windows only move down), run
 * the vertical pass into an int32 accumulator row, round, then flip/convert/lay out the row
 * straight into the output slot. One thread; parallelism is across worker processes.
 *
 * The row loops come in three versions computing the same integer sums: the portable code of
 * pim_resample.h (what the DPU kernels run), and SSSE3 / AVX2 versions picked at run time
 * (pim_cpu_simd); the horizontal pass of 3-channel rows has a fourth, AVX-512 VBMI
 * (cpu_hpass_vbmi.c). The output step (flip, table lookup, layout) has AVX2 and AVX-512 VBMI
 * versions (cpu_emit_avx2.c, cpu_emit_vbmi.c) writing the same elements as pim_emit_row.
 * The tests check all of them against torchvision, numpy and each other.
 */
#include <stdlib.h>
#include <string.h>

#include "pim_axis_check.h"
#include "pim_cpu.h"
#include "pim_cpu_checks.h"
#include "pim_cpu_colour.h"
#include "pim_cpu_emit.h"
#include "pim_cpu_hpass.h"
#include "pim_resample.h"
#include "pim_error.h"


/* ---- row loops ----------------------------------------------------------------------
 * The horizontal and vertical passes below compute exactly pim_resample.h's sums (int32
 * integer arithmetic is exact, so the order of the additions does not matter), with SIMD
 * where the CPU has it. The SIMD horizontal pass reads whole groups of 4 taps: the table's
 * weights past `count` are zero (pim_check_axis makes sure), and the source row must be
 * readable for C * (n_in + taps) + READ_SLACK bytes from the crop's left edge (the AVX-512
 * one reads 64 bytes from a window's start). It writes up to 16 bytes past the row's end
 * (row buffers have ROW_SLACK). */

#define ROW_SLACK 64u
#define READ_SLACK 64u

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define PIM_HAVE_X86 1
#include <immintrin.h>
#endif

static int g_simd = -1; /* -1 until first use */

static int detect_simd(void)
{
#ifdef PIM_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vbmi"))
        return 3;
    if (__builtin_cpu_supports("avx2"))
        return 2;
    if (__builtin_cpu_supports("ssse3"))
        return 1;
#endif
    return 0;
}

int pim_cpu_simd(int request)
{
    const int best = detect_simd();
    g_simd = (request < 0 || request > best) ? best : request;
    return g_simd;
}

/* The SIMD level pim_cpu_simd set (detecting the best on first use). */
static int pim_cpu_simd_level(void)
{
    return g_simd < 0 ? pim_cpu_simd(-1) : g_simd;
}

static inline uint32_t round4(uint32_t v)
{
    return (v + 3u) & ~3u;
}

#ifdef PIM_HAVE_X86
__attribute__((target("ssse3"))) static void hpass_c3_ssse3(const uint8_t *src,
                                                            const pim_axis_t *axis, uint8_t *dst,
                                                            uint32_t j0)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    const uint32_t taps = axis->taps;
    const __m128i init = _mm_set1_epi32(pim_acc_init(axis->precision));
    const __m128i shift = _mm_cvtsi32_si128((int)axis->precision);
    /* taps t, t+1 -> int16 lanes r r g g b b 0 0; and taps t+2, t+3 */
    const __m128i lo = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i hi = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    for (uint32_t j = j0; j < axis->n_out; j++) {
        const uint8_t *s = src + 3u * ranges[j].first;
        const int16_t *k = weights + (size_t)j * taps;
        const uint32_t n = round4(ranges[j].count);
        __m128i acc = init;
        for (uint32_t t = 0; t < n; t += 4) {
            const __m128i px = _mm_loadu_si128((const __m128i *)(const void *)(s + 3 * t));
            const __m128i w = _mm_loadl_epi64((const __m128i *)(const void *)(k + t));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(px, lo),
                                                    _mm_shuffle_epi32(w, 0x00)));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(px, hi),
                                                    _mm_shuffle_epi32(w, 0x55)));
        }
        acc = _mm_sra_epi32(acc, shift);
        acc = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
        const uint32_t v = (uint32_t)_mm_cvtsi128_si32(acc);
        memcpy(dst + 3 * j, &v, 4);
    }
}

/* Pixels of taps t..t+3 of two windows (16 bytes from each: 12 used), one per lane. */
__attribute__((target("avx2"))) static inline __m256i hpass_c3_pair_pixels(
    const uint8_t *s0, const uint8_t *s1, uint32_t t)
{
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(s0 + 3 * t))),
        _mm_loadu_si128((const __m128i *)(const void *)(s1 + 3 * t)), 1);
}

/* Weights of taps t..t+3 of two windows, one per lane (low 8 bytes of each). */
__attribute__((target("avx2"))) static inline __m256i hpass_c3_pair_weights(
    const int16_t *k0, const int16_t *k1, uint32_t t)
{
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(const void *)(k0 + t))),
        _mm_loadl_epi64((const __m128i *)(const void *)(k1 + t)), 1);
}

/* Outputs j (low lane) and j + 1 (high lane) of a 3-channel row: int32 r g b 0 each. */
__attribute__((target("avx2"))) static inline __m256i hpass_c3_pair(
    const uint8_t *src, const pim_range_t *ranges, const int16_t *weights, uint32_t taps,
    uint32_t j, __m256i init)
{
    const __m256i lo = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                        0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i hi = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1,
                                        -1, 6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1,
                                        -1, -1);
    const uint8_t *s0 = src + 3u * ranges[j].first;
    const uint8_t *s1 = src + 3u * ranges[j + 1].first;
    const int16_t *k0 = weights + (size_t)j * taps;
    const int16_t *k1 = k0 + taps;
    const uint32_t c0 = ranges[j].count, c1 = ranges[j + 1].count;
    const uint32_t count = c0 > c1 ? c0 : c1;
    __m256i acc = init;
    uint32_t t = 0;
    /* taps t..t+3 while three or more are left; then taps t, t+1 alone if one or two are
     * (the weights past a window's count are zero: skipping them changes no sum) */
    for (; t + 2 < count; t += 4) {
        const __m256i px = hpass_c3_pair_pixels(s0, s1, t);
        const __m256i w = hpass_c3_pair_weights(k0, k1, t);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, lo),
                                                      _mm256_shuffle_epi32(w, 0x00)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, hi),
                                                      _mm256_shuffle_epi32(w, 0x55)));
    }
    if (t < count) {
        const __m256i px = hpass_c3_pair_pixels(s0, s1, t);
        const __m256i w = hpass_c3_pair_weights(k0, k1, t);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, lo),
                                                      _mm256_shuffle_epi32(w, 0x00)));
    }
    return acc;
}

/* Four outputs per step, stored as one 16-byte write of 12 pixel bytes (the 4 bytes past
 * them are overwritten by the next step, or land in the row's slack). */
__attribute__((target("avx2"))) static void hpass_c3_avx2(const uint8_t *src,
                                                          const pim_axis_t *axis, uint8_t *dst)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    const uint32_t taps = axis->taps;
    const __m256i init = _mm256_set1_epi32(pim_acc_init(axis->precision));
    const __m128i shift = _mm_cvtsi32_si128((int)axis->precision);
    const __m128i pack_rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    uint32_t j = 0;
    for (; j + 4 <= axis->n_out; j += 4) {
        /* as cpu_hpass_vbmi.c's: the decoded rows come from further than L1 */
        _mm_prefetch((const char *)(src + 3u * ranges[j].first + 384), _MM_HINT_T0);
        const __m256i a01 = _mm256_sra_epi32(hpass_c3_pair(src, ranges, weights, taps, j, init), shift);
        const __m256i a23 = _mm256_sra_epi32(hpass_c3_pair(src, ranges, weights, taps, j + 2, init), shift);
        /* lanes: low j | j+2, high j+1 | j+3, each r g b 0 -> bytes j, j+1, j+2, j+3 */
        const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a01, a23), a01);
        const __m128i pixels = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes),
                                                  _mm256_extracti128_si256(bytes, 1));
        _mm_storeu_si128((__m128i *)(void *)(dst + 3 * j), _mm_shuffle_epi8(pixels, pack_rgb));
    }
    for (; j + 2 <= axis->n_out; j += 2) {
        __m256i acc = _mm256_sra_epi32(hpass_c3_pair(src, ranges, weights, taps, j, init), shift);
        acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);
        const uint32_t v0 = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(acc));
        const uint32_t v1 = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(acc, 1));
        memcpy(dst + 3 * j, &v0, 4);
        memcpy(dst + 3 * j + 3, &v1, 4);
    }
    if (j < axis->n_out)
        hpass_c3_ssse3(src, axis, dst, j);
}

__attribute__((target("ssse3"))) static void hpass_c1_ssse3(const uint8_t *src,
                                                            const pim_axis_t *axis, uint8_t *dst)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    const uint32_t taps = axis->taps, precision = axis->precision;
    const int32_t init = pim_acc_init(precision);
    const __m128i zero = _mm_setzero_si128();
    for (uint32_t j = 0; j < axis->n_out; j++) {
        const uint8_t *s = src + ranges[j].first;
        const int16_t *k = weights + (size_t)j * taps;
        const uint32_t n = round4(ranges[j].count);
        __m128i acc = zero;
        uint32_t t = 0;
        for (; t + 8 <= n; t += 8) {
            const __m128i px = _mm_unpacklo_epi8(
                _mm_loadl_epi64((const __m128i *)(const void *)(s + t)), zero);
            acc = _mm_add_epi32(acc, _mm_madd_epi16(
                px, _mm_loadu_si128((const __m128i *)(const void *)(k + t))));
        }
        if (t < n) {
            uint32_t four;
            memcpy(&four, s + t, 4);
            const __m128i px = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)four), zero);
            acc = _mm_add_epi32(acc, _mm_madd_epi16(
                px, _mm_loadl_epi64((const __m128i *)(const void *)(k + t))));
        }
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0x4e));
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0xb1));
        dst[j] = pim_acc_to_u8(init + _mm_cvtsi128_si32(acc), precision);
    }
}
#endif /* PIM_HAVE_X86 */

/* src: crop's left edge in this row, readable as the SIMD loops need (see above); `hplan`:
 * the axis's plan for the AVX-512 pass, or NULL */
static void hpass(const uint8_t *src, uint32_t channels, const pim_axis_t *axis,
                  const pim_hpass_plan_t *hplan, uint8_t *dst)
{
#ifdef PIM_HAVE_X86
    if (hplan != NULL) {
        pim_hpass_c3_vbmi(src, hplan, dst);
        return;
    }
    if (g_simd >= 2 && channels == 3) {
        hpass_c3_avx2(src, axis, dst);
        return;
    }
    if (g_simd >= 1) {
        if (channels == 3)
            hpass_c3_ssse3(src, axis, dst, 0);
        else
            hpass_c1_ssse3(src, axis, dst);
        return;
    }
#endif
    pim_hpass_row(src, channels, axis, dst);
}

/* One output row of the vertical pass from its `count` source rows: pim_vpass_init/mac/
 * finish, two taps per sweep over the accumulator. */
static inline __attribute__((always_inline)) void vpass_body(const uint8_t **rows,
                                                              const int16_t *w, uint32_t count,
                                                              uint32_t precision, int32_t *acc,
                                                              uint8_t *out, uint32_t len)
{
    uint32_t t = 0;
    pim_vpass_init(acc, len, precision);
    for (; t + 2 <= count; t += 2) {
        const uint8_t *r0 = rows[t], *r1 = rows[t + 1];
        const int16_t w0 = w[t], w1 = w[t + 1];
        for (uint32_t i = 0; i < len; i++)
            acc[i] += pim_mul_w_px(w0, r0[i]) + pim_mul_w_px(w1, r1[i]);
    }
    if (t < count)
        pim_vpass_mac(acc, rows[t], w[t], len);
    pim_vpass_finish(acc, precision, out, len);
}

static void vpass_portable(const uint8_t **rows, const int16_t *w, uint32_t count,
                           uint32_t precision, int32_t *acc, uint8_t *out, uint32_t len)
{
    vpass_body(rows, w, count, precision, acc, out, len);
}

#ifdef PIM_HAVE_X86
/* Rows i..i+15 of the result for every tap, accumulators in registers: tap pairs (t, t+1)
 * are interleaved bytewise, widened to int16 and multiplied-added against (w_t, w_t+1). */
__attribute__((target("avx2"))) static void vpass_avx2(const uint8_t **rows,
                                                       const int16_t *w, uint32_t count,
                                                       uint32_t precision, int32_t *acc,
                                                       uint8_t *out, uint32_t len)
{
    const __m256i init = _mm256_set1_epi32(pim_acc_init(precision));
    const __m128i shift = _mm_cvtsi32_si128((int)precision);
    uint32_t i = 0;
    for (; i + 16 <= len; i += 16) {
        __m256i a0 = init, a1 = init;
        for (uint32_t t = 0; t < count; t += 2) {
            const int last = t + 1 == count;
            const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(rows[t] + i));
            const __m128i y = last ? x : _mm_loadu_si128((const __m128i *)(const void *)(rows[t + 1] + i));
            const uint32_t pair = (uint32_t)(uint16_t)w[t] |
                                  (last ? 0u : (uint32_t)(uint16_t)w[t + 1] << 16);
            const __m256i k = _mm256_set1_epi32((int)pair);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x, y)), k));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(x, y)), k));
        }
        a0 = _mm256_sra_epi32(a0, shift);
        a1 = _mm256_sra_epi32(a1, shift);
        /* int16 order 0-3 8-11 | 4-7 12-15 -> 0..15, then to uint8 with saturation */
        const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a0, a1), 0xd8);
        const __m128i p8 = _mm_packus_epi16(_mm256_castsi256_si128(p16),
                                            _mm256_extracti128_si256(p16, 1));
        _mm_storeu_si128((__m128i *)(void *)(out + i), p8);
    }
    if (i < len) { /* the last few bytes: the shared code on the row tails */
        for (uint32_t t = 0; t < count; t++)
            rows[t] += i; /* the caller rebuilds its row list for every output row */
        vpass_body(rows, w, count, precision, acc, out + i, len - i);
    }
}

__attribute__((target("ssse3"))) static void vpass_ssse3(const uint8_t **rows,
                                                         const int16_t *w, uint32_t count,
                                                         uint32_t precision, int32_t *acc,
                                                         uint8_t *out, uint32_t len)
{
    const __m128i init = _mm_set1_epi32(pim_acc_init(precision));
    const __m128i shift = _mm_cvtsi32_si128((int)precision);
    const __m128i zero = _mm_setzero_si128();
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        __m128i a0 = init, a1 = init;
        for (uint32_t t = 0; t < count; t += 2) {
            const int last = t + 1 == count;
            const __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(rows[t] + i));
            const __m128i y = last ? x : _mm_loadl_epi64((const __m128i *)(const void *)(rows[t + 1] + i));
            const uint32_t pair = (uint32_t)(uint16_t)w[t] |
                                  (last ? 0u : (uint32_t)(uint16_t)w[t + 1] << 16);
            const __m128i k = _mm_set1_epi32((int)pair);
            const __m128i xy = _mm_unpacklo_epi8(x, y);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(xy, zero), k));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(xy, zero), k));
        }
        a0 = _mm_sra_epi32(a0, shift);
        a1 = _mm_sra_epi32(a1, shift);
        const __m128i p8 = _mm_packus_epi16(_mm_packs_epi32(a0, a1), zero);
        _mm_storel_epi64((__m128i *)(void *)(out + i), p8);
    }
    if (i < len) {
        for (uint32_t t = 0; t < count; t++)
            rows[t] += i; /* the caller rebuilds its row list for every output row */
        vpass_body(rows, w, count, precision, acc, out + i, len - i);
    }
}
#endif

static void vpass(const uint8_t **rows, const int16_t *w, uint32_t count,
                  uint32_t precision, int32_t *acc, uint8_t *out, uint32_t len)
{
#ifdef PIM_HAVE_X86
    if (g_simd >= 2) {
        vpass_avx2(rows, w, count, precision, acc, out, len);
        return;
    }
    if (g_simd >= 1) {
        vpass_ssse3(rows, w, count, precision, acc, out, len);
        return;
    }
#endif
    vpass_portable(rows, w, count, precision, acc, out, len);
}

/* Copies into the output batch with stores that bypass the caches. A batch is far larger
 * than the caches and is read next by another process, so a plain store's read of each
 * line before overwriting it is wasted memory traffic. pim_cpu_crop_resize fences once at
 * the end, so the rows are visible before it returns. */
#ifdef PIM_HAVE_X86
__attribute__((target("sse2"))) static void stream_copy(uint8_t *dst, const uint8_t *src,
                                                        size_t n)
{
    const size_t head = (size_t)(-(uintptr_t)dst & 15u);
    if (n >= 64 + head) {
        memcpy(dst, src, head);
        dst += head;
        src += head;
        n -= head;
        for (; n >= 16; n -= 16, dst += 16, src += 16)
            _mm_stream_si128((__m128i *)(void *)dst,
                             _mm_loadu_si128((const __m128i *)(const void *)src));
    }
    memcpy(dst, src, n);
}

__attribute__((target("sse2"))) static void stream_fence(void)
{
    _mm_sfence();
}
#else
static void stream_copy(uint8_t *dst, const uint8_t *src, size_t n)
{
    memcpy(dst, src, n);
}

static void stream_fence(void)
{
}
#endif

/* Whether a finished row goes out as it is: uint8 output, unflipped, and already laid out. */
static inline int emits_as_is(uint32_t esize, int hflip, int nhwc, uint32_t channels)
{
    return esize == 1 && !hflip && (nhwc || channels == 1);
}

/* One finished row into the output: pim_emit_row into `converted` (a scratch row, channel
 * rows back to back), then streamed to its place in the slot. Kept out of line: inlined
 * into emit, its float16 loop spilled registers and ran about 1.5x slower. */
__attribute__((noinline)) static void emit_converted(const uint8_t *row, uint32_t n,
                                                     uint32_t channels, int hflip, int nhwc,
                                                     uint32_t esize, const void *lut,
                                                     uint8_t *dst, size_t plane_bytes,
                                                     uint8_t *converted)
{
    const size_t channel_row = (size_t)n * esize;
    if (emits_as_is(esize, hflip, nhwc, channels)) {
        stream_copy(dst, row, (size_t)n * channels);
        return;
    }
    pim_emit_row(row, n, channels, hflip, nhwc, esize, lut, converted, channel_row);
    if (nhwc) {
        stream_copy(dst, converted, channel_row * channels);
        return;
    }
    for (uint32_t c = 0; c < channels; c++)
        stream_copy(dst + c * plane_bytes, converted + c * channel_row, channel_row);
}

/* One finished row into the output: with AVX2 straight into its place in the slot (and
 * with AVX-512 VBMI when `wide` holds the tables), else by emit_converted. */
static void emit(const uint8_t *row, uint32_t n, uint32_t channels, int hflip, int nhwc,
                 uint32_t esize, const void *lut, uint8_t *dst, size_t plane_bytes,
                 uint8_t *converted, const pim_emit_tables_t *wide)
{
    if (!emits_as_is(esize, hflip, nhwc, channels) && g_simd >= 2 &&
        pim_emit_row_avx2(row, n, channels, hflip, nhwc, esize, lut, wide, dst, plane_bytes))
        return;
    emit_converted(row, n, channels, hflip, nhwc, esize, lut, dst, plane_bytes, converted);
}

typedef struct scratch {
    uint8_t *ring;       /* ring_rows x pitch: horizontally resampled rows */
    uint8_t *hrow;       /* pitch: one horizontally resampled row (no vertical pass) */
    uint8_t *orow;       /* pitch: one finished output row */
    uint8_t *converted;  /* that row converted for the output, before streaming (out_w x 3 x esize) */
    uint8_t *srow;       /* padded copy of a source row, when the image itself is too short */
    int32_t *acc;        /* vertical accumulator */
    const uint8_t **rows;/* the source rows of one output row */
    size_t pitch;
    uint8_t *box;        /* a padded or source-coloured sample's crop box, gathered
                            (pim_gather_padded), 3 channels of room */
    int32_t *columns;    /* its source column per box column, then (source colour) its
                            source row per box row */
    uint8_t *image;      /* a coloured sample's resampled image, 3 channels of room */
    uint8_t *source_row; /* one row of a source-coloured image, 3 channels of room */
    uint8_t *gray;       /* contrast's grayscale of a whole (source or resampled) image */
    const pim_emit_tables_t *wide; /* the lookup table for the VBMI emitter, or NULL */
    void *hpass_plan;    /* room for a sample's horizontal plan (AVX-512 VBMI), or NULL */
} scratch_t;

/* Resamples sample s; each finished row is flipped/converted into dst, or, when `staging` is
 * not NULL, copied there unflipped (out_h rows of out_w * channels bytes) for the colour
 * step. */
static void run_sample(const pim_sample_t *s, const uint8_t *src, const uint8_t *tables,
                       const void *lut, uint8_t *dst, pim_out_pitch_t pitch, uint8_t *staging,
                       const scratch_t *sc)
{
    const uint32_t C = s->channels, oh = s->out_h, ow = s->out_w, es = s->out_esize;
    const int hflip = (s->flags & PIM_FLAG_HFLIP) != 0;
    const int vflip = (s->flags & PIM_FLAG_VFLIP) != 0;
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0;
    const pim_axis_t *ax = (const pim_axis_t *)(const void *)(tables + s->xtab_offset);
    const pim_axis_t *ay = (const pim_axis_t *)(const void *)(tables + s->ytab_offset);
    const int need_h = s->crop_w != ow, need_v = s->crop_h != oh;
    const uint8_t *image = src + s->src_offset;
    const uint8_t *image_end = image + (size_t)(s->src_h - 1) * s->src_stride + (size_t)s->src_w * C;
    const uint8_t *crop = image + (size_t)s->crop_top * s->src_stride + (size_t)s->crop_left * C;
    const size_t stride = s->src_stride;
    const uint32_t len = ow * C; /* bytes of one resampled row */
    /* what the SIMD horizontal pass may read from a row's crop start */
    const size_t reach = need_h ? (size_t)C * (s->crop_w + ax->taps) + READ_SLACK : 0;
    pim_hpass_plan_t plan;
    const pim_hpass_plan_t *hplan = need_h && C == 3 && sc->hpass_plan != NULL &&
                                    pim_hpass_plan(ax, sc->hpass_plan, &plan) ? &plan : NULL;

#define SOURCE_ROW(r) (crop + (size_t)(r) * stride)
#define HPASS(r, out)                                                                \
    do {                                                                             \
        const uint8_t *row_ = SOURCE_ROW(r);                                         \
        if ((size_t)(image_end - row_) < reach) {                                    \
            memcpy(sc->srow, row_, (size_t)s->crop_w * C);                           \
            row_ = sc->srow;                                                         \
        }                                                                            \
        hpass(row_, C, ax, hplan, (out));                                            \
    } while (0)

#define FINISH_ROW(y, resampled)                                                     \
    do {                                                                             \
        if (staging != NULL) {                                                       \
            memcpy(staging + (size_t)(y) * len, (resampled), len);                   \
        } else {                                                                     \
            const uint32_t yy = vflip ? oh - 1 - (y) : (y);                          \
            emit((resampled), ow, C, hflip, nhwc, es, lut, dst + yy * pitch.row,     \
                 pitch.plane, sc->converted, sc->wide);                              \
        }                                                                            \
    } while (0)

    if (!need_v) {
        for (uint32_t y = 0; y < oh; y++) {
            const uint8_t *row = SOURCE_ROW(y);
            if (need_h) {
                HPASS(y, sc->hrow);
                row = sc->hrow;
            }
            FINISH_ROW(y, row);
        }
        return;
    }

    const pim_range_t *ranges = pim_axis_ranges(ay);
    const int16_t *weights = pim_axis_weights(ay);
    /* the window's rows, and one more: two rows are resampled at a time where they can be */
    const uint32_t ring_rows = ay->taps + 1;
#define RING_ROW(r) (sc->ring + (size_t)((r) % ring_rows) * sc->pitch)
    uint32_t next = 0; /* next crop row to resample horizontally into the ring */
    for (uint32_t y = 0; y < oh; y++) {
        const uint32_t first = ranges[y].first, count = ranges[y].count;
        if (need_h) {
            if (next < first)
                next = first; /* rows no window uses are never resampled */
            for (; next < first + count; next++) {
                if (hplan != NULL && next + 1 < s->crop_h &&
                    (size_t)(image_end - SOURCE_ROW(next + 1)) >= reach) {
                    pim_hpass2_c3_vbmi(SOURCE_ROW(next), SOURCE_ROW(next + 1), hplan,
                                       RING_ROW(next), RING_ROW(next + 1));
                    next++;
                } else {
                    HPASS(next, RING_ROW(next));
                }
            }
            for (uint32_t t = 0; t < count; t++)
                sc->rows[t] = RING_ROW(first + t);
        } else {
            for (uint32_t t = 0; t < count; t++)
                sc->rows[t] = SOURCE_ROW(first + t);
        }
        vpass(sc->rows, weights + (size_t)y * ay->taps, count, ay->precision, sc->acc,
              sc->orow, len);
        FINISH_ROW(y, sc->orow);
    }
#undef RING_ROW
#undef FINISH_ROW
#undef HPASS
#undef SOURCE_ROW
}

/* A finished uint8 image (out_h x out_w x channels, unflipped) into the output slot. */
static void emit_image(const pim_sample_t *s, const uint8_t *image, uint32_t channels,
                       const void *lut, uint8_t *dst, pim_out_pitch_t pitch,
                       const scratch_t *sc)
{
    const uint32_t oh = s->out_h, ow = s->out_w, es = s->out_esize;
    const int hflip = (s->flags & PIM_FLAG_HFLIP) != 0;
    const int vflip = (s->flags & PIM_FLAG_VFLIP) != 0;
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0;
    for (uint32_t y = 0; y < oh; y++) {
        const uint32_t yy = vflip ? oh - 1 - y : y;
        emit(image + (size_t)y * ow * channels, ow, channels, hflip, nhwc, es, lut,
             dst + yy * pitch.row, pitch.plane, sc->converted, sc->wide);
    }
}

static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* An h x w image of `channels` flipped as `flags` (PIM_FLAG_HFLIP / VFLIP) say. */
static void flip_in_place(uint8_t *image, uint32_t h, uint32_t w, uint32_t channels,
                          uint32_t flags)
{
    const size_t row = (size_t)w * channels;
    for (uint32_t y = 0; (flags & PIM_FLAG_HFLIP) && y < h; y++)
        for (uint32_t a = 0, b = w - 1; a < b; a++, b--)
            swap_bytes(image + y * row + (size_t)a * channels,
                       image + y * row + (size_t)b * channels, channels);
    for (uint32_t a = 0, b = h - 1; (flags & PIM_FLAG_VFLIP) && a < b; a++, b--)
        swap_bytes(image + a * row, image + b * row, row);
}

/* The decoded image of sample s (inside its padded extension when it pads). */
static pim_source_t decoded_image(const pim_sample_t *s, const pim_extra_t *e,
                                  const uint8_t *src)
{
    const int padded = e->pad_mode != PIM_PAD_NONE;
    const pim_source_t image = {src + s->src_offset, padded ? e->image_h : s->src_h,
                                padded ? e->image_w : s->src_w, s->channels, s->src_stride};
    return image;
}

/* The crop box of s into sc->box: through the padding, or a plain copy. */
static void gather_box(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *src,
                       const scratch_t *sc)
{
    pim_extra_t whole;
    if (e->pad_mode == PIM_PAD_NONE) { /* the box lies inside the image: no fill is read */
        whole = *e;
        whole.image_top = whole.image_left = 0;
        whole.image_h = s->src_h;
        whole.image_w = s->src_w;
        whole.pad_mode = PIM_PAD_CONSTANT;
        e = &whole;
    }
    pim_gather_padded(s, e, src + s->src_offset, sc->columns, sc->box);
}

/* The box's rows and columns in the decoded image (pim_box_map_t), -1 for the constant
 * fill: the columns are gather_box's, the rows go after them. */
static pim_box_map_t box_map(const pim_sample_t *s, const pim_extra_t *e,
                             const pim_source_t *image, const scratch_t *sc)
{
    int32_t *rows = sc->columns + s->crop_w;
    for (uint32_t y = 0; y < s->crop_h; y++)
        rows[y] = (int32_t)(e->pad_mode == PIM_PAD_NONE
                                    ? (int64_t)s->crop_top + y
                                    : pim_padded_index((int64_t)s->crop_top + y - e->image_top,
                                                       e->image_h, e->pad_mode));
    const pim_box_map_t map = {rows, sc->columns, s->crop_w, image->w,
                               (size_t)image->h * image->w};
    return map;
}

/* The source colour ops on the gathered box of s: on the pixels that come from the image,
 * not on the constant fill. Returns the box's channel count after them. */
static uint32_t colour_box(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *src,
                           const scratch_t *sc)
{
    const pim_source_t image = decoded_image(s, e, src);
    const int simd = pim_cpu_simd_level();
    float means[PIM_MAX_COLOUR_OPS] = {0}; /* read for the contrast ops only */
    pim_colour_source_means(e, &image, sc->source_row, sc->gray, means, simd);
    const pim_box_map_t map = box_map(s, e, &image, sc);
    const uint32_t C = s->channels, w = s->crop_w;
    if (e->pad_mode != PIM_PAD_CONSTANT) /* every pixel of the box is the image's */
        return pim_colour_source(e, means, &map, 0, sc->box, (size_t)s->crop_h * w, C, simd);
    /* the image's rectangle within the box: rows [y0, y1), columns [x0, x1) */
    const int64_t top = (int64_t)e->image_top - s->crop_top;
    const int64_t left = (int64_t)e->image_left - s->crop_left;
    const int64_t y0 = top > 0 ? top : 0, x0 = left > 0 ? left : 0;
    const int64_t y_end = top + e->image_h, x_end = left + e->image_w;
    const int64_t y1 = y_end < s->crop_h ? y_end : s->crop_h, x1 = x_end < w ? x_end : w;
    for (int64_t y = y0; y < y1 && x0 < x1; y++) {
        const size_t first = (size_t)y * w + (size_t)x0;
        pim_colour_source(e, means, &map, first, sc->box + first * C, (size_t)(x1 - x0), C,
                          simd);
    }
    return C; /* check_colour: no channel change beside constant padding */
}

/* One sample: colour its source and pad (gather its box), resample, colour, convert. */
static void run_one(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *src,
                    const uint8_t *tables, const void *lut, uint8_t *dst,
                    pim_out_pitch_t pitch, const scratch_t *sc)
{
    pim_sample_t view = *s;
    const int source_colour = e != NULL && e->n_source_ops > 0;
    if (source_colour || (e != NULL && e->pad_mode != PIM_PAD_NONE)) {
        gather_box(s, e, src, sc);
        if (source_colour)
            view.channels = (uint8_t)colour_box(s, e, src, sc);
        /* from here on the gathered box is the whole image */
        view.src_offset = 0;
        view.src_h = s->crop_h;
        view.src_w = s->crop_w;
        view.src_stride = s->crop_w * view.channels;
        view.crop_top = view.crop_left = 0;
        src = sc->box;
    }
    if (e == NULL || e->n_ops == e->n_source_ops) {
        run_sample(&view, src, tables, lut, dst, pitch, NULL, sc);
        return;
    }
    run_sample(&view, src, tables, lut, NULL, pitch, sc->image, sc);
    /* the colour ops get the flipped image, as torchvision's do: a value's place in torch's
     * loops, and the order of contrast's sum, are the flipped image's */
    flip_in_place(sc->image, s->out_h, s->out_w, view.channels, s->flags);
    const uint32_t channels =
        pim_colour_apply(e, sc->image, (size_t)s->out_h * s->out_w, view.channels, sc->gray,
                         pim_cpu_simd_level());
    view = *s;
    view.flags &= (uint8_t)~(PIM_FLAG_HFLIP | PIM_FLAG_VFLIP);
    emit_image(&view, sc->image, channels, lut, dst, pitch, sc);
}

static int has_contrast(const pim_extra_t *e, uint32_t first, uint32_t end)
{
    for (uint32_t k = first; k < end; k++)
        if (e->ops[k].kind == PIM_COLOUR_CONTRAST)
            return 1;
    return 0;
}

static size_t larger(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Bytes of the padding and colour scratch buffers the samples need. */
static void extra_scratch(const pim_sample_t *samples, const pim_extra_t *extras, uint32_t n,
                          size_t *box_bytes, size_t *columns, size_t *image_bytes,
                          size_t *row_bytes, size_t *gray_bytes)
{
    *box_bytes = *columns = *image_bytes = *row_bytes = *gray_bytes = 0;
    for (uint32_t i = 0; extras != NULL && i < n; i++) {
        const pim_sample_t *s = &samples[i];
        const pim_extra_t *e = &extras[i];
        if (e->pad_mode != PIM_PAD_NONE || e->n_source_ops > 0) {
            const size_t box = (size_t)s->crop_h * s->crop_w * 3;
            *box_bytes = box > *box_bytes ? box : *box_bytes;
            *columns = larger(*columns, (size_t)s->crop_w + s->crop_h); /* and rows */
        }
        const int padded = e->pad_mode != PIM_PAD_NONE;
        const size_t image_w = padded ? e->image_w : s->src_w;
        const size_t image_h = padded ? e->image_h : s->src_h;
        if (e->n_source_ops > 0)
            *row_bytes = larger(*row_bytes, image_w * 3);
        if (has_contrast(e, 0, e->n_source_ops))
            *gray_bytes = larger(*gray_bytes, image_h * image_w);
        if (e->n_ops > e->n_source_ops)
            *image_bytes = larger(*image_bytes, (size_t)s->out_h * s->out_w * 3);
        if (has_contrast(e, e->n_source_ops, e->n_ops))
            *gray_bytes = larger(*gray_bytes, (size_t)s->out_h * s->out_w);
    }
}

/* The VBMI emitter's tables for this call's lookup table, in *tables; NULL where it does
 * not run (below SIMD level 3, uint8 or 1-channel outputs). */
static const pim_emit_tables_t *wide_tables(const pim_sample_t *samples,
                                            const pim_extra_t *extras, const void *lut,
                                            pim_emit_tables_t *tables)
{
    const uint32_t channels = pim_cpu_out_channels(&samples[0], extras);
    const uint32_t esize = samples[0].out_esize;
    if (g_simd < 3 || lut == NULL || esize == 1 || channels != 3)
        return NULL;
    pim_emit_prepare(lut, channels, esize, tables);
    return tables;
}

int pim_cpu_crop_resize(const pim_sample_t *samples, const pim_extra_t *extras,
                        uint32_t n_samples, const uint8_t *const *srcs,
                        const uint64_t *src_bytes, const uint8_t *tables,
                        uint64_t tables_bytes, const void *lut, uint8_t *dst,
                        uint64_t dst_bytes, const pim_out_pitch_t *pitch, char *err,
                        uint32_t err_len)
{
    if (err != NULL && err_len > 0)
        err[0] = '\0';
    if (n_samples == 0)
        return 0;
    if (samples == NULL || srcs == NULL || tables == NULL || dst == NULL) {
        set_err(err, err_len, "null samples, sources, tables or output");
        return 1;
    }
    pim_cpu_simd_level(); /* detect the SIMD level on first use */
    size_t max_row = 0, max_ring_rows = 0, max_src = 0, max_converted = 0, max_plan = 0;
    for (uint32_t i = 0; i < n_samples; i++) {
        const pim_sample_t *s = &samples[i];
        char msg[256];
        if (!pim_cpu_check_sample(s, extras != NULL ? &extras[i] : NULL, srcs[i], src_bytes, i,
                                  tables, tables_bytes, lut, dst_bytes, pitch, msg,
                                  sizeof msg)) {
            set_err(err, err_len, "sample %u: %s", i, msg);
            return (int)i + 1;
        }
        /* the channels resampled: 3 where source colour ops may turn grey into RGB */
        const uint32_t C = extras != NULL && extras[i].n_source_ops > 0 ? 3u : s->channels;
        const size_t row = (size_t)s->out_w * C;
        if (row > max_row)
            max_row = row;
        const size_t converted = (size_t)s->out_w * 3u * s->out_esize; /* 3: the most channels */
        if (converted > max_converted)
            max_converted = converted;
        if (s->crop_w != s->out_w) {
            const pim_axis_t *ax = (const pim_axis_t *)(const void *)(tables + s->xtab_offset);
            const size_t need = (size_t)C * (s->crop_w + ax->taps) + READ_SLACK;
            if (need > max_src)
                max_src = need;
            const size_t plan = pim_hpass_plan_bytes(ax->n_out, ax->taps);
            if (C == 3 && plan > max_plan)
                max_plan = plan;
        }
        if (s->crop_h != s->out_h) {
            const pim_axis_t *ay = (const pim_axis_t *)(const void *)(tables + s->ytab_offset);
            if (ay->taps + 1 > max_ring_rows)
                max_ring_rows = ay->taps + 1;   /* run_sample's ring */
        }
    }
    scratch_t sc;
    sc.pitch = (max_row + ROW_SLACK + 63) & ~(size_t)63;
    const size_t acc_bytes = sc.pitch * sizeof(int32_t);
    const size_t rows_bytes = (max_ring_rows + 1) * sizeof(const uint8_t *);
    size_t box_bytes, columns, image_bytes, source_row_bytes, gray_bytes;
    extra_scratch(samples, extras, n_samples, &box_bytes, &columns, &image_bytes,
                  &source_row_bytes, &gray_bytes);
    const size_t rows_total =
        acc_bytes + rows_bytes + (3 + max_ring_rows) * sc.pitch + max_src + max_converted;
    const size_t extra_at = (rows_total + 64 + 63) & ~(size_t)63;
    const size_t plan_at = (extra_at + columns * sizeof(int32_t) + box_bytes + image_bytes +
                            source_row_bytes + gray_bytes + 64 + 63) & ~(size_t)63;
    const size_t total = plan_at + max_plan;
    uint8_t *mem = calloc(1, total); /* zeroed: SIMD loops may read (and zero-weight) padding */
    if (mem == NULL) {
        set_err(err, err_len, "out of memory for %zu bytes of scratch rows", total);
        return -1;
    }
    sc.acc = (int32_t *)(void *)mem;
    sc.rows = (const uint8_t **)(void *)(mem + acc_bytes);
    sc.hrow = mem + acc_bytes + rows_bytes;
    sc.orow = sc.hrow + sc.pitch;
    sc.ring = sc.orow + sc.pitch;
    sc.srow = sc.ring + max_ring_rows * sc.pitch;
    sc.converted = sc.srow + sc.pitch + max_src;
    sc.columns = (int32_t *)(void *)(mem + extra_at);
    sc.box = mem + extra_at + columns * sizeof(int32_t);
    sc.image = sc.box + box_bytes;
    sc.source_row = sc.image + image_bytes;
    sc.gray = sc.source_row + source_row_bytes;
    sc.hpass_plan = g_simd >= 3 && max_plan > 0 ? mem + plan_at : NULL;
    pim_emit_tables_t wide;
    sc.wide = wide_tables(samples, extras, lut, &wide);
    for (uint32_t i = 0; i < n_samples; i++) {
        const pim_extra_t *e = extras != NULL ? &extras[i] : NULL;
        run_one(&samples[i], e, srcs[i], tables, lut, dst + samples[i].dst_offset,
                pim_cpu_slot_pitch(&samples[i], e, pitch), &sc);
    }
    stream_fence();
    free(mem);
    return 0;
}

uint32_t pim_check_mul_8x8(void)
{
    uint32_t bad = 0;
    for (int32_t w = INT16_MIN; w <= INT16_MAX; w++)
        for (uint32_t px = 0; px < 256; px++)
            bad += pim_mul_w_px_native((int16_t)w, (uint8_t)px) !=
                   pim_mul_w_px_8x8((int16_t)w, (uint8_t)px);
    return bad;
}
