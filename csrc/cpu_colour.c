/* cpu_colour.c: padding and colour steps of the CPU kernel (see pim_extra.h for the maths).
 *
 * Padding gathers the crop box of the padded image into a plain image, which the resampling
 * code then reads as if it had been decoded that way. The colour ops rewrite the resampled
 * uint8 image in place, in float32 exactly as torchvision's functional ops on uint8 tensors.
 * This file is compiled with -ffp-contract=off: every product and sum below is rounded
 * where it is written, and the fused multiply-adds are the explicit fmaf calls.
 */
#include <math.h>
#include <string.h>

#include "pim_cpu_colour.h"

/* ---- padding ------------------------------------------------------------------------ */

int64_t pim_padded_index(int64_t x, int64_t n, uint32_t mode)
{
    if (x >= 0 && x < n)
        return x;
    switch (mode) {
    case PIM_PAD_EDGE:
        return x < 0 ? 0 : n - 1;
    case PIM_PAD_REFLECT:
        return x < 0 ? -x : 2 * (n - 1) - x;
    case PIM_PAD_SYMMETRIC:
        return x < 0 ? -x - 1 : 2 * n - 1 - x;
    default:
        return -1; /* constant: the fill */
    }
}

/* Pixels x0..x1-1 of a box row whose source pixels come through the column map. */
static void gather_columns(const uint8_t *source, const int32_t *columns, uint32_t x0,
                           uint32_t x1, uint32_t C, const uint8_t *fill, uint8_t *dst)
{
    for (uint32_t x = x0; x < x1; x++) {
        const uint8_t *px = columns[x] < 0 ? fill : source + (size_t)columns[x] * C;
        for (uint32_t c = 0; c < C; c++)
            dst[x * C + c] = px[c];
    }
}

void pim_gather_padded(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *image,
                       int32_t *columns, uint8_t *out)
{
    const uint32_t C = s->channels, w = s->crop_w;
    /* box columns [inside_first, inside_end) lie on the image: a plain copy */
    const int64_t shift = (int64_t)s->crop_left - e->image_left;
    const int64_t first = shift < 0 ? -shift : 0;
    const int64_t end = (int64_t)e->image_w - shift < (int64_t)w ? (int64_t)e->image_w - shift : w;
    const uint32_t inside_first = (uint32_t)(first < w ? first : w);
    const uint32_t inside_end = (uint32_t)(end > inside_first ? end : inside_first);
    for (uint32_t x = 0; x < w; x++)
        columns[x] = (int32_t)pim_padded_index(shift + x, e->image_w, e->pad_mode);
    for (uint32_t y = 0; y < s->crop_h; y++) {
        const int64_t row = pim_padded_index((int64_t)s->crop_top + y - e->image_top,
                                             e->image_h, e->pad_mode);
        uint8_t *dst = out + (size_t)y * w * C;
        if (row < 0) { /* a row of constant fill */
            for (uint32_t x = 0; x < w; x++)
                memcpy(dst + (size_t)x * C, e->fill, C);
            continue;
        }
        const uint8_t *source = image + (size_t)row * s->src_stride;
        gather_columns(source, columns, 0, inside_first, C, e->fill, dst);
        if (inside_end > inside_first)
            memcpy(dst + (size_t)inside_first * C, source + (size_t)(shift + inside_first) * C,
                   (size_t)(inside_end - inside_first) * C);
        gather_columns(source, columns, inside_end, w, C, e->fill, dst);
    }
}

/* ---- colour ------------------------------------------------------------------------- */

/* u * k + v, rounded once (torch's add_(u, alpha=k) on FMA CPUs) or twice */
static inline float mul_add(float u, float k, float v, int fused)
{
    return fused ? fmaf(u, k, v) : u * k + v;
}

/* clamp_(0, 255) then .to(torch.uint8), which truncates */
static inline uint8_t to_u8(float x)
{
    if (x < 0.0f)
        x = 0.0f;
    if (x > 255.0f)
        x = 255.0f;
    return (uint8_t)x;
}

/* r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114), floored (the constants are
 * Python floats, rounded to float32) */
static inline float gray(const uint8_t *px, int fused)
{
    const float kr = (float)0.2989, kg = (float)0.587, kb = (float)0.114;
    const float red = (float)px[0] * kr;
    return floorf(mul_add((float)px[2], kb, mul_add((float)px[1], kg, red, fused), fused));
}

/* _blend(x, y, ratio): x.mul(ratio).add_(y, alpha=1 - ratio), clamped and truncated */
typedef struct blend {
    float ratio, rest;
    int fused;
} blend_t;

static inline __attribute__((always_inline)) blend_t blend_of(double factor, int fused)
{
    const blend_t b = {(float)factor, (float)(1.0 - factor), fused};
    return b;
}

static inline uint8_t blend(uint8_t x, float y, blend_t b)
{
    return to_u8(mul_add(y, b.rest, (float)x * b.ratio, b.fused));
}

static inline __attribute__((always_inline)) void apply_table(uint8_t *image, size_t from, size_t values, const uint8_t table[256])
{
    for (size_t i = from; i < values; i++)
        image[i] = table[image[i]];
}

