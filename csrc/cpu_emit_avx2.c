/* cpu_emit_avx2.c: pim_emit_row (pim_resample.h) for 3-channel rows, 8 output pixels at a
 * time, straight into the output slot.
 *
 * Every output element is the one pim_emit_row writes (the uint8 value itself, or the
 * table's bit pattern lut[c * 256 + value]); only the order of the work differs. A group of
 * 8 output pixels comes from 8 source pixels, 24 bytes (taken back to front when the row is
 * flipped), which byte shuffles split into three vectors of 8 table indices: one channel
 * each for NCHW, the group's 24 interleaved elements in order for NHWC. Each vector is
 * looked up and stored where it belongs, with non-temporal stores when the destination is
 * aligned to a vector (then the pixels before the first aligned group go through
 * pim_emit_row, as do the last n % 8 pixels), with plain stores when it can never be (NCHW
 * planes a non-multiple of a vector apart).
 *
 * The lookups are scalar loads: _mm256_i32gather_epi32 measured slower on the AMD EPYC
 * (Zen 4) this was written on (about 55 against 43 us per 224x224 float32 image). Given the
 * VBMI emitter's tables, an NCHW row's middle goes to it (cpu_emit_vbmi.c); for NHWC rows
 * its lookups (a table per lane's channel: three per value) measured slower than these
 * for float32. Without it, float16 NCHW rows stay with pim_emit_row.
 */
#include <stddef.h>
#include <stdint.h>

#include "pim_cpu_emit.h"
#include "pim_resample.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))
#define AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

enum { GROUP = 8 }; /* output pixels per step: 24 elements, three vectors of 8 */

/* ---- the shape of a group: all compile-time constants once inlined ------------------- */

/* Element of the group's 24 (pixel-major, RGB) that lane i of vector v holds. */
static inline int lane_element(int nhwc, int v, int i)
{
    return nhwc ? 8 * v + i : 3 * i + v;
}

static inline int lane_channel(int nhwc, int v, int i)
{
    return lane_element(nhwc, v, i) % 3;
}

/* Which of the group's 24 source bytes lane i of vector v takes. */
static inline int lane_source(int nhwc, int hflip, int v, int i)
{
    const int pixel = lane_element(nhwc, v, i) / 3;
    return 3 * (hflip ? GROUP - 1 - pixel : pixel) + lane_channel(nhwc, v, i);
}

/* Shuffle control byte i: that source byte if it lies in `half` (0: bytes 0-15, 1: 16-23). */
static inline char pick_lane(int nhwc, int hflip, int v, int half, int i)
{
    const int at = lane_source(nhwc, hflip, v, i) - 16 * half;
    return (char)(at >= 0 && at < 16 ? at : -1);
}

AVX2_INLINE __m128i pick(int nhwc, int hflip, int v, int half)
{
#define LANE(i) pick_lane(nhwc, hflip, v, half, i)
    return _mm_setr_epi8(LANE(0), LANE(1), LANE(2), LANE(3), LANE(4), LANE(5), LANE(6),
                         LANE(7), -1, -1, -1, -1, -1, -1, -1, -1);
#undef LANE
}

/* The source bytes of vector v, in its low 8 bytes, from the group's 24 (lo: 0-15, hi: 16-23). */
AVX2_INLINE __m128i vector_bytes(__m128i lo, __m128i hi, int nhwc, int hflip, int v)
{
    return _mm_or_si128(_mm_shuffle_epi8(lo, pick(nhwc, hflip, v, 0)),
                        _mm_shuffle_epi8(hi, pick(nhwc, hflip, v, 1)));
}

/* ---- lookups ----------------------------------------------------------------------- */

#define LOOKUP(table, i) \
    table[256 * lane_channel(nhwc, v, i) + ((bytes >> (8 * (i))) & 255u)]

AVX2_INLINE __m256i lookup32(const uint32_t *lut, __m128i vector, int nhwc, int v)
{
    const uint64_t bytes = (uint64_t)_mm_cvtsi128_si64(vector);
    return _mm256_setr_epi32((int)LOOKUP(lut, 0), (int)LOOKUP(lut, 1), (int)LOOKUP(lut, 2),
                             (int)LOOKUP(lut, 3), (int)LOOKUP(lut, 4), (int)LOOKUP(lut, 5),
                             (int)LOOKUP(lut, 6), (int)LOOKUP(lut, 7));
}

