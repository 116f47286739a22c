/* pim_resample.h: the per-row arithmetic of the fused crop + resize + flip + convert step.
 *
 * Static inline functions over rows held in local memory, included by the CPU kernels
 * (csrc/cpu_kernels.c) and by the DPU kernels, which differ only in how rows move (plain
 * pointers on the host; mram_read/mram_write through WRAM blocks on a DPU). So the two
 * backends agree bit for bit by construction.
 *
 * Integer and fixed-point only: no float or double anywhere, no division, and the only
 * multiply is int16 weight x uint8 pixel (pim_mul_w_px). Define PIM_MUL_8X8 before the
 * include to build that product from two 8x8-bit multiplies (native on DPUs); the result is
 * the same (checked exhaustively by pim_check_mul_8x8 in the CPU module's tests).
 *
 * The arithmetic is that of torch's uint8 antialiased interpolation (the path torchvision v2
 * resize takes on uint8 CPU tensors), itself Pillow's: see pim_params.h.
 *
 * Rows are HWC interleaved: a row of n pixels of C channels is n * C bytes.
 */
#ifndef PIM_RESAMPLE_H
#define PIM_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "pim_params.h"

/* ---- axis tables ------------------------------------------------------------------- */

static inline const pim_range_t *pim_axis_ranges(const pim_axis_t *axis)
{
    return (const pim_range_t *)(const void *)((const uint8_t *)axis + sizeof(pim_axis_t));
}

static inline const int16_t *pim_axis_weights(const pim_axis_t *axis)
{
    return (const int16_t *)(const void *)((const uint8_t *)axis + sizeof(pim_axis_t) +
                                           axis->n_out * sizeof(pim_range_t));
}

/* ---- scalar arithmetic ------------------------------------------------------------- */

/* w * px: int16 x uint8 in int32, exactly. */
static inline int32_t pim_mul_w_px_native(int16_t w, uint8_t px)
{
    return (int32_t)w * (int32_t)px;
}

/* The same product from two 8x8-bit multiplies: w = hi * 256 + lo with hi signed, lo unsigned. */
static inline int32_t pim_mul_w_px_8x8(int16_t w, uint8_t px)
{
    uint16_t uw = (uint16_t)w;
    uint8_t lo = (uint8_t)(uw & 0xffu);
    int8_t hi = (int8_t)(uint8_t)(uw >> 8);
    int32_t hi_px = (int32_t)hi * (int32_t)px; /* fits int16: -128*255 .. 127*255 */
    int32_t lo_px = (int32_t)lo * (int32_t)px; /* fits uint16: 0 .. 255*255 */
    return hi_px * 256 + lo_px;
}

#ifdef PIM_MUL_8X8
#define pim_mul_w_px pim_mul_w_px_8x8
#else
#define pim_mul_w_px pim_mul_w_px_native
#endif

/* Rounding accumulator start: one half in Q(precision). */
static inline int32_t pim_acc_init(uint32_t precision)
{
    return (int32_t)1 << (precision - 1);
}

/* acc >> precision, saturated to 0..255 (torch: srai, then packs/packus). */
static inline uint8_t pim_acc_to_u8(int32_t acc, uint32_t precision)
{
    if (acc < 0)
        return 0;
    acc >>= precision;
    return acc > 255 ? (uint8_t)255 : (uint8_t)acc;
}

/* ---- horizontal pass: one source row -> one row of n_out pixels ------------------- */

/* src: the crop's first pixel in this row; dst: n_out * channels bytes. */
static inline void pim_hpass_row_c1(const uint8_t *src, const pim_axis_t *axis, uint8_t *dst)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    const uint32_t taps = axis->taps, precision = axis->precision;
    const int32_t init = pim_acc_init(precision);
    for (uint32_t j = 0; j < axis->n_out; j++) {
        const uint8_t *s = src + ranges[j].first;
        const int16_t *k = weights + (size_t)j * taps;
        const uint32_t count = ranges[j].count;
        int32_t acc = init;
        for (uint32_t t = 0; t < count; t++)
            acc += pim_mul_w_px(k[t], s[t]);
        dst[j] = pim_acc_to_u8(acc, precision);
    }
}

