/* cpu_colour_avx2.c: the per-pixel colour steps of cpu_colour.c, 8 pixels at a time.
 *
 * Every lane computes exactly what the scalar code computes for its pixel: the same float32
 * products and sums in the same order, a fused multiply-add (_mm256_fmadd_ps, rounded once,
 * as fmaf) exactly where the scalar code calls fmaf, floor, clamping to [0, 255] and
 * truncation. The file is compiled with -ffp-contract=off, so no other product is fused.
 * Pixels are interleaved RGB: 8 of them (24 bytes) are split into three vectors of 8 and
 * put back together with byte shuffles.
 */
#include <stddef.h>
#include <stdint.h>

#include "pim_cpu_colour.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

typedef struct {
    __m256 r, g, b;
} rgb8_t;

/* 8 pixels (24 bytes) as three vectors of 8 floats */
AVX2 static inline rgb8_t load_rgb8(const uint8_t *px)
{
    const __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)px);
    const __m128i hi = _mm_loadl_epi64((const __m128i *)(const void *)(px + 16));
    const __m128i r = _mm_or_si128(
        _mm_shuffle_epi8(lo, _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
        _mm_shuffle_epi8(hi, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1)));
    const __m128i g = _mm_or_si128(
        _mm_shuffle_epi8(lo, _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
        _mm_shuffle_epi8(hi, _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1)));
    const __m128i b = _mm_or_si128(
        _mm_shuffle_epi8(lo, _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
        _mm_shuffle_epi8(hi, _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1)));
    const rgb8_t out = {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(r)),
                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g)),
                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b))};
    return out;
}

/* to_u8 of 8 floats (clamp to [0, 255], truncate): the bytes in the low 8 of 16 */
AVX2 static inline __m128i to_u8x8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    const __m256i whole = _mm256_cvttps_epi32(x);
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(whole),
                                           _mm256_extracti128_si256(whole, 1));
    return _mm_packus_epi16(words, words);
}

/* 8 pixels back from their channels' bytes (each in the low 8 bytes) */
AVX2 static inline void store_rgb8(uint8_t *px, __m128i r, __m128i g, __m128i b)
{
    const __m128i rg = _mm_unpacklo_epi64(r, g); /* r0..r7 g0..g7 */
    const __m128i first = _mm_or_si128(
        _mm_shuffle_epi8(rg, _mm_setr_epi8(0, 8, -1, 1, 9, -1, 2, 10, -1, 3, 11, -1, 4, 12, -1, 5)),
        _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1)));
    const __m128i rest = _mm_or_si128(
        _mm_shuffle_epi8(rg, _mm_setr_epi8(13, -1, 6, 14, -1, 7, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
        _mm_shuffle_epi8(b, _mm_setr_epi8(-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, -1, -1, -1, -1, -1, -1)));
    _mm_storeu_si128((__m128i *)(void *)px, first);
    _mm_storel_epi64((__m128i *)(void *)(px + 16), rest);
}

/* u * k + v, rounded once or twice (cpu_colour.c's mul_add) */
AVX2 static inline __m256 mul_add8(__m256 u, __m256 k, __m256 v, int fused)
{
    return fused ? _mm256_fmadd_ps(u, k, v) : _mm256_add_ps(_mm256_mul_ps(u, k), v);
}

/* cpu_colour.c's gray: floor(b * 0.114 + (g * 0.587 + r * 0.2989)) */
AVX2 static inline __m256 gray8(rgb8_t px, int fused)
{
    const __m256 red = _mm256_mul_ps(px.r, _mm256_set1_ps((float)0.2989));
    const __m256 green = mul_add8(px.g, _mm256_set1_ps((float)0.587), red, fused);
    return _mm256_floor_ps(mul_add8(px.b, _mm256_set1_ps((float)0.114), green, fused));
}

/* cpu_colour.c's blend: to_u8(y * rest + x * ratio) */
AVX2 static inline __m128i blend8(__m256 x, __m256 y, __m256 ratio, __m256 rest, int fused)
{
    return to_u8x8(mul_add8(y, rest, _mm256_mul_ps(x, ratio), fused));
}

AVX2 size_t pim_gray_values_avx2(const uint8_t *image, size_t pixels, int fused, uint8_t *out)
{
    const size_t done = pixels - pixels % 8;
    for (size_t i = 0; i < done; i += 8)
        _mm_storel_epi64((__m128i *)(void *)(out + i), to_u8x8(gray8(load_rgb8(image + 3 * i), fused)));
    return done;
}

AVX2 size_t pim_saturation_avx2(uint8_t *image, size_t pixels, float ratio, float rest,
                                int gray_fused, int blend_fused)
{
    const size_t done = pixels - pixels % 8;
    const __m256 k = _mm256_set1_ps(ratio), l = _mm256_set1_ps(rest);
    for (size_t i = 0; i < done; i += 8) {
        const rgb8_t px = load_rgb8(image + 3 * i);
        const __m256 y = gray8(px, gray_fused);
        store_rgb8(image + 3 * i, blend8(px.r, y, k, l, blend_fused),
                   blend8(px.g, y, k, l, blend_fused), blend8(px.b, y, k, l, blend_fused));
    }
    return done;
}

/* Each value v through to_u8(v * factor) (brightness), or to_u8(y * rest + v * ratio)
 * (a blend with the constant y: contrast), as the scalar code's tables compute them. Any
 * number of channels: these steps treat every value alike. */
AVX2 size_t pim_scale_values_avx2(uint8_t *values, size_t n, float factor)
{
    const size_t done = n - n % 8;
    const __m256 f = _mm256_set1_ps(factor);
    for (size_t i = 0; i < done; i += 8) {
        const __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)(values + i));
        const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
        _mm_storel_epi64((__m128i *)(void *)(values + i), to_u8x8(_mm256_mul_ps(x, f)));
    }
    return done;
}

