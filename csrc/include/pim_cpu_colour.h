/* pim_cpu_colour.h: the padding and colour steps of the CPU kernel (csrc/cpu_colour.c and its
 * AVX2 lanes, csrc/cpu_colour_avx2.c), called by csrc/cpu_kernels.c (not exported). The
 * dependency runs one way: the colour files call nothing of cpu_kernels.c (the SIMD level
 * they may use is an argument). */
#ifndef PIM_CPU_COLOUR_H
#define PIM_CPU_COLOUR_H

#include <stddef.h>
#include <stdint.h>

#include "pim_extra.h"
#include "pim_params.h"
#include "pim_torch_loops.h"

/* Index into an extent of n for position x of its padded extension (pim_extra.h's modes);
 * -1 where the constant fill applies. */
int64_t pim_padded_index(int64_t x, int64_t n, uint32_t mode);

/* The crop box of sample s (in padded coordinates) gathered from `image` (the decoded image,
 * s->src_stride bytes a row) into `out`, crop_h rows of crop_w * channels bytes. `columns`
 * is scratch for crop_w indices. */
void pim_gather_padded(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *image,
                       int32_t *columns, uint8_t *out);

/* e's colour ops on the resampled image (ops[n_source_ops..n_ops-1]), an image of `pixels`
 * pixels of `channels` (HWC, room for 3 channels); returns the channel count of the result.
 * `gray_image`: scratch for `pixels` values (contrast's grayscale). `simd`: the kernel's
 * SIMD level (pim_cpu_simd, pim_cpu.h); at 2 (AVX2) the lanes of cpu_colour_avx2.c run
 * where the CPU also has FMA. */
uint32_t pim_colour_apply(const pim_extra_t *e, uint8_t *image, size_t pixels,
                          uint32_t channels, uint8_t *gray_image, int simd);

/* A decoded image as the kernel reads it: h rows of w pixels, `stride` bytes apart. */
typedef struct pim_source {
    const uint8_t *image;
    uint32_t h, w, channels;
    size_t stride;
} pim_source_t;

/* For e's source ops (ops[0..n_source_ops-1]): means[k], for each contrast op k among them,
 * the mean gray of the whole source image after ops[0..k-1]. `row`: scratch for w pixels of
 * 3 channels; `gray_image`: scratch for h * w values. */
void pim_colour_source_means(const pim_extra_t *e, const pim_source_t *src, uint8_t *row,
                             uint8_t *gray_image, float *means, int simd);

/* Where a box's pixels lie in the decoded image the source ops colour (torch rounds a value
 * by its place there): box pixel b, in row b / box_w and column b % box_w of the box, is
 * image pixel rows[b / box_w] * image_w + columns[b % box_w]. */
typedef struct pim_box_map {
    const int32_t *rows, *columns;
    uint32_t box_w, image_w;
    size_t image_pixels;
} pim_box_map_t;

/* e's source ops on `count` contiguous pixels of the box (room for 3 channels), box pixels
 * first..first + count - 1 of `map`, contrast op k blending with means[k]; returns the
 * channel count of the result. */
uint32_t pim_colour_source(const pim_extra_t *e, const float *means, const pim_box_map_t *map,
                           size_t first, uint8_t *pixels, size_t count, uint32_t channels,
                           int simd);

/* The per-pixel colour steps, 8 pixels at a time, for CPUs with AVX2 and FMA (callers check
 * both; cpu_colour_avx2.c), with the scalar code's float32 operations, lane by lane. Each
 * does the first pixels - pixels % 8 pixels of a 3-channel image and returns that count
 * (0 where the compiler has no x86 SIMD); the caller does the rest. `fused`: multiply-adds
 * rounded once (fmaf). */
size_t pim_gray_values_avx2(const uint8_t *image, size_t pixels, int fused, uint8_t *out);
size_t pim_saturation_avx2(uint8_t *image, size_t pixels, float ratio, float rest,
                           int gray_fused, int blend_fused);
/* gray of `src`'s pixels into `dst` (out_channels a pixel; dst == src or, for 1, at or
 * before it: written front to back) */
size_t pim_grayscale_avx2(const uint8_t *src, uint8_t *dst, size_t pixels,
                          uint32_t out_channels, int fused);
/* The value-wise steps (any channels): brightness, and the blend with contrast's mean; they
 * do the first n - n % 8 values of `values`. */
size_t pim_scale_values_avx2(uint8_t *values, size_t n, float factor);
size_t pim_blend_values_avx2(uint8_t *values, size_t n, float y, float ratio, float rest,
                             int fused);
/* adjust_hue (cpu_colour.c's hue_pixel) on the first pixels - pixels % 8 pixels. */
size_t pim_hue_avx2(uint8_t *image, size_t pixels, float shift, int v1);

#endif /* PIM_CPU_COLOUR_H */