AVX2_INLINE __m128i lookup16(const uint16_t *lut, __m128i vector, int nhwc, int v)
{
    const uint64_t bytes = (uint64_t)_mm_cvtsi128_si64(vector);
    return _mm_setr_epi16((short)LOOKUP(lut, 0), (short)LOOKUP(lut, 1), (short)LOOKUP(lut, 2),
                          (short)LOOKUP(lut, 3), (short)LOOKUP(lut, 4), (short)LOOKUP(lut, 5),
                          (short)LOOKUP(lut, 6), (short)LOOKUP(lut, 7));
}

#undef LOOKUP

/* ---- stores: one vector of 8 elements ----------------------------------------------- */

AVX2_INLINE void store32(uint8_t *dst, __m256i x, int stream)
{
    if (stream)
        _mm256_stream_si256((__m256i *)(void *)dst, x);
    else
        _mm256_storeu_si256((__m256i *)(void *)dst, x);
}

AVX2_INLINE void store16(uint8_t *dst, __m128i x, int stream)
{
    if (stream)
        _mm_stream_si128((__m128i *)(void *)dst, x);
    else
        _mm_storeu_si128((__m128i *)(void *)dst, x);
}

AVX2_INLINE void store8(uint8_t *dst, __m128i x, int stream)
{
    if (stream)
        _mm_stream_si64((long long *)(void *)dst, _mm_cvtsi128_si64(x));
    else
        _mm_storel_epi64((__m128i *)(void *)dst, x);
}

/* ---- rows -------------------------------------------------------------------------- */

AVX2_INLINE void emit_vector(__m128i lo, __m128i hi, int nhwc, int hflip, uint32_t esize,
                             const void *lut, int v, uint8_t *dst, int stream)
{
    const __m128i bytes = vector_bytes(lo, hi, nhwc, hflip, v);
    if (esize == 4)
        store32(dst, lookup32((const uint32_t *)lut, bytes, nhwc, v), stream);
    else if (esize == 2)
        store16(dst, lookup16((const uint16_t *)lut, bytes, nhwc, v), stream);
    else
        store8(dst, bytes, stream);
}

/* The group of output pixels from `src` (8 source pixels); vector v goes to dst + v * step. */
AVX2_INLINE void emit_group(const uint8_t *src, int nhwc, int hflip, uint32_t esize,
                            const void *lut, uint8_t *dst, size_t step, int stream)
{
    const __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)src);
    const __m128i hi = _mm_loadl_epi64((const __m128i *)(const void *)(src + 16));
    emit_vector(lo, hi, nhwc, hflip, esize, lut, 0, dst, stream);
    emit_vector(lo, hi, nhwc, hflip, esize, lut, 1, dst + step, stream);
    emit_vector(lo, hi, nhwc, hflip, esize, lut, 2, dst + 2 * step, stream);
}

/* pim_emit_row for output pixels [first, end) of the row only. */
static void emit_pixels(const uint8_t *row, uint32_t n, uint32_t first, uint32_t end,
                        int nhwc, int hflip, uint32_t esize, const void *lut, uint8_t *dst,
                        size_t plane_bytes)
{
    if (first >= end)
        return;
    const uint32_t source_first = hflip ? n - end : first;
    const size_t pixel_bytes = nhwc ? 3u * esize : esize;
    pim_emit_row(row + 3u * source_first, end - first, 3, hflip, nhwc, esize, lut,
                 dst + first * pixel_bytes, plane_bytes);
}

/* Pixels from dst to the first pixel whose vectors all start on a boundary of `vector`
 * bytes (within `limit` pixels); `limit` when there is none. */
static uint32_t aligned_start(const uint8_t *dst, size_t pixel_bytes, size_t vector,
                              size_t step, uint32_t limit)
{
    if (step % vector != 0)
        return limit;
    for (uint32_t h = 0; h < limit; h++)
        if (((uintptr_t)dst + h * pixel_bytes) % vector == 0)
            return h;
    return limit;
}

/* Output pixels [first, end) of the row: groups of 8, streamed when they can be aligned. */
AVX2_INLINE void emit_range(const uint8_t *row, uint32_t n, uint32_t first, uint32_t end,
                            int nhwc, int hflip, uint32_t esize, const void *lut,
                            uint8_t *dst, size_t plane_bytes)
{
    const size_t pixel_bytes = nhwc ? 3u * esize : esize;
    const size_t vector = (size_t)GROUP * esize;
    const size_t step = nhwc ? vector : plane_bytes;
    uint32_t head = aligned_start(dst + first * pixel_bytes, pixel_bytes, vector, step, GROUP);
    const int stream = head < GROUP;
    head = !stream ? 0 : head < end - first ? head : end - first;
    emit_pixels(row, n, first, first + head, nhwc, hflip, esize, lut, dst, plane_bytes);
    uint32_t o = first + head;
    for (; o + GROUP <= end; o += GROUP) {
        const uint8_t *src = row + 3u * (hflip ? n - GROUP - o : o);
        emit_group(src, nhwc, hflip, esize, lut, dst + o * pixel_bytes, step, stream);
    }
    emit_pixels(row, n, o, end, nhwc, hflip, esize, lut, dst, plane_bytes);
}

