/* cpu_colour.c: padding and colour steps of the CPU kernel (see pim_extra.h for the maths).
 *
 * Padding gathers the crop box of the padded image into a plain image, which the resampling
 * code then reads as if it had been decoded that way. The colour ops rewrite the resampled
 * uint8 image in place, in float32 exactly as torchvision's functional ops on uint8 tensors,
 * each multiply-add rounded once or twice as torch's loop rounds that value
 * (pim_torch_loops.h): by its place in the tensor torch holds, CHW or HWC.
 * This file is compiled with -ffp-contract=off: every product and sum below is rounded
 * where it is written, and the fused multiply-adds are the explicit fmaf calls.
 */
#include <math.h>
#include <string.h>

#include "pim_cpu_colour.h"
#include "pim_torch_loops.h"
#include "pim_torch_sum.h"

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

/* ---- where torch rounds once ---------------------------------------------------------- */

/* The pixels a colour step gets, as torchvision's op would see them: an image of `pixels`
 * pixels whose values torch holds in CHW (planar) or HWC (channels-last) order, and where
 * in it pixel p of the step lies: pixel first + p, or, with a box map, box pixel first + p
 * (pim_box_map_t). torch rounds each multiply-add once or twice by the value's place in
 * its loop (pim_torch_loops.h). */
typedef struct torch_view {
    const pim_box_map_t *map;
    size_t first, pixels;
    int hwc, fused;
    uint32_t threads;
} torch_view_t;

static inline size_t smaller(size_t a, size_t b)
{
    return a < b ? a : b;
}

static inline size_t image_index(const torch_view_t *v, size_t p)
{
    const size_t b = v->first + p;
    if (v->map == NULL)
        return b;
    return (size_t)v->map->rows[b / v->map->box_w] * v->map->image_w +
           (size_t)v->map->columns[b % v->map->box_w];
}

/* How many of the n pixels from p on follow each other in the image */
static inline size_t consecutive(const torch_view_t *v, size_t p, size_t n)
{
    if (v->map == NULL)
        return n;
    const size_t b = v->first + p, x = b % v->map->box_w;
    const int32_t *columns = v->map->columns;
    size_t k = 1;
    while (k < n && x + k < v->map->box_w && columns[x + k] == columns[x] + (int32_t)k)
        k++;
    return k;
}

/* Which of the `channels` values of pixel p round once in `pass` (a bit each), and *end:
 * the end of the run of pixels from p (up to limit) that round alike, a pixel whose values
 * differ being a run of one. `channels` is 1 for the grayscale loops. */
static unsigned pixel_rounding(const pim_torch_pass_t *pass, const torch_view_t *v,
                               uint32_t channels, size_t p, size_t limit, size_t *end)
{
    const size_t q = image_index(v, p);
    const unsigned all = (1u << channels) - 1;
    unsigned once = 0;
    size_t run, n = limit - p;
    if (channels == 1 || v->hwc) {
        const size_t i = q * channels;
        const int first = pim_torch_rounds_once(pass, i, &run);
        if (run - i >= channels) {
            once = first ? all : 0;
            n = smaller(n, (run - i) / channels);
        } else { /* the run ends inside the pixel: value by value */
            once = (unsigned)first;
            for (uint32_t c = 1; c < channels; c++)
                once |= (unsigned)pim_torch_rounds_once(pass, i + c, &run) << c;
            n = 1;
        }
    } else {
        for (uint32_t c = 0; c < channels; c++) {
            const size_t i = c * v->pixels + q;
            once |= (unsigned)pim_torch_rounds_once(pass, i, &run) << c;
            n = smaller(n, run - i);
        }
        if (once != 0 && once != all)
            n = 1;
    }
    *end = p + consecutive(v, p, n);
    return once;
}

/* r.mul(0.2989).add_(g, ...).add_(b, ...) and the blends, as torch loops over them */
static pim_torch_pass_t gray_pass(const torch_view_t *v)
{
    return pim_torch_pass(PIM_TORCH_ELEMENTWISE, v->fused, v->pixels, v->pixels, v->threads);
}

static pim_torch_pass_t contrast_pass(const torch_view_t *v, uint32_t channels)
{
    const size_t values = v->pixels * channels;
    return pim_torch_pass(PIM_TORCH_BROADCAST, v->fused, values, values, v->threads);
}

