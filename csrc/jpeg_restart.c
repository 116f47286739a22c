/* jpeg_restart.c: seeking into JPEGs that carry restart markers.
 *
 * A baseline JPEG's entropy-coded data can only be read from its start: to reach a crop,
 * libjpeg must Huffman-decode every MCU before it, and every MCU of each row the crop
 * spans (jpeg_skip_scanlines and jpeg_crop_scanline save the IDCT, not that). Restart
 * markers change this. Every `interval` MCUs the encoder byte-aligns the data, writes a
 * marker RSTn (n = 0..7 in turn) and resets the DC predictions, so each interval decodes
 * on its own. When the interval divides the MCUs of a row, a rectangle of whole intervals
 * is a JPEG of its own: the same headers, with the SOF's height and width set to the
 * rectangle's and the markers renumbered from RST0. Decoding that sub-image gives the
 * same DCT blocks, hence the same pixels, everywhere but where libjpeg's upsampling reads
 * past its edges. pl_seek_box therefore keeps the box one pixel and at least one MCU
 * inside every edge of the sub-image that is not an edge of the image, and the sub-image
 * at least two MCUs wide (libjpeg upsamples narrower components differently). At a DCT
 * scale M/8 the same holds in the scaled image, where an MCU is M/8 as large.
 *
 * pl_jpeg_add_restarts writes such a JPEG losslessly: the coefficients are copied, not
 * re-quantised (jpeg_read_coefficients / jpeg_write_coefficients), so every decoder gives
 * the same pixels as for the original file.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "pim_jpeg.h"
#include "pim_jpeg_restart.h"

/* ---------------------------------------------------------------- layout ---------- */

static unsigned pl_be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* The frame (SOF0/SOF1) segment's payload: MCU geometry. 0 if it is not one we seek in. */
int pl_restart_layout_frame(const uint8_t *p, size_t length, pl_restart_layout *layout)
{
    unsigned components, max_h = 1, max_v = 1, c;

    if (length < 6 || p[0] != 8)
        return 0; /* 8-bit samples only */
    layout->height = (int32_t)pl_be16(p + 1);
    layout->width = (int32_t)pl_be16(p + 3);
    components = p[5];
    if (layout->height == 0 || layout->width == 0 || components == 0 || components > 4 ||
        length < 6 + 3 * (size_t)components)
        return 0;
    for (c = 0; c < components; c++) {
        unsigned h = p[6 + 3 * c + 1] >> 4, v = p[6 + 3 * c + 1] & 15;
        if (h < 1 || h > 4 || v < 1 || v > 4)
            return 0;
        max_h = h > max_h ? h : max_h;
        max_v = v > max_v ? v : max_v;
    }
    layout->components = (int32_t)components;
    /* one component: the scan is not interleaved and an MCU is one 8x8 block */
    layout->mcu_width = components == 1 ? 8 : 8 * (int32_t)max_h;
    layout->mcu_height = components == 1 ? 8 : 8 * (int32_t)max_v;
    layout->mcus_per_row = (layout->width + layout->mcu_width - 1) / layout->mcu_width;
    layout->mcu_rows = (layout->height + layout->mcu_height - 1) / layout->mcu_height;
    return 1;
}

int pl_next_segment(const uint8_t *data, size_t size, size_t *next, pl_segment *segment)
{
    size_t at = *next;

    if (at + 4 > size || data[at] != 0xFF)
        return 0;
    segment->at = at;
    while (at < size && data[at] == 0xFF)
        at++; /* fill bytes */
    if (at + 3 > size)
        return 0;
    segment->marker = data[at];
    segment->length = pl_be16(data + at + 1);
    if (segment->length < 2 || at + 1 + segment->length > size)
        return 0;
    *next = at + 1 + segment->length;
    segment->payload = data + at + 3;
    segment->length -= 2;
    return 1;
}

/* Walks the markers up to the first scan. 1 when the file is a baseline, single-scan JPEG
 * whose restart interval divides its MCU rows. */