AVX2 size_t pim_blend_values_avx2(uint8_t *values, size_t n, float y, float ratio, float rest,
                                  int fused)
{
    const size_t done = n - n % 8;
    const __m256 k = _mm256_set1_ps(ratio), l = _mm256_set1_ps(rest), c = _mm256_set1_ps(y);
    for (size_t i = 0; i < done; i += 8) {
        const __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)(values + i));
        const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
        _mm_storel_epi64((__m128i *)(void *)(values + i), blend8(x, c, k, l, fused));
    }
    return done;
}

/* 3 channels to `out_channels` (1: front to back, as the scalar code) */
AVX2 size_t pim_grayscale_avx2(const uint8_t *src, uint8_t *dst, size_t pixels,
                               uint32_t out_channels, int fused)
{
    const size_t done = pixels - pixels % 8;
    for (size_t i = 0; i < done; i += 8) {
        const __m128i y = to_u8x8(gray8(load_rgb8(src + 3 * i), fused));
        if (out_channels == 1)
            _mm_storel_epi64((__m128i *)(void *)(dst + i), y);
        else
            store_rgb8(dst + 3 * i, y, y, y);
    }
    return done;
}

AVX2 static inline __m256 clamp01_8(__m256 x)
{
    return _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}

/* x - floor(x): the scalar code's fmodf(x, 1) and remainder1(x), exactly, for x in [-1, 2)
 * (x - floor(x) is exact there, and is what both give; at x = -0 it gives +0 where they
 * give -0, which the sector and f below do not tell apart) */
AVX2 static inline __m256 fraction8(__m256 x)
{
    return _mm256_sub_ps(x, _mm256_floor_ps(x));
}

/* a where mask, else b */
AVX2 static inline __m256 pick8(__m256 mask, __m256 a, __m256 b)
{
    return _mm256_blendv_ps(b, a, mask);
}

AVX2 static inline __m256 sector_is(__m256 sector, float k)
{
    return _mm256_cmp_ps(sector, _mm256_set1_ps(k), _CMP_EQ_OQ);
}