static inline void pim_hpass_row_c3(const uint8_t *src, const pim_axis_t *axis, uint8_t *dst)
{
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    const uint32_t taps = axis->taps, precision = axis->precision;
    const int32_t init = pim_acc_init(precision);
    for (uint32_t j = 0; j < axis->n_out; j++) {
        const uint8_t *s = src + 3u * ranges[j].first;
        const int16_t *k = weights + (size_t)j * taps;
        const uint32_t count = ranges[j].count;
        int32_t a0 = init, a1 = init, a2 = init;
        for (uint32_t t = 0; t < count; t++) {
            const int16_t w = k[t];
            a0 += pim_mul_w_px(w, s[3 * t + 0]);
            a1 += pim_mul_w_px(w, s[3 * t + 1]);
            a2 += pim_mul_w_px(w, s[3 * t + 2]);
        }
        dst[3 * j + 0] = pim_acc_to_u8(a0, precision);
        dst[3 * j + 1] = pim_acc_to_u8(a1, precision);
        dst[3 * j + 2] = pim_acc_to_u8(a2, precision);
    }
}

static inline void pim_hpass_row(const uint8_t *src, uint32_t channels, const pim_axis_t *axis,
                                 uint8_t *dst)
{
    if (channels == 3)
        pim_hpass_row_c3(src, axis, dst);
    else
        pim_hpass_row_c1(src, axis, dst);
}

/* ---- vertical pass: one output row from `count` horizontally resampled rows --------
 * Accumulate tap by tap into an int32 row (so a DPU can stream the source rows one at a
 * time), then round:  init; mac for t in 0..count-1 with weights[y * taps + t]; finish. */

static inline void pim_vpass_init(int32_t *acc, uint32_t len, uint32_t precision)
{
    const int32_t init = pim_acc_init(precision);
    for (uint32_t i = 0; i < len; i++)
        acc[i] = init;
}

static inline void pim_vpass_mac(int32_t *acc, const uint8_t *row, int16_t w, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        acc[i] += pim_mul_w_px(w, row[i]);
}

static inline void pim_vpass_finish(const int32_t *acc, uint32_t precision, uint8_t *dst,
                                    uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        dst[i] = pim_acc_to_u8(acc[i], precision);
}

/* ---- output: flip, convert (lookup) and lay out one finished row ------------------
 * row: n pixels x channels uint8 (unflipped). dst: where output element (c=0, x=0) of this
 * row goes. NHWC (nhwc != 0): pixel x lands at element (x' * channels + c), x' the flipped
 * index. NCHW: channel c's row starts plane_bytes after channel c-1's; pixel x at element x'.
 * esize 1: the uint8 value itself; 2 / 4: lut16 / lut32[c * 256 + value]. */

static inline void pim_emit_row(const uint8_t *row, uint32_t n, uint32_t channels, int hflip,
                                int nhwc, uint32_t esize, const void *lut, uint8_t *dst,
                                size_t plane_bytes)
{
    for (uint32_t c = 0; c < channels; c++) {
        /* element stride and start of channel c in dst, in elements */
        const uint32_t step = nhwc ? channels : 1u;
        uint8_t *base = nhwc ? dst + (size_t)c * esize : dst + (size_t)c * plane_bytes;
        const uint8_t *s = row + c;
        if (esize == 1) {
            uint8_t *d = base;
            if (hflip)
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)(n - 1 - x) * step] = s[(size_t)x * channels];
            else
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)x * step] = s[(size_t)x * channels];
        } else if (esize == 2) {
            const uint16_t *t = (const uint16_t *)lut + 256u * c;
            uint16_t *d = (uint16_t *)(void *)base;
            if (hflip)
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)(n - 1 - x) * step] = t[s[(size_t)x * channels]];
            else
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)x * step] = t[s[(size_t)x * channels]];
        } else {
            const uint32_t *t = (const uint32_t *)lut + 256u * c;
            uint32_t *d = (uint32_t *)(void *)base;
            if (hflip)
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)(n - 1 - x) * step] = t[s[(size_t)x * channels]];
            else
                for (uint32_t x = 0; x < n; x++)
                    d[(size_t)x * step] = t[s[(size_t)x * channels]];
        }
    }
}

#endif /* PIM_RESAMPLE_H */