static inline __attribute__((always_inline)) void brightness(uint8_t *image, size_t values, double factor, int simd)
{
    uint8_t table[256];
    const size_t done = simd ? pim_scale_values_avx2(image, values, (float)factor) : 0;
    for (uint32_t v = 0; v < 256; v++)
        table[v] = to_u8((float)v * (float)factor);
    apply_table(image, done, values, table);
}

/* torch.mean of the (floored) grayscale image: an exact sum of integers, then sum / count
 * in float32 (torch's float32 sum is exact too while it stays below 2^24) */
static inline __attribute__((always_inline)) float mean_gray(const uint8_t *image, size_t pixels, uint32_t channels, int fused,
                     int simd)
{
    uint64_t sum = 0;
    size_t i = 0;
    if (simd && channels == 3)
        i = pim_gray_sum_avx2(image, pixels, fused, &sum);
    for (; i < pixels; i++)
        sum += channels == 3 ? (uint64_t)gray(image + 3 * i, fused) : image[i];
    return (float)sum / (float)pixels;
}

static inline __attribute__((always_inline)) void contrast(uint8_t *image, size_t pixels, uint32_t channels, double factor,
                     int fused, int simd)
{
    const float mean = mean_gray(image, pixels, channels, fused, simd);
    const blend_t b = blend_of(factor, fused);
    const size_t done =
        simd ? pim_blend_values_avx2(image, pixels * channels, mean, b.ratio, b.rest, fused) : 0;
    uint8_t table[256];
    for (uint32_t v = 0; v < 256; v++)
        table[v] = blend((uint8_t)v, mean, b);
    apply_table(image, done, pixels * channels, table);
}

static inline __attribute__((always_inline)) void saturation(uint8_t *image, size_t pixels, uint32_t channels, double factor,
                       int fused, int simd)
{
    if (channels == 1)
        return; /* torchvision leaves one-channel images as they are */
    const blend_t b = blend_of(factor, fused);
    size_t i = simd ? pim_saturation_avx2(image, pixels, b.ratio, b.rest, fused) : 0;
    for (; i < pixels; i++) {
        uint8_t *px = image + 3 * i;
        const float y = gray(px, fused);
        px[0] = blend(px[0], y, b);
        px[1] = blend(px[1], y, b);
        px[2] = blend(px[2], y, b);
    }
}

/* Returns the new channel count; `image` has room for 3 channels. */
static inline __attribute__((always_inline)) uint32_t grayscale(uint8_t *image, size_t pixels, uint32_t channels, uint32_t out,
                          int fused, int simd)
{
    const size_t done = simd && channels == 3 ? pim_grayscale_avx2(image, pixels, out, fused) : 0;
    if (channels == 3 && out == 1) {
        for (size_t i = done; i < pixels; i++) /* i <= 3i: in place, front to back */
            image[i] = (uint8_t)gray(image + 3 * i, fused);
    } else if (channels == 3) {
        for (size_t i = done; i < pixels; i++) {
            uint8_t *px = image + 3 * i;
            px[0] = px[1] = px[2] = (uint8_t)gray(px, fused);
        }
    } else if (out == 3) {
        for (size_t i = pixels; i-- > 0;) { /* back to front: nothing overwritten early */
            uint8_t *px = image + 3 * i;
            px[0] = px[1] = px[2] = image[i];
        }
    }
    return out;
}

/* The ops in order; always inlined into the two entry points below, so that fmaf becomes
 * one instruction where the CPU has FMA (the arithmetic is the same either way). */
static inline __attribute__((always_inline)) uint32_t
colour_ops(const pim_extra_t *e, uint8_t *image, size_t pixels, uint32_t channels, int simd)
{
    const int fused = e->fused_mul_add != 0;
    for (uint32_t k = 0; k < e->n_ops; k++) {
        const pim_colour_op_t *op = &e->ops[k];
        switch (op->kind) {
        case PIM_COLOUR_BRIGHTNESS:
            brightness(image, pixels * channels, op->factor, simd);
            break;
        case PIM_COLOUR_CONTRAST:
            contrast(image, pixels, channels, op->factor, fused, simd);
            break;
        case PIM_COLOUR_SATURATION:
            saturation(image, pixels, channels, op->factor, fused, simd);
            break;
        case PIM_COLOUR_GRAYSCALE:
            channels = grayscale(image, pixels, channels, op->channels, fused, simd);
            break;
        }
    }
    return channels;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("fma"))) static uint32_t colour_ops_fma(const pim_extra_t *e,
                                                             uint8_t *image, size_t pixels,
                                                             uint32_t channels, int simd)
{
    return colour_ops(e, image, pixels, channels, simd);
}

static int cpu_has_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
}
#else
#define colour_ops_fma colour_ops
static int cpu_has_fma(void)
{
    return 0;
}
#endif

uint32_t pim_colour_apply(const pim_extra_t *e, uint8_t *image, size_t pixels,
                          uint32_t channels, int simd)
{
    static int has_fma = -1;
    if (has_fma < 0)
        has_fma = cpu_has_fma();
    if (has_fma) /* SIMD level 2: the CPU has AVX2, and the kernel may use it */
        return colour_ops_fma(e, image, pixels, channels, simd >= 2);
    return colour_ops(e, image, pixels, channels, 0);
}