/* the gray image broadcast over the channels: rows of a channel plane (CHW), or of one
 * pixel's 3 values (HWC), where the gray value is the one value of the row */
static pim_torch_pass_t saturation_pass(const torch_view_t *v)
{
    if (v->hwc)
        return pim_torch_pass(PIM_TORCH_BROADCAST, v->fused, v->pixels * 3, 3, v->threads);
    return pim_torch_pass(PIM_TORCH_ELEMENTWISE, v->fused, v->pixels * 3, v->pixels,
                          v->threads);
}

/* ---- the steps ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void brightness(uint8_t *image, size_t values, double factor, int simd)
{
    uint8_t table[256];
    const size_t done = simd ? pim_scale_values_avx2(image, values, (float)factor) : 0;
    for (uint32_t v = 0; v < 256; v++)
        table[v] = to_u8((float)v * (float)factor);
    apply_table(image, done, values, table);
}

/* The (floored) grayscale values of `pixels` pixels into `out` (one channel: the values) */
static inline __attribute__((always_inline)) void gray_values(const uint8_t *image, size_t pixels, uint32_t channels,
                        const torch_view_t *v, int simd, uint8_t *out)
{
    if (channels == 1) {
        memcpy(out, image, pixels);
        return;
    }
    const pim_torch_pass_t pass = gray_pass(v);
    for (size_t p = 0, end; p < pixels; p = end) {
        const int fused = pixel_rounding(&pass, v, 1, p, pixels, &end) != 0;
        size_t i = p + (simd ? pim_gray_values_avx2(image + 3 * p, end - p, fused, out + p) : 0);
        for (; i < end; i++)
            out[i] = (uint8_t)gray(image + 3 * i, fused);
    }
}

/* torch.mean of `pixels` grayscale values: torch's float32 sum (pim_torch_sum.h), or the
 * exact one where the host did not say how torch sums, then / pixels in float32 */
static float mean_of(const pim_extra_t *e, const uint8_t *gray_image, size_t pixels)
{
    if (e->sum_lanes == 0) {
        uint64_t sum = 0;
        for (size_t i = 0; i < pixels; i++)
            sum += gray_image[i];
        return (float)sum / (float)pixels;
    }
    return pim_torch_sum_u8(gray_image, pixels, e->sum_threads, e->sum_lanes) / (float)pixels;
}

static inline __attribute__((always_inline)) void contrast(uint8_t *image, size_t pixels, uint32_t channels, double factor,
                     float mean, const torch_view_t *v, int simd)
{
    const blend_t twice = blend_of(factor, 0), once = blend_of(factor, 1);
    uint8_t tables[2][256]; /* [rounded once] */
    for (uint32_t x = 0; x < 256; x++) {
        tables[0][x] = blend((uint8_t)x, mean, twice);
        tables[1][x] = blend((uint8_t)x, mean, once);
    }
    const pim_torch_pass_t pass = contrast_pass(v, channels);
    const unsigned all = (1u << channels) - 1;
    for (size_t p = 0, end; p < pixels; p = end) {
        const unsigned rounding = pixel_rounding(&pass, v, channels, p, pixels, &end);
        uint8_t *values = image + p * channels;
        if (rounding != 0 && rounding != all) { /* one pixel, its values rounded apart */
            for (uint32_t c = 0; c < channels; c++)
                values[c] = tables[(rounding >> c) & 1][values[c]];
            continue;
        }
        const int fused = rounding != 0;
        const size_t n = (end - p) * channels;
        const size_t done =
            simd ? pim_blend_values_avx2(values, n, mean, once.ratio, once.rest, fused) : 0;
        apply_table(values, done, n, tables[fused]);
    }
}

