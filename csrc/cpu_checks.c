/* cpu_checks.c: what the CPU kernel checks of each sample before it runs any (csrc/
 * cpu_kernels.c calls pim_cpu_check_sample for every sample first): channels, element size,
 * flags, the crop box inside the (padded) image, the source and output extents, the padding
 * and colour ops, the axis tables. A sample that fails names its fault in `err`; nothing is
 * written for any sample of the call. */
#include <stdarg.h>
#include <stdio.h>

#include "pim_axis_check.h"
#include "pim_cpu_checks.h"
#include "pim_error.h"

uint32_t pim_cpu_out_channels(const pim_sample_t *s, const pim_extra_t *e)
{
    return e != NULL ? e->out_channels : s->channels;
}

static int check_padding(const pim_sample_t *s, const pim_extra_t *e, char *err,
                         uint32_t err_len)
{
    if (e->pad_mode > PIM_PAD_SYMMETRIC) {
        set_err(err, err_len, "unknown padding mode %u", e->pad_mode);
        return 0;
    }
    if (e->pad_mode == PIM_PAD_NONE)
        return 1;
    if (e->image_h == 0 || e->image_w == 0 ||
        (uint64_t)e->image_top + e->image_h > s->src_h ||
        (uint64_t)e->image_left + e->image_w > s->src_w) {
        set_err(err, err_len, "a %ux%u image at (%u, %u) does not fit its %ux%u padded image",
                e->image_h, e->image_w, e->image_top, e->image_left, s->src_h, s->src_w);
        return 0;
    }
    /* torch refuses reflect padding >= the extent and symmetric padding beyond it */
    const uint32_t pads[4] = {e->image_top, s->src_h - e->image_top - e->image_h,
                              e->image_left, s->src_w - e->image_left - e->image_w};
    for (int k = 0; k < 4; k++) {
        const uint32_t extent = k < 2 ? e->image_h : e->image_w;
        if ((e->pad_mode == PIM_PAD_REFLECT && pads[k] >= extent) ||
            (e->pad_mode == PIM_PAD_SYMMETRIC && pads[k] > extent)) {
            set_err(err, err_len, "padding %u is too large for an extent of %u in %s mode",
                    pads[k], extent, e->pad_mode == PIM_PAD_REFLECT ? "reflect" : "symmetric");
            return 0;
        }
    }
    return 1;
}

static int check_colour_op(const pim_colour_op_t *op, uint32_t k, char *err, uint32_t err_len)
{
    switch (op->kind) {
    case PIM_COLOUR_BRIGHTNESS:
    case PIM_COLOUR_CONTRAST:
    case PIM_COLOUR_SATURATION:
        if (!(op->factor >= 0.0 && op->factor <= 1e30)) {
            set_err(err, err_len, "colour op %u: factor %g (a finite non-negative number "
                    "expected)", k, op->factor);
            return 0;
        }
        return 1;
    case PIM_COLOUR_HUE:
        if (!(op->factor >= -0.5 && op->factor <= 0.5)) {
            set_err(err, err_len, "colour op %u: hue factor %g (-0.5 to 0.5)", k, op->factor);
            return 0;
        }
        return 1;
    case PIM_COLOUR_GRAYSCALE:
        if (op->channels != 1 && op->channels != 3) {
            set_err(err, err_len, "colour op %u: grayscale to %u channels (1 or 3)", k,
                    op->channels);
            return 0;
        }
        return 1;
    case PIM_COLOUR_PERMUTE: {
        const uint8_t *o = op->order;
        if (o[0] > 2 || o[1] > 2 || o[2] > 2 || o[0] == o[1] || o[0] == o[2] || o[1] == o[2]) {
            set_err(err, err_len, "colour op %u: channel order %u %u %u is not a permutation",
                    k, o[0], o[1], o[2]);
            return 0;
        }
        return 1;
    }
    default:
        set_err(err, err_len, "colour op %u: unknown kind %u", k, op->kind);
        return 0;
    }
}

static int check_colour(const pim_sample_t *s, const pim_extra_t *e, char *err,
                        uint32_t err_len)
{
    if (e->n_ops > PIM_MAX_COLOUR_OPS || e->n_source_ops > e->n_ops) {
        set_err(err, err_len, "%u colour ops, %u of them on the source (at most %u)", e->n_ops,
                e->n_source_ops, PIM_MAX_COLOUR_OPS);
        return 0;
    }
    uint32_t channels = s->channels;
    for (uint32_t k = 0; k < e->n_ops; k++) {
        if (!check_colour_op(&e->ops[k], k, err, err_len))
            return 0;
        if (e->ops[k].kind == PIM_COLOUR_GRAYSCALE)
            channels = e->ops[k].channels;
        if (k + 1 == e->n_source_ops && channels != s->channels &&
            e->pad_mode == PIM_PAD_CONSTANT) {
            set_err(err, err_len, "the source colour ops turn %u channels into %u, and the "
                    "constant padding has %u", s->channels, channels, s->channels);
            return 0;
        }
    }
    if (e->out_channels != channels) {
        set_err(err, err_len, "out_channels %u, the colour ops leave %u", e->out_channels,
                channels);
        return 0;
    }
    return 1;
}