static int pl_read_markers(const uint8_t *data, size_t size, pl_restart_layout *layout)
{
    size_t next = 2;
    int have_frame = 0;
    pl_segment seg;

    memset(layout, 0, sizeof(*layout));
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return 0;
    while (pl_next_segment(data, size, &next, &seg)) {
        const unsigned marker = seg.marker;
        if (marker == 0xC0 || marker == 0xC1) {
            if (have_frame || !pl_restart_layout_frame(seg.payload, seg.length, layout))
                return 0;
            layout->frame_size_at = (size_t)(seg.payload + 1 - data); /* height, then width */
            have_frame = 1;
        } else if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                    marker != 0xCC) || marker == 0xDC) {
            return 0; /* progressive, lossless, arithmetic, hierarchical; DNL */
        } else if (marker == 0xDD) {
            if (seg.length != 2)
                return 0;
            layout->interval = (int32_t)pl_be16(seg.payload);
        } else if (marker == 0xDA) {
            if (!have_frame || seg.length < 1 || seg.payload[0] != layout->components)
                return 0; /* the first scan must hold every component */
            layout->scan_at = next;
            return layout->interval > 0 && layout->mcus_per_row % layout->interval == 0;
        }
    }
    return 0;
}

/* Offsets of each interval's first byte, and the end of the last one's (its EOI marker).
 * 0 unless every interval is there, in order, followed by EOI (anything else, e.g. a
 * truncated file, is left to the ordinary decoder and its errors). */
static int pl_find_intervals(const uint8_t *data, size_t size, pl_restart_layout *layout)
{
    const int64_t count = ((int64_t)layout->mcus_per_row * layout->mcu_rows +
                           layout->interval - 1) / layout->interval;
    const uint8_t *p = data + layout->scan_at, *end = data + size;
    int64_t found = 1;

    if (count > (int64_t)(size / 2) + 1)
        return 0; /* each interval but the last ends with a 2-byte marker: not all are here */
    layout->starts = malloc((size_t)(count + 1) * sizeof(size_t));
    if (layout->starts == NULL)
        return 0;
    layout->starts[0] = layout->scan_at;
    while (p < end) {
        const uint8_t *ff = memchr(p, 0xFF, (size_t)(end - p));
        unsigned next;
        if (ff == NULL || ff + 1 >= end)
            return 0;
        next = ff[1];
        if (next == 0x00 || next == 0xFF) { /* stuffed byte; fill byte */
            p = ff + 1 + (next == 0x00);
            continue;
        }
        if (next >= 0xD0 && next <= 0xD7) {
            if (found == count || next != 0xD0 + (unsigned)((found - 1) & 7))
                return 0;
            layout->starts[found++] = (size_t)(ff + 2 - data);
            p = ff + 2;
            continue;
        }
        if (next != 0xD9 || found != count)
            return 0;
        layout->starts[count] = (size_t)(ff + 2 - data); /* just past EOI: see pl_interval_bytes */
        layout->count = count;
        return 1;
    }
    return 0;
}

int pl_restart_layout_read(const uint8_t *data, size_t size, pl_restart_layout *layout)
{
    return pl_read_markers(data, size, layout);
}

int pl_restart_layout_index(const uint8_t *data, size_t size, pl_restart_layout *layout)
{
    if (pl_find_intervals(data, size, layout))
        return 1;
    pl_restart_layout_free(layout);
    return 0;
}

int pl_seek_pays(const pl_restart_layout *layout, const pl_mcu_rect *rect)
{
    const int64_t read_through = (int64_t)rect->row1 * layout->mcus_per_row;
    const int64_t seeking = (int64_t)(rect->row1 - rect->row0) * (rect->col1 - rect->col0);
    return seeking * 10 <= read_through * 9;
}

void pl_restart_layout_free(pl_restart_layout *layout)
{
    free(layout->starts);
    layout->starts = NULL;
}

/* ---------------------------------------------------------------- sub-image ------- */

/* The entropy-coded bytes of interval i, without the marker that ends it (RSTn or EOI). */
static size_t pl_interval_bytes(const pl_restart_layout *layout, int64_t i)
{
    return layout->starts[i + 1] - 2 - layout->starts[i];
}

static int32_t pl_min(int32_t a, int32_t b)
{
    return a < b ? a : b;
}