static inline __attribute__((always_inline)) void saturation(uint8_t *image, size_t pixels, uint32_t channels, double factor,
                       const torch_view_t *v, int simd)
{
    if (channels == 1)
        return; /* torchvision leaves one-channel images as they are */
    const blend_t twice = blend_of(factor, 0), once = blend_of(factor, 1);
    const pim_torch_pass_t grays = gray_pass(v), blends = saturation_pass(v);
    for (size_t p = 0, end; p < pixels; p = end) {
        size_t gray_end;
        const int gray_fused = pixel_rounding(&grays, v, 1, p, pixels, &gray_end) != 0;
        const unsigned rounding = pixel_rounding(&blends, v, 3, p, gray_end, &end);
        size_t i = p;
        if (simd && (rounding == 0 || rounding == 7))
            i += pim_saturation_avx2(image + 3 * p, end - p, once.ratio, once.rest, gray_fused,
                                     rounding != 0);
        for (; i < end; i++) {
            uint8_t *px = image + 3 * i;
            const float y = gray(px, gray_fused);
            for (uint32_t c = 0; c < 3; c++)
                px[c] = blend(px[c], y, (rounding >> c) & 1 ? once : twice);
        }
    }
}

/* Returns the new channel count; `image` has room for 3 channels. */
static inline __attribute__((always_inline)) uint32_t grayscale(uint8_t *image, size_t pixels, uint32_t channels, uint32_t out,
                          const torch_view_t *v, int simd)
{
    if (channels == 3) { /* out 1: in place, front to back (pixel i to i <= 3i) */
        const pim_torch_pass_t pass = gray_pass(v);
        for (size_t p = 0, end; p < pixels; p = end) {
            const int fused = pixel_rounding(&pass, v, 1, p, pixels, &end) != 0;
            uint8_t *dst = image + (out == 1 ? p : 3 * p);
            size_t i = p + (simd ? pim_grayscale_avx2(image + 3 * p, dst, end - p, out, fused) : 0);
            for (; i < end; i++) {
                const uint8_t y = (uint8_t)gray(image + 3 * i, fused);
                if (out == 1)
                    image[i] = y;
                else
                    image[3 * i] = image[3 * i + 1] = image[3 * i + 2] = y;
            }
        }
    } else if (out == 3) {
        for (size_t i = pixels; i-- > 0;) { /* back to front: nothing overwritten early */
            uint8_t *px = image + 3 * i;
            px[0] = px[1] = px[2] = image[i];
        }
    }
    return out;
}

/* ---- hue ---------------------------------------------------------------------------- */

static inline float clamp01(float x)
{
    return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}

/* torch.remainder(x, 1.0): fmod, then + 1 where the remainder is negative */
static inline float remainder1(float x)
{
    const float m = fmodf(x, 1.0f);
    return m != 0.0f && m < 0.0f ? m + 1.0f : m;
}

/* torchvision's adjust_hue on one pixel, every step a float32 operation of its tensor code:
 * _rgb_to_hsv (Pillow's formulas), h + shift modulo 1, _hsv_to_rgb, x * 255.999 truncated.
 * v1 (torchvision.transforms' _rgb2hsv/_hsv2rgb) differs in three roundings, marked. */