/* cpu_colour.c's hue_pixel on 8 pixels */
AVX2 static inline rgb8_t hue8(rgb8_t px, __m256 shift, int v1)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 x[3] = {px.r, px.g, px.b};
    for (int c = 0; c < 3; c++)
        x[c] = v1 ? _mm256_div_ps(x[c], _mm256_set1_ps(255.0f))
                  : _mm256_mul_ps(x[c], _mm256_set1_ps((float)(1.0 / 255.0)));
    const __m256 r = x[0], g = x[1], b = x[2];
    const __m256 maxc = _mm256_max_ps(r, _mm256_max_ps(g, b));
    const __m256 minc = _mm256_min_ps(r, _mm256_min_ps(g, b));
    const __m256 grey = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
    const __m256 range = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(range, pick8(grey, one, maxc));
    const __m256 divisor = pick8(grey, one, range);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, r), divisor);
    const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, g), divisor);
    const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, b), divisor);
    const __m256 r_max = _mm256_cmp_ps(maxc, r, _CMP_EQ_OQ);
    const __m256 g_max = _mm256_cmp_ps(maxc, g, _CMP_EQ_OQ);
    const __m256 hr = _mm256_and_ps(r_max, _mm256_sub_ps(bc, gc));
    const __m256 hg = _mm256_and_ps(_mm256_andnot_ps(r_max, g_max),
                                    _mm256_sub_ps(_mm256_add_ps(rc, _mm256_set1_ps(2.0f)), bc));
    const __m256 hb = _mm256_andnot_ps(_mm256_or_ps(r_max, g_max),
                                       _mm256_sub_ps(_mm256_add_ps(gc, _mm256_set1_ps(4.0f)), rc));
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(hr, hg), hb);
    const __m256 h6th = v1 ? _mm256_div_ps(sum, _mm256_set1_ps(6.0f))
                           : _mm256_mul_ps(sum, _mm256_set1_ps((float)(1.0 / 6.0)));
    const __m256 h = fraction8(_mm256_add_ps(fraction8(_mm256_add_ps(h6th, one)), shift));
    const __m256 v = maxc;
    const __m256 h6 = _mm256_mul_ps(h, _mm256_set1_ps(6.0f));
    __m256 sector = _mm256_floor_ps(h6);
    const __m256 f = _mm256_sub_ps(h6, sector);
    sector = pick8(sector_is(sector, 6.0f), _mm256_setzero_ps(), sector); /* % 6 */
    const __m256 one_minus_s = _mm256_sub_ps(one, s);
    const __m256 p = clamp01_8(_mm256_mul_ps(one_minus_s, v));
    const __m256 q = clamp01_8(_mm256_mul_ps(_mm256_sub_ps(one, _mm256_mul_ps(s, f)), v));
    const __m256 t = v1 ? clamp01_8(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))))
                        : clamp01_8(_mm256_mul_ps(_mm256_add_ps(_mm256_mul_ps(s, f), one_minus_s), v));
    const __m256 s0 = sector_is(sector, 0.0f), s1 = sector_is(sector, 1.0f);
    const __m256 s2 = sector_is(sector, 2.0f), s3 = sector_is(sector, 3.0f);
    const __m256 s4 = sector_is(sector, 4.0f);
    /* sectors 0..5: R = v q p p t v, G = t v v q p p, B = p p t v v q */
    const rgb8_t out = {
        pick8(s1, q, pick8(_mm256_or_ps(s2, s3), p, pick8(s4, t, v))),
        pick8(s0, t, pick8(_mm256_or_ps(s1, s2), v, pick8(s3, q, p))),
        pick8(_mm256_or_ps(s0, s1), p, pick8(s2, t, pick8(_mm256_or_ps(s3, s4), v, q)))};
    return out;
}

AVX2 size_t pim_hue_avx2(uint8_t *image, size_t pixels, float shift, int v1)
{
    const size_t done = pixels - pixels % 8;
    const __m256 by = _mm256_set1_ps(shift), to_byte = _mm256_set1_ps((float)255.999);
    for (size_t i = 0; i < done; i += 8) {
        const rgb8_t rgb = hue8(load_rgb8(image + 3 * i), by, v1);
        store_rgb8(image + 3 * i, to_u8x8(_mm256_mul_ps(rgb.r, to_byte)),
                   to_u8x8(_mm256_mul_ps(rgb.g, to_byte)), to_u8x8(_mm256_mul_ps(rgb.b, to_byte)));
    }
    return done;
}

#else /* no x86 SIMD: the scalar code does every pixel */

size_t pim_hue_avx2(uint8_t *image, size_t pixels, float shift, int v1)
{
    (void)image, (void)pixels, (void)shift, (void)v1;
    return 0;
}

size_t pim_gray_values_avx2(const uint8_t *image, size_t pixels, int fused, uint8_t *out)
{
    (void)image, (void)pixels, (void)fused, (void)out;
    return 0;
}

size_t pim_saturation_avx2(uint8_t *image, size_t pixels, float ratio, float rest,
                           int gray_fused, int blend_fused)
{
    (void)image, (void)pixels, (void)ratio, (void)rest, (void)gray_fused, (void)blend_fused;
    return 0;
}

size_t pim_grayscale_avx2(const uint8_t *src, uint8_t *dst, size_t pixels,
                          uint32_t out_channels, int fused)
{
    (void)src, (void)dst, (void)pixels, (void)out_channels, (void)fused;
    return 0;
}

size_t pim_scale_values_avx2(uint8_t *values, size_t n, float factor)
{
    (void)values, (void)n, (void)factor;
    return 0;
}

size_t pim_blend_values_avx2(uint8_t *values, size_t n, float y, float ratio, float rest,
                             int fused)
{
    (void)values, (void)n, (void)y, (void)ratio, (void)rest, (void)fused;
    return 0;
}
#endif