void pl_seek_box(const pl_restart_layout *layout, int32_t scale_num, int32_t top, int32_t left,
                 int32_t height, int32_t width, pl_mcu_rect *rect)
{
    /* in pixels of the image decoded at scale_num/8: an MCU is an exact number of them */
    const int32_t mw = layout->mcu_width * scale_num / 8, mh = layout->mcu_height * scale_num / 8;
    const int32_t image_h = pl_scaled(layout->height, scale_num);
    const int32_t image_w = pl_scaled(layout->width, scale_num);
    const int32_t k = layout->interval, bottom = top + height, right = left + width;
    /* libjpeg upsamples a component of 2 samples or fewer per row by replication instead of
     * its "fancy" filter: keep more than 2 of each (an MCU holds scale_num of a 2x
     * subsampled component) */
    const int32_t min_mcus = scale_num < 2 ? 3 : 2;

    rect->row0 = top > 0 ? (top - 1) / mh : 0;
    rect->row1 = bottom < image_h ? pl_min(layout->mcu_rows, bottom / mh + 1) : layout->mcu_rows;
    rect->col0 = (left > 0 ? (left - 1) / mw : 0) / k * k;
    rect->col1 = right < image_w ? pl_min(layout->mcus_per_row, (right / mw + k) / k * k)
                                 : layout->mcus_per_row;
    while (rect->col1 - rect->col0 < min_mcus && rect->col1 - rect->col0 < layout->mcus_per_row) {
        if (rect->col1 < layout->mcus_per_row)
            rect->col1 += k;
        else
            rect->col0 -= k;
    }
}

int32_t pl_scaled(int32_t size, int32_t scale_num)
{
    return (int32_t)(((int64_t)size * scale_num + 7) / 8);
}

size_t pl_subimage_size(const pl_restart_layout *layout, const pl_mcu_rect *rect)
{
    const int32_t per_row = layout->mcus_per_row / layout->interval;
    size_t bytes = layout->scan_at; /* headers; each interval's marker, the last one EOI */
    for (int32_t r = rect->row0; r < rect->row1; r++)
        for (int32_t j = rect->col0 / layout->interval; j < rect->col1 / layout->interval; j++)
            bytes += pl_interval_bytes(layout, (int64_t)r * per_row + j) + 2;
    return bytes;
}

/* Writes the sub-image of `rect` (pl_subimage_size bytes) into out. */
void pl_subimage_write(const uint8_t *data, const pl_restart_layout *layout,
                       const pl_mcu_rect *rect, uint8_t *out)
{
    const int32_t k = layout->interval, per_row = layout->mcus_per_row / k;
    const int32_t height = pl_min(layout->height, rect->row1 * layout->mcu_height) -
                           rect->row0 * layout->mcu_height;
    const int32_t width = pl_min(layout->width, rect->col1 * layout->mcu_width) -
                          rect->col0 * layout->mcu_width;
    uint8_t *p = out + layout->scan_at;
    unsigned marker = 0;

    memcpy(out, data, layout->scan_at);
    out[layout->frame_size_at] = (uint8_t)(height >> 8);
    out[layout->frame_size_at + 1] = (uint8_t)height;
    out[layout->frame_size_at + 2] = (uint8_t)(width >> 8);
    out[layout->frame_size_at + 3] = (uint8_t)width;
    for (int32_t r = rect->row0; r < rect->row1; r++)
        for (int32_t j = rect->col0 / k; j < rect->col1 / k; j++) {
            const int64_t i = (int64_t)r * per_row + j;
            const size_t n = pl_interval_bytes(layout, i);
            memcpy(p, data + layout->starts[i], n);
            p += n;
            *p++ = 0xFF;
            *p++ = (uint8_t)(0xD0 + (marker++ & 7));
        }
    p[-1] = 0xD9; /* the last interval ends the image */
}

/* ---------------------------------------------------------------- transcoding ----- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf env;
    char *message;
} pl_transcode_error;

static void pl_transcode_error_exit(j_common_ptr cinfo)
{
    pl_transcode_error *err = (pl_transcode_error *)cinfo->err;
    char text[JMSG_LENGTH_MAX];

    (*cinfo->err->format_message)(cinfo, text);
    snprintf(err->message, PL_JPEG_MSG_LEN, "%s", text);
    longjmp(err->env, 1);
}

static void pl_transcode_silent(j_common_ptr cinfo)
{
    (void)cinfo;
}

/* A corrupt file must not be copied with grey blocks in it: warnings are errors here. */
static void pl_transcode_warning(j_common_ptr cinfo, int level)
{
    if (level < 0)
        pl_transcode_error_exit(cinfo);
}

/* The largest divisor of an MCU row's count that is at most max_interval. (The sampling
 * maxima are not set before compression starts: computed here.) */
