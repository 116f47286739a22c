/* cpu_emit_vbmi.c: the float rows of NCHW outputs, 64 output pixels at a time, for CPUs
 * with AVX-512 VBMI: table lookups as byte permutes instead of one load per value.
 *
 * A channel's table (256 entries of esize bytes) is kept as esize byte planes of 256 bytes,
 * four 64-byte registers each (pim_emit_prepare, once per kernel call). vpermi2b picks 64
 * bytes out of 128 by the values' low 7 bits, so one plane of 64 values is two permutes and
 * a blend on their top bit. Unpacking the planes byte by byte, then word by word, rebuilds
 * the entries; unpacks work within 128-bit lanes, so the permute that splits the 64 source
 * pixels into channels (and flips them) puts the values in the order that makes the unpacked
 * entries come out in output order (`lane_element`).
 */
#include <stddef.h>
#include <stdint.h>

#include "pim_cpu_emit.h"

/* Output element (of the group's 64) whose value lane P of the split vector holds: with
 * 4-byte entries the unpacks leave entries 4L..4L+3 of output vector m in lane L of their
 * m-th result, from lanes 16L + 4m.. of the planes; with 2-byte ones entries 8L..8L+7 of
 * vector m, from lanes 16L + 8m.. */
static int lane_element(uint32_t esize, int lane)
{
    const int group = lane >> 4;
    if (esize == 4)
        return 16 * ((lane >> 2) & 3) + 4 * group + (lane & 3);
    return 32 * ((lane >> 3) & 1) + 8 * group + (lane & 7);
}

void pim_emit_prepare(const void *lut, uint32_t channels, uint32_t esize,
                      pim_emit_tables_t *tables)
{
    const uint8_t *entries = (const uint8_t *)lut;
    tables->channels = channels;
    tables->esize = esize;
    for (uint32_t c = 0; c < channels; c++)
        for (uint32_t p = 0; p < esize; p++)
            for (uint32_t v = 0; v < 256; v++) /* x86 is little-endian: byte p from the bottom */
                tables->planes[c][p][v] = entries[((size_t)c * 256 + v) * esize + p];
    for (int hflip = 0; hflip < 2; hflip++)
        for (int c = 0; c < 3; c++) {
            uint64_t past_128 = 0;
            for (int lane = 0; lane < PIM_EMIT_WIDE; lane++) {
                const int e = lane_element(esize, lane);
                const int at = 3 * (hflip ? PIM_EMIT_WIDE - 1 - e : e) + c;
                tables->split[hflip][c][lane] = (uint8_t)(at & 127);
                past_128 |= (uint64_t)(at >= 128) << lane;
            }
            tables->split_high[hflip][c] = past_128;
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VBMI_INLINE \
    __attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

/* One byte of the entries of 64 values: plane[value] for each lane. */
VBMI_INLINE __m512i lookup_plane(const uint8_t *plane, __m512i values, __mmask64 top)
{
    const __m512i low = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane), values,
                                                 _mm512_loadu_si512(plane + 64));
    const __m512i high = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane + 128), values,
                                                  _mm512_loadu_si512(plane + 192));
    return _mm512_mask_blend_epi8(top, low, high);
}

VBMI_INLINE void store64(uint8_t *dst, __m512i x, int stream)
{
    if (stream)
        _mm512_stream_si512((void *)dst, x);
    else
        _mm512_storeu_si512((void *)dst, x);
}

/* Channel c of the 64 pixels a|b|cc into its 64 output entries at dst. */
VBMI_INLINE void emit_channel(__m512i a, __m512i b, __m512i cc, const pim_emit_tables_t *t,
                              int hflip, int c, uint32_t esize, uint8_t *dst, int stream)
{
    const __m512i split = _mm512_loadu_si512(t->split[hflip][c]);
    __m512i values = _mm512_permutex2var_epi8(a, split, b);
    values = _mm512_mask_permutexvar_epi8(values, t->split_high[hflip][c], split, cc);
    const __mmask64 top = _mm512_movepi8_mask(values);
    const __m512i b0 = lookup_plane(t->planes[c][0], values, top);
    const __m512i b1 = lookup_plane(t->planes[c][1], values, top);
    const __m512i lo01 = _mm512_unpacklo_epi8(b0, b1), hi01 = _mm512_unpackhi_epi8(b0, b1);
    if (esize == 2) {
        store64(dst, lo01, stream);
        store64(dst + 64, hi01, stream);
        return;
    }
    const __m512i b2 = lookup_plane(t->planes[c][2], values, top);
    const __m512i b3 = lookup_plane(t->planes[c][3], values, top);
    const __m512i lo23 = _mm512_unpacklo_epi8(b2, b3), hi23 = _mm512_unpackhi_epi8(b2, b3);
    store64(dst, _mm512_unpacklo_epi16(lo01, lo23), stream);
    store64(dst + 64, _mm512_unpackhi_epi16(lo01, lo23), stream);
    store64(dst + 128, _mm512_unpacklo_epi16(hi01, hi23), stream);
    store64(dst + 192, _mm512_unpackhi_epi16(hi01, hi23), stream);
}

VBMI_INLINE void emit_wide(const uint8_t *row, uint32_t n, uint32_t first, uint32_t groups,
                           int hflip, uint32_t esize, const pim_emit_tables_t *t,
                           uint8_t *dst, size_t plane_bytes, int stream)
{
    for (uint32_t g = 0, o = first; g < groups; g++, o += PIM_EMIT_WIDE) {
        const uint8_t *src = row + 3u * (hflip ? n - PIM_EMIT_WIDE - o : o);
        const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 64);
        const __m512i cc = _mm512_loadu_si512(src + 128);
        uint8_t *out = dst + (size_t)o * esize;
        emit_channel(a, b, cc, t, hflip, 0, esize, out, stream);
        emit_channel(a, b, cc, t, hflip, 1, esize, out + plane_bytes, stream);
        emit_channel(a, b, cc, t, hflip, 2, esize, out + 2 * plane_bytes, stream);
    }
}

VBMI void pim_emit_wide_vbmi(const uint8_t *row, uint32_t n, uint32_t first, uint32_t groups,
                             int hflip, const pim_emit_tables_t *t, uint8_t *dst,
                             size_t plane_bytes, int stream)
{
    if (t->esize == 4)
        emit_wide(row, n, first, groups, hflip, 4, t, dst, plane_bytes, stream);
    else
        emit_wide(row, n, first, groups, hflip, 2, t, dst, plane_bytes, stream);
}

#else /* no x86-64 SIMD: never called (pim_cpu_simd never reaches level 3) */

void pim_emit_wide_vbmi(const uint8_t *row, uint32_t n, uint32_t first, uint32_t groups,
                        int hflip, const pim_emit_tables_t *t, uint8_t *dst,
                        size_t plane_bytes, int stream)
{
    (void)row, (void)n, (void)first, (void)groups, (void)hflip, (void)t, (void)dst;
    (void)plane_bytes, (void)stream;
}
#endif
