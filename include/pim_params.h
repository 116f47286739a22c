/* pim_params.h: the per-sample parameters of the fused crop + resize + flip + convert step.
 *
 * One header for every side that touches them: the Python wrapper (through the cffi cdef,
 * which is cut from the marked block below), the CPU kernels in csrc/, the DPU host driver
 * and the DPU kernels. Fixed-width fields only (a DPU is a 32-bit machine), every struct a
 * multiple of 8 bytes with its 64-bit fields 8-byte aligned, so that an array of them can
 * be copied to MRAM as is. Nothing here needs floating point.
 *
 * Memory a step reads and writes, all addressed by byte offsets from a base the caller
 * chooses (host pointers on the CPU, MRAM addresses on a DPU):
 *
 *   source   decoded image, HWC interleaved uint8, channels 1 or 3, `src_stride` bytes
 *            between rows; the crop box lies inside it.
 *   tables   one pim_axis_t table per resampled axis (horizontal: crop_w -> out_w,
 *            vertical: crop_h -> out_h), built on the host; samples with the same
 *            (extent, output size, filter) may share a table.
 *   lut      when out_esize > 1: channels x 256 entries of the output type's bit pattern
 *            (uint16_t for float16/bfloat16, uint32_t for float32), lut[c * 256 + v] being
 *            the converted and normalised value of uint8 level v in channel c.
 *   output   this sample's slot: channels x out_h x out_w elements (NCHW) or
 *            out_h x out_w x channels (NHWC) of out_esize bytes.
 *
 * Axis table layout (all offsets from the table's start, each part 8-byte aligned):
 *
 *   pim_axis_t      header (16 bytes)
 *   pim_range_t     ranges[n_out]          first source index and tap count per output
 *   int16_t         weights[n_out * taps]  Q(precision) weights, zero-padded to `taps`
 *
 * `taps` is a multiple of 4, so that every output's weights start 8-byte aligned; weights
 * past an output's `count` are zero. The windows only move forward: `first` and
 * `first + count` never decrease from one output to the next (a kernel keeps just the last
 * `taps` horizontally resampled rows for the vertical pass). An axis
 * whose n_in equals n_out is not resampled at all (torch skips that pass too): its table is
 * the header alone, with taps == 0, and kernels read nothing else from it.
 *
 * Arithmetic (the same as torch's uint8 antialias path and Pillow's): per output,
 * acc = (1 << (precision - 1)) + sum over taps of weight * pixel, in int32; the result is
 * acc >> precision clamped to 0..255. The horizontal pass runs first and rounds to uint8,
 * then the vertical pass runs on its rows. With precision <= 22 and the filters' weights,
 * |acc| < 2^31 (the host checks every table for it: pim_check_axis, csrc/axis_check.c, run
 * by the CPU kernel and the DPU driver alike). Flips mirror the finished output
 * (torchvision's RandomResizedCrop then Random*Flip), so they only change where a result is
 * written. Crop boxes lie inside the image: padding is not this step's job.
 */
#ifndef PIM_PARAMS_H
#define PIM_PARAMS_H

#include <stdint.h>

/* cffi-cdef-begin (plain declarations only: the Python build feeds this block to ffi.cdef) */
#define PIM_FLAG_HFLIP 1
#define PIM_FLAG_VFLIP 2
#define PIM_FLAG_NHWC 4

#define PIM_INTERP_BILINEAR 2
#define PIM_INTERP_BICUBIC 3

#define PIM_MAX_CHANNELS 3
#define PIM_MIN_PRECISION 1
#define PIM_MAX_PRECISION 22

typedef struct pim_sample {
    uint64_t src_offset;  /* byte offset of pixel (0, 0) of the decoded image */
    uint64_t dst_offset;  /* byte offset of this sample's output slot */
    uint32_t xtab_offset; /* byte offset of the horizontal pim_axis_t table */
    uint32_t ytab_offset; /* byte offset of the vertical pim_axis_t table */
    uint32_t src_h;       /* decoded image height, pixels */
    uint32_t src_w;       /* decoded image width, pixels */
    uint32_t src_stride;  /* bytes between the starts of two image rows (>= src_w * channels) */
    uint32_t crop_top;    /* crop box, inside the image */
    uint32_t crop_left;
    uint32_t crop_h;
    uint32_t crop_w;
    uint32_t out_h;       /* output size */
    uint32_t out_w;
    uint8_t channels;     /* 1 or 3, same in the output */
    uint8_t out_esize;    /* output element bytes: 1 = uint8 (no table), 2 or 4 = via lut */
    uint8_t flags;        /* PIM_FLAG_* */
    uint8_t interp;       /* PIM_INTERP_*: informative, the tables carry the arithmetic */
} pim_sample_t;

typedef struct pim_axis {
    uint32_t n_in;        /* source extent along the axis (the crop's width or height) */
    uint32_t n_out;       /* output extent */
    uint32_t taps;        /* weights stored per output, a multiple of 4 (0: not resampled) */
    uint32_t precision;   /* fractional bits of the int16 weights, 1..22 */
} pim_axis_t;

typedef struct pim_range {
    uint32_t first;       /* first source index (relative to the crop) */
    uint32_t count;       /* number of taps used, <= taps */
} pim_range_t;
/* cffi-cdef-end */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include <stddef.h>
_Static_assert(sizeof(pim_sample_t) == 64, "pim_sample_t must stay 64 bytes");
_Static_assert(sizeof(pim_sample_t) % 8 == 0, "pim_sample_t: MRAM transfers need multiples of 8");
_Static_assert(offsetof(pim_sample_t, src_offset) == 0, "pim_sample_t layout");
_Static_assert(offsetof(pim_sample_t, dst_offset) == 8, "pim_sample_t layout");
_Static_assert(offsetof(pim_sample_t, xtab_offset) == 16, "pim_sample_t layout");
_Static_assert(offsetof(pim_sample_t, crop_top) == 36, "pim_sample_t layout");
_Static_assert(offsetof(pim_sample_t, out_w) == 56, "pim_sample_t layout");
_Static_assert(offsetof(pim_sample_t, channels) == 60, "pim_sample_t layout");
_Static_assert(sizeof(pim_axis_t) == 16, "pim_axis_t must stay 16 bytes");
_Static_assert(sizeof(pim_range_t) == 8, "pim_range_t must stay 8 bytes");
#endif

/* Byte size of an axis table with the given outputs and taps (each part 8-byte aligned). */
#define PIM_AXIS_TABLE_BYTES(n_out, taps) \
    (sizeof(pim_axis_t) + (uint64_t)(n_out) * sizeof(pim_range_t) + \
     (((uint64_t)(n_out) * (uint64_t)(taps) * sizeof(int16_t) + 7u) & ~(uint64_t)7u))

#endif /* PIM_PARAMS_H */