/* One build of emit_range per layout and flip, for element size `esize`. */
AVX2_INLINE void emit_range_layouts(const uint8_t *row, uint32_t n, uint32_t first,
                                    uint32_t end, int nhwc, int hflip, uint32_t esize,
                                    const void *lut, uint8_t *dst, size_t plane_bytes)
{
    if (nhwc && hflip)
        emit_range(row, n, first, end, 1, 1, esize, lut, dst, plane_bytes);
    else if (nhwc)
        emit_range(row, n, first, end, 1, 0, esize, lut, dst, plane_bytes);
    else if (hflip)
        emit_range(row, n, first, end, 0, 1, esize, lut, dst, plane_bytes);
    else
        emit_range(row, n, first, end, 0, 0, esize, lut, dst, plane_bytes);
}

AVX2 static void emit_range_avx2(const uint8_t *row, uint32_t n, uint32_t first, uint32_t end,
                                 int nhwc, int hflip, uint32_t esize, const void *lut,
                                 uint8_t *dst, size_t plane_bytes)
{
    if (esize == 4)
        emit_range_layouts(row, n, first, end, nhwc, hflip, 4, lut, dst, plane_bytes);
    else if (esize == 2)
        emit_range_layouts(row, n, first, end, nhwc, hflip, 2, lut, dst, plane_bytes);
    else
        emit_range_layouts(row, n, first, end, nhwc, hflip, 1, lut, dst, plane_bytes);
}

/* An NCHW row with the VBMI emitter in the middle: from the first pixel where it can
 * stream (or from 0, storing plainly, when no pixel can), as many groups of 64 as fit. */
static void emit_wide_row(const uint8_t *row, uint32_t n, int hflip, uint32_t esize,
                          const void *lut, const pim_emit_tables_t *wide, uint8_t *dst,
                          size_t plane_bytes)
{
    const uint32_t limit = PIM_EMIT_WIDE / esize;
    uint32_t head = aligned_start(dst, esize, PIM_EMIT_WIDE, plane_bytes, limit);
    const int stream = head < limit;
    head = !stream ? 0 : head < n ? head : n;
    const uint32_t groups = (n - head) / PIM_EMIT_WIDE;
    const uint32_t tail = head + groups * PIM_EMIT_WIDE;
    emit_range_avx2(row, n, 0, head, 0, hflip, esize, lut, dst, plane_bytes);
    pim_emit_wide_vbmi(row, n, head, groups, hflip, wide, dst, plane_bytes, stream);
    emit_range_avx2(row, n, tail, n, 0, hflip, esize, lut, dst, plane_bytes);
}

int pim_emit_row_avx2(const uint8_t *row, uint32_t n, uint32_t channels, int hflip, int nhwc,
                      uint32_t esize, const void *lut, const pim_emit_tables_t *wide,
                      uint8_t *dst, size_t plane_bytes)
{
    if (channels != 3)
        return 0;
    const int use_wide = wide != NULL && !nhwc && wide->esize == esize && wide->channels == 3;
    if (esize == 2 && !nhwc && !use_wide)
        return 0; /* measured no faster than pim_emit_row's loop, at times slower */
    if (use_wide)
        emit_wide_row(row, n, hflip, esize, lut, wide, dst, plane_bytes);
    else
        emit_range_avx2(row, n, 0, n, nhwc, hflip, esize, lut, dst, plane_bytes);
    return 1;
}

#else /* no x86-64 SIMD: pim_emit_row does every row */

int pim_emit_row_avx2(const uint8_t *row, uint32_t n, uint32_t channels, int hflip, int nhwc,
                      uint32_t esize, const void *lut, const pim_emit_tables_t *wide,
                      uint8_t *dst, size_t plane_bytes)
{
    (void)row, (void)n, (void)channels, (void)hflip, (void)nhwc, (void)esize, (void)lut;
    (void)wide, (void)dst, (void)plane_bytes;
    return 0;
}
#endif