static unsigned pl_pick_interval(j_compress_ptr dst, int32_t max_interval)
{
    unsigned mcu = 8, per_row, k;
    int ci;

    if (dst->num_components > 1)
        for (ci = 0; ci < dst->num_components; ci++)
            if (8u * (unsigned)dst->comp_info[ci].h_samp_factor > mcu)
                mcu = 8u * (unsigned)dst->comp_info[ci].h_samp_factor;
    per_row = (dst->image_width + mcu - 1) / mcu;
    for (k = (unsigned)max_interval; k > 1; k--)
        if (per_row % k == 0)
            return k;
    return 1;
}

/* A baseline encoder writes an AC coefficient in at most data_precision + 2 bits and a DC
 * difference in one more, but a decoder reads larger ones without a warning, and libjpeg's
 * Huffman encoder, given one, writes other data (its fast path does not check). Such a file
 * is refused, not copied to other pixels: |AC| must fit the AC bits and |DC| too, so that
 * the difference of two DCs fits the DC bits. */
static int pl_coefficients_fit(j_decompress_ptr src, jvirt_barray_ptr *coefficients)
{
    const JCOEF limit = (JCOEF)((1 << (src->data_precision + 2)) - 1);
    JDIMENSION row, col;
    int ci, k;

    for (ci = 0; ci < src->num_components; ci++) {
        jpeg_component_info *comp = &src->comp_info[ci];
        for (row = 0; row < comp->height_in_blocks; row++) {
            JBLOCKARRAY rows = (*src->mem->access_virt_barray)(
                (j_common_ptr)src, coefficients[ci], row, 1, FALSE);
            for (col = 0; col < comp->width_in_blocks; col++)
                for (k = 0; k < DCTSIZE2; k++)
                    if (rows[0][col][k] > limit || rows[0][col][k] < -limit)
                        return 0;
        }
    }
    return 1;
}

int pl_jpeg_add_restarts(const uint8_t *data, size_t size, int32_t max_interval,
                         int32_t optimize, uint8_t **out, size_t *out_size, char *message)
{
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    pl_transcode_error err;
    unsigned long written = 0;
    unsigned char *buffer = NULL;
    volatile int created = 0;
    jvirt_barray_ptr *coefficients;

    *out = NULL;
    *out_size = 0;
    message[0] = '\0';
    if (max_interval < 1 || max_interval > 65535) {
        snprintf(message, PL_JPEG_MSG_LEN, "interval must be in 1..65535");
        return PL_JPEG_EARG;
    }
    jpeg_std_error(&err.pub);
    err.pub.error_exit = pl_transcode_error_exit;
    err.pub.emit_message = pl_transcode_warning;
    err.pub.output_message = pl_transcode_silent;
    err.message = message;
    src.err = &err.pub;
    dst.err = &err.pub;
    if (setjmp(err.env)) {
        if (created & 2)
            jpeg_destroy_compress(&dst);
        if (created & 1)
            jpeg_destroy_decompress(&src);
        free(buffer);
        return PL_JPEG_EDATA;
    }
    jpeg_create_decompress(&src);
    created |= 1;
    jpeg_mem_src(&src, data, (unsigned long)size);
    jpeg_read_header(&src, TRUE);
    coefficients = jpeg_read_coefficients(&src);
    if (!pl_coefficients_fit(&src, coefficients)) {
        snprintf(message, PL_JPEG_MSG_LEN, "a DCT coefficient is larger than %d-bit "
                 "samples allow (a Huffman encoder cannot write it back)",
                 src.data_precision);
        jpeg_destroy_decompress(&src);
        return PL_JPEG_EDATA;
    }
    jpeg_create_compress(&dst);
    created |= 2;
    jpeg_mem_dest(&dst, &buffer, &written);
    jpeg_copy_critical_parameters(&src, &dst);
    dst.optimize_coding = optimize ? TRUE : FALSE;
    dst.restart_interval = pl_pick_interval(&dst, max_interval);
    jpeg_write_coefficients(&dst, coefficients);
    jpeg_finish_compress(&dst);
    jpeg_finish_decompress(&src);
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    *out = buffer;
    *out_size = written;
    return PL_JPEG_OK;
}

int pl_jpeg_seek_info(const uint8_t *data, size_t size, int32_t *interval, int32_t *mcu_width,
                      int32_t *mcu_height)
{
    pl_restart_layout layout;

    *interval = *mcu_width = *mcu_height = 0;
    if (!pl_restart_layout_read(data, size, &layout) ||
        !pl_restart_layout_index(data, size, &layout))
        return 0;
    *interval = layout.interval;
    *mcu_width = layout.mcu_width;
    *mcu_height = layout.mcu_height;
    pl_restart_layout_free(&layout);
    return 1;
}
