/* pim_extra.h: what the CPU kernel does to a sample beyond pim_params.h's crop + resize +
 * flip + convert: padding of the source image before the crop, and colour operations on the
 * resampled image before the conversion. CPU only: the DPU kernels never see these, so
 * pim_sample_t (shared with them) stays as it is and these travel as a separate per-sample
 * array, NULL when no sample needs them.
 *
 * Padding (torchvision's pad): the sample's src_h x src_w and crop box describe the padded
 * image; the decoded image (image_h x image_w, at src_offset with src_stride) sits in it at
 * (image_top, image_left). A pixel outside comes through the mode, per axis:
 *
 *   constant   fill[c]
 *   edge       the nearest pixel of the image                       x < 0 -> 0
 *   reflect    mirrored about the first / last pixel                x < 0 -> -x
 *   symmetric  mirrored about the image's edge (border repeated)    x < 0 -> -x - 1
 *
 * (reflect needs padding < the extent, symmetric padding <= it, as in torch.)
 *
 * Colour (torchvision v2's adjust_brightness / adjust_contrast / adjust_saturation /
 * adjust_hue / rgb_to_grayscale / permute_channels on uint8 images): ops[0..n_ops-1] run in
 * order, each reading the previous one's uint8 result. The first n_source_ops act on the
 * decoded image, before padding and resampling (a colour transform before the geometric
 * ones): they colour the pixels the crop box reads, and contrast takes the mean of the
 * whole decoded image at that point; padding is not coloured. The others act on the whole
 * resampled image, flipped (the kernel flips it before them). Arithmetic in float32, as
 * torch:
 *
 *   gray(r, g, b)  = (b * 0.114 + (g * 0.587 + r * 0.2989))   truncated to an integer
 *   blend(x, y, f) = y * (1 - f) + x * f                        clamped to 0..255, truncated
 *   brightness f   x * f                                        clamped, truncated
 *   contrast f     blend(x, mean of gray over the image, f)      (the mean: torch's float32
 *                                                                 sum, then / pixels)
 *   saturation f   blend(x, gray of the pixel, f)              (1 channel: unchanged)
 *   grayscale n    gray, written to n channels                  (1 channel: copied)
 *   hue f          x * (1/255) to HSV (Pillow's formulas), h + f modulo 1, back to RGB,
 *                  times 255.999, truncated                     (1 channel: unchanged)
 *   permute        output channel c is input channel order[c]
 *
 * where each "u * k + v" is rounded once (a fused multiply-add) when `fused_mul_add` is 1,
 * as torch computes `v.add_(u, alpha=k)` on CPUs with FMA, and as a product and a sum
 * rounded separately when it is 0 (torch without FMA, and torchvision v1's expressions).
 * With 1, torch's loops still round some values twice, by their place in its tensor (the
 * tails of pim_torch_loops.h): `torch_layout` says whether torch holds the image in CHW
 * (planar, as decode_image and most resized crops) or HWC order (channels-last, as
 * pil_to_tensor, and a resize of such an image when the crop spans its full width).
 * The float factors are the Python floats torchvision receives; 1 - f is taken in double,
 * then both are rounded to float, as torch does with Python scalars. `hue_v1` selects
 * torchvision v1's hue expressions (x / 255, h / 6, t = v (1 - s (1 - f))) over v2's
 * (x * (1/255), h * (1/6), t = (s f + (1 - s)) v); cpu_colour.c spells out both.
 */
#ifndef PIM_EXTRA_H
#define PIM_EXTRA_H

#include <stdint.h>

/* cffi-cdef-begin */
#define PIM_PAD_NONE 0
#define PIM_PAD_CONSTANT 1
#define PIM_PAD_EDGE 2
#define PIM_PAD_REFLECT 3
#define PIM_PAD_SYMMETRIC 4

#define PIM_COLOUR_BRIGHTNESS 1
#define PIM_COLOUR_CONTRAST 2
#define PIM_COLOUR_SATURATION 3
#define PIM_COLOUR_GRAYSCALE 4
#define PIM_COLOUR_HUE 5
#define PIM_COLOUR_PERMUTE 6

#define PIM_MAX_COLOUR_OPS 8

#define PIM_TORCH_HWC_SOURCE 1    /* the decoded image the source ops colour */
#define PIM_TORCH_HWC_RESAMPLED 2 /* the resampled image the other ops colour */

typedef struct pim_colour_op {
    double factor;         /* brightness, contrast, saturation or hue factor */
    uint32_t kind;         /* PIM_COLOUR_* */
    uint8_t channels;      /* PIM_COLOUR_GRAYSCALE: channels of its result, 1 or 3 */
    uint8_t order[3];      /* PIM_COLOUR_PERMUTE: output channel c is input channel order[c] */
} pim_colour_op_t;

typedef struct pim_extra {
    uint32_t image_top;    /* padding: where the decoded image sits in the padded one */
    uint32_t image_left;
    uint32_t image_h;      /* the decoded image's size */
    uint32_t image_w;
    uint8_t pad_mode;      /* PIM_PAD_*; PIM_PAD_NONE: the four fields above are unused */
    uint8_t fill[3];       /* PIM_PAD_CONSTANT: the value per channel */
    uint8_t n_ops;         /* colour ops, 0..PIM_MAX_COLOUR_OPS */
    uint8_t fused_mul_add; /* 1: u * k + v rounded once; 0: rounded twice */
    uint8_t out_channels;  /* channels written to the output (after any grayscale op) */
    uint8_t n_source_ops;  /* ops[0..n_source_ops-1] act on the decoded image */
    uint8_t hue_v1;        /* 1: hue in torchvision v1's expressions */
    uint8_t sum_lanes;     /* contrast's mean: torch's float32 sum with vectors of this many
                              floats (pim_torch_sum.h); 0: the exact sum */
    uint8_t torch_layout;  /* PIM_TORCH_HWC_*: the images torch holds channels-last */
    uint8_t reserved;
    uint32_t sum_threads;  /* torch's threads: the chunks of its sum and of its loops */
    pim_colour_op_t ops[PIM_MAX_COLOUR_OPS];
} pim_extra_t;
/* cffi-cdef-end */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(pim_colour_op_t) == 16, "pim_colour_op_t must stay 16 bytes");
_Static_assert(sizeof(pim_extra_t) == 32 + 16 * PIM_MAX_COLOUR_OPS, "pim_extra_t layout");
#endif

#endif /* PIM_EXTRA_H */