static inline void hue_pixel(uint8_t *px, float shift, int v1)
{
    const float to_unit = (float)(1.0 / 255.0), sixth = (float)(1.0 / 6.0);
    float x[3];
    for (int c = 0; c < 3; c++)
        x[c] = v1 ? (float)px[c] / 255.0f : (float)px[c] * to_unit;  /* v1: division */
    const float r = x[0], g = x[1], b = x[2];
    const float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    const int grey = maxc == minc;
    const float range = maxc - minc;
    const float s = range / (grey ? 1.0f : maxc);
    const float divisor = grey ? 1.0f : range;
    const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
    const float hr = maxc == r ? bc - gc : 0.0f;
    const float hg = maxc == g && maxc != r ? (rc + 2.0f) - bc : 0.0f;
    const float hb = maxc != g && maxc != r ? (gc + 4.0f) - rc : 0.0f;
    const float h6th = v1 ? ((hr + hg) + hb) / 6.0f : ((hr + hg) + hb) * sixth; /* v1: division */
    const float h = remainder1(fmodf(h6th + 1.0f, 1.0f) + shift);
    const float v = maxc;
    const float sector = floorf(h * 6.0f);
    const float f = h * 6.0f - sector;
    const float p = clamp01((1.0f - s) * v);
    const float q = clamp01((1.0f - s * f) * v);
    const float t = v1 ? clamp01(v * (1.0f - s * (1.0f - f)))   /* v1: its own t */
                       : clamp01((s * f + (1.0f - s)) * v);
    const float rgb[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    const float *out = rgb[(int)sector % 6];
    const float to_byte = (float)255.999;
    for (int c = 0; c < 3; c++)
        px[c] = (uint8_t)(out[c] * to_byte);
}

static inline __attribute__((always_inline)) void hue(uint8_t *image, size_t pixels, uint32_t channels, double factor,
                int v1, int simd)
{
    if (channels == 1)
        return; /* torchvision leaves one-channel images as they are */
    const size_t done = simd ? pim_hue_avx2(image, pixels, (float)factor, v1) : 0;
    for (size_t i = done; i < pixels; i++)
        hue_pixel(image + 3 * i, (float)factor, v1);
}

/* permute_channels: output channel c is input channel order[c] (1 channel: unchanged) */
static void permute(uint8_t *image, size_t pixels, uint32_t channels, const uint8_t order[3])
{
    if (channels == 1)
        return;
    for (size_t i = 0; i < pixels; i++) {
        uint8_t *px = image + 3 * i;
        const uint8_t in[3] = {px[0], px[1], px[2]};
        px[0] = in[order[0]];
        px[1] = in[order[1]];
        px[2] = in[order[2]];
    }
}

/* ---- programs ------------------------------------------------------------------------ */

/* The view of sample e's image of `pixels` pixels, held by torch in HWC order where
 * e->torch_layout has `hwc_bit`, its pixel `first` first (box pixel `first` with a map). */
static torch_view_t view_of(const pim_extra_t *e, const pim_box_map_t *map, size_t first,
                            size_t pixels, unsigned hwc_bit)
{
    const torch_view_t v = {map, first, pixels, (e->torch_layout & hwc_bit) != 0,
                            e->fused_mul_add != 0, e->sum_threads};
    return v;
}

/* ops[0..n-1] in order on `pixels` contiguous pixels (where they lie in torch's image: v);
 * contrast op k blends with means[k],
 * or, when means is NULL, with the mean of `image` itself (a whole image, its grayscale
 * going through `gray_image`, which is not read otherwise). Returns the
 * channel count of the result. Always inlined into the entry points below, so that fmaf
 * becomes one instruction where the CPU has FMA (the arithmetic is the same either way). */
static inline __attribute__((always_inline)) uint32_t
run_ops(const pim_extra_t *e, const pim_colour_op_t *ops, uint32_t n, const float *means,
        uint8_t *gray_image, uint8_t *image, size_t pixels, uint32_t channels, int simd,
        torch_view_t v)
{
    for (uint32_t k = 0; k < n; k++) {
        const pim_colour_op_t *op = &ops[k];
        switch (op->kind) {
        case PIM_COLOUR_BRIGHTNESS:
            brightness(image, pixels * channels, op->factor, simd);
            break;
        case PIM_COLOUR_CONTRAST:
            if (means == NULL)
                gray_values(image, pixels, channels, &v, simd, gray_image);
            contrast(image, pixels, channels, op->factor,
                     means != NULL ? means[k] : mean_of(e, gray_image, pixels), &v, simd);
            break;
        case PIM_COLOUR_SATURATION:
            saturation(image, pixels, channels, op->factor, &v, simd);
            break;
        case PIM_COLOUR_GRAYSCALE: /* torch's result: expanded or repeated, then CHW */
            channels = grayscale(image, pixels, channels, op->channels, &v, simd);
            v.hwc = 0;
            break;
        case PIM_COLOUR_HUE: /* torch's result: stacked planes, CHW */
            hue(image, pixels, channels, op->factor, e->hue_v1, simd);
            v.hwc = v.hwc && channels == 1;
            break;
        case PIM_COLOUR_PERMUTE: /* torch's result: indexed planes, CHW */
            permute(image, pixels, channels, op->order);
            v.hwc = v.hwc && channels == 1;
            break;
        }
    }
    return channels;
}

/* The mean each contrast op of the source program blends with: the mean gray of the whole
 * decoded image after the ops before it, one row at a time through `row` (room for w
 * pixels of 3 channels) into `gray_image` (h * w values). */
static inline __attribute__((always_inline)) void
source_means(const pim_extra_t *e, const pim_source_t *src, uint8_t *row, uint8_t *gray_image,
             float *means, int simd)
{
    const size_t image_pixels = (size_t)src->h * src->w;
    for (uint32_t k = 0; k < e->n_source_ops; k++) {
        if (e->ops[k].kind != PIM_COLOUR_CONTRAST)
            continue;
        for (uint32_t y = 0; y < src->h; y++) {
            const uint8_t *pixels = src->image + (size_t)y * src->stride;
            torch_view_t v = view_of(e, NULL, (size_t)y * src->w, image_pixels,
                                     PIM_TORCH_HWC_SOURCE);
            uint32_t channels = src->channels;
            if (k > 0) {
                memcpy(row, pixels, (size_t)src->w * channels);
                channels = run_ops(e, e->ops, k, means, gray_image, row, src->w, channels,
                                   simd, v);
                pixels = row;
            }
            gray_values(pixels, src->w, channels, &v, simd, gray_image + (size_t)y * src->w);
        }
        means[k] = mean_of(e, gray_image, image_pixels);
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FMA_TARGET __attribute__((target("fma")))
static int cpu_has_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
}
#else
#define FMA_TARGET
static int cpu_has_fma(void)
{
    return 0;
}
#endif

/* Each entry point in two builds: one where fmaf is an instruction (and the AVX2 lanes may
 * run: SIMD level 2 means the CPU has AVX2), one portable. */
static uint32_t resampled_ops(const pim_extra_t *e, uint8_t *image, size_t pixels,
                              uint32_t channels, uint8_t *gray_image, int simd)
{
    return run_ops(e, e->ops + e->n_source_ops, e->n_ops - e->n_source_ops, NULL, gray_image,
                   image, pixels, channels, simd,
                   view_of(e, NULL, 0, pixels, PIM_TORCH_HWC_RESAMPLED));
}

FMA_TARGET static uint32_t resampled_ops_fma(const pim_extra_t *e, uint8_t *image,
                                             size_t pixels, uint32_t channels,
                                             uint8_t *gray_image, int simd)
{
    return resampled_ops(e, image, pixels, channels, gray_image, simd);
}

static uint32_t source_ops(const pim_extra_t *e, const float *means, const pim_box_map_t *map,
                           size_t first, uint8_t *pixels, size_t count, uint32_t channels,
                           int simd)
{
    uint8_t unused; /* the means are given: no grayscale image is taken */
    return run_ops(e, e->ops, e->n_source_ops, means, &unused, pixels, count, channels, simd,
                   view_of(e, map, first, map->image_pixels, PIM_TORCH_HWC_SOURCE));
}

FMA_TARGET static uint32_t source_ops_fma(const pim_extra_t *e, const float *means,
                                          const pim_box_map_t *map, size_t first,
                                          uint8_t *pixels, size_t count, uint32_t channels,
                                          int simd)
{
    return source_ops(e, means, map, first, pixels, count, channels, simd);
}

static void source_means_plain(const pim_extra_t *e, const pim_source_t *src, uint8_t *row,
                               uint8_t *gray_image, float *means, int simd)
{
    source_means(e, src, row, gray_image, means, simd);
}

FMA_TARGET static void source_means_fma(const pim_extra_t *e, const pim_source_t *src,
                                        uint8_t *row, uint8_t *gray_image, float *means,
                                        int simd)
{
    source_means(e, src, row, gray_image, means, simd);
}

static int has_fma(void)
{
    static int known = -1;
    if (known < 0)
        known = cpu_has_fma();
    return known;
}

uint32_t pim_colour_apply(const pim_extra_t *e, uint8_t *image, size_t pixels,
                          uint32_t channels, uint8_t *gray_image, int simd)
{
    if (has_fma())
        return resampled_ops_fma(e, image, pixels, channels, gray_image, simd >= 2);
    return resampled_ops(e, image, pixels, channels, gray_image, 0);
}

void pim_colour_source_means(const pim_extra_t *e, const pim_source_t *src, uint8_t *row,
                             uint8_t *gray_image, float *means, int simd)
{
    if (has_fma())
        source_means_fma(e, src, row, gray_image, means, simd >= 2);
    else
        source_means_plain(e, src, row, gray_image, means, 0);
}

uint32_t pim_colour_source(const pim_extra_t *e, const float *means, const pim_box_map_t *map,
                           size_t first, uint8_t *pixels, size_t count, uint32_t channels,
                           int simd)
{
    if (has_fma())
        return source_ops_fma(e, means, map, first, pixels, count, channels, simd >= 2);
    return source_ops(e, means, map, first, pixels, count, channels, 0);
}