/* Where the rows and planes of sample s's output lie: `given`, or its slot contiguous. */
pim_out_pitch_t pim_cpu_slot_pitch(const pim_sample_t *s, const pim_extra_t *e,
                                   const pim_out_pitch_t *given)
{
    if (given != NULL)
        return *given;
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0;
    pim_out_pitch_t pitch;
    pitch.row = (uint64_t)s->out_w * (nhwc ? pim_cpu_out_channels(s, e) : 1u) * s->out_esize;
    pitch.plane = (uint64_t)s->out_h * pitch.row;
    return pitch;
}

/* Whether rows of `pitch` hold sample s's output rows without overlapping: into *extent,
 * the bytes from the slot's start to the end of its last element. */
static int check_pitch(const pim_sample_t *s, const pim_extra_t *e, pim_out_pitch_t pitch,
                       uint64_t *extent, char *err, uint32_t err_len)
{
    const int nhwc = (s->flags & PIM_FLAG_NHWC) != 0;
    const uint64_t channels = pim_cpu_out_channels(s, e), planes = nhwc ? 1u : channels;
    const uint64_t row_bytes = (uint64_t)s->out_w * (nhwc ? channels : 1u) * s->out_esize;
    if (pitch.row < row_bytes || pitch.row % s->out_esize != 0 ||
        (planes > 1 && (pitch.plane < s->out_h * pitch.row || pitch.plane % s->out_esize != 0))) {
        set_err(err, err_len, "output pitch (row %llu, plane %llu bytes) overlaps or misaligns "
                "%u rows of %llu bytes", (unsigned long long)pitch.row,
                (unsigned long long)pitch.plane, s->out_h, (unsigned long long)row_bytes);
        return 0;
    }
    *extent = (planes - 1) * pitch.plane + (uint64_t)(s->out_h - 1) * pitch.row + row_bytes;
    return 1;
}

int pim_cpu_check_sample(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *src,
                         const uint64_t *src_bytes, uint32_t i, const uint8_t *tables,
                         uint64_t tables_bytes, const void *lut, uint64_t dst_bytes,
                         const pim_out_pitch_t *pitch, char *err, uint32_t err_len)
{
    const int padded = e != NULL && e->pad_mode != PIM_PAD_NONE;
    if (s->channels != 1 && s->channels != 3) {
        set_err(err, err_len, "%u channels (1 or 3 supported)", s->channels);
        return 0;
    }
    if (s->out_esize != 1 && s->out_esize != 2 && s->out_esize != 4) {
        set_err(err, err_len, "output element size %u (1, 2 or 4 supported)", s->out_esize);
        return 0;
    }
    if (s->out_esize > 1 && lut == NULL) {
        set_err(err, err_len, "output element size %u needs a lookup table", s->out_esize);
        return 0;
    }
    if (s->flags & ~(PIM_FLAG_HFLIP | PIM_FLAG_VFLIP | PIM_FLAG_NHWC)) {
        set_err(err, err_len, "unknown flags 0x%x", s->flags);
        return 0;
    }
    if (src == NULL) {
        set_err(err, err_len, "no source image");
        return 0;
    }
    if (s->crop_h == 0 || s->crop_w == 0 || s->out_h == 0 || s->out_w == 0) {
        set_err(err, err_len, "empty crop %ux%u or output %ux%u", s->crop_h, s->crop_w,
                s->out_h, s->out_w);
        return 0;
    }
    if ((uint64_t)s->crop_top + s->crop_h > s->src_h ||
        (uint64_t)s->crop_left + s->crop_w > s->src_w) {
        set_err(err, err_len, "crop box top %u left %u height %u width %u is not inside the "
                "%ux%u %simage", s->crop_top, s->crop_left, s->crop_h, s->crop_w, s->src_h,
                s->src_w, padded ? "padded " : "");
        return 0;
    }
    if (e != NULL && (!check_padding(s, e, err, err_len) || !check_colour(s, e, err, err_len)))
        return 0;
    /* the pixels in memory: the decoded image (inside the padded one, when padded) */
    const uint32_t image_h = padded ? e->image_h : s->src_h;
    const uint32_t image_w = padded ? e->image_w : s->src_w;
    if ((uint64_t)s->src_stride < (uint64_t)image_w * s->channels) {
        set_err(err, err_len, "row stride %u is shorter than a %u-pixel row", s->src_stride,
                image_w);
        return 0;
    }
    if (src_bytes != NULL) {
        const uint64_t end = s->src_offset + (uint64_t)(image_h - 1) * s->src_stride +
                             (uint64_t)image_w * s->channels;
        if (end > src_bytes[i]) {
            set_err(err, err_len, "image (%llu bytes from its base) does not fit its %llu-byte "
                    "source", (unsigned long long)end, (unsigned long long)src_bytes[i]);
            return 0;
        }
    }
    uint64_t out_bytes;
    if (!check_pitch(s, e, pim_cpu_slot_pitch(s, e, pitch), &out_bytes, err, err_len))
        return 0;
    if (s->dst_offset % s->out_esize != 0 || s->dst_offset > dst_bytes ||
        out_bytes > dst_bytes - s->dst_offset) {
        set_err(err, err_len, "output slot at %llu (%llu bytes) is misaligned or outside the "
                "%llu-byte output", (unsigned long long)s->dst_offset,
                (unsigned long long)out_bytes, (unsigned long long)dst_bytes);
        return 0;
    }
    if (!pim_check_axis(tables, tables_bytes, s->xtab_offset, s->crop_w, s->out_w,
                        "horizontal", err, err_len))
        return 0;
    if (!pim_check_axis(tables, tables_bytes, s->ytab_offset, s->crop_h, s->out_h, "vertical",
                        err, err_len))
        return 0;
    return 1;
}
