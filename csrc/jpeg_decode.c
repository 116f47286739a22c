/* jpeg_decode.c: JPEG decoding for pimloader on the libjpeg API (libjpeg-turbo >= 2.0).
 *
 * What a call does (pl_jpeg_decode):
 *   1. parses the headers from memory (a non-suspending source of our own, see below);
 *   2. picks the output colour space: RGB for YCbCr/RGB data; RGB or grey for greyscale
 *      data; for CMYK/YCCK data libjpeg gives CMYK and we convert to RGB with Pillow's
 *      formula (Adobe "inverted" polarity assumed, as Pillow does);
 *   3. sets the DCT scale (scale_num/8), and for a box narrower than the image calls
 *      jpeg_crop_scanline with one extra column each side and at least two iMCU columns
 *      (see pl_choose_columns: this keeps libjpeg's "fancy" chroma upsampling from
 *      treating the box's edges as image edges, so the pixels equal a full decode's);
 *   4. jpeg_skip_scanlines over the rows above the box, reads the box's rows and stops:
 *      the rows below the box (but for one iMCU row of upsampling context) are never
 *      entropy-decoded (single-scan JPEGs).
 *      Progressive (multi-scan) JPEGs are entropy-decoded whole by jpeg_start_decompress;
 *      cropping and skipping then still save the IDCT, upsampling and colour conversion
 *      of the pixels outside the box.
 *
 * Errors: error_exit longjmps back into the call (libjpeg never calls exit()); warnings
 * that mean pixel data was lost ("premature end of data segment", bad Huffman code, lost
 * restart markers, missing progressive scans) are errors when req->strict.  The source
 * manager answers a read past the end with a fake EOI marker *without* a warning, so a
 * file that lacks only its final EOI marker (all its data present) still decodes in
 * strict mode; a file cut inside its entropy-coded data raises "premature end of data
 * segment".  Because a region-of-interest decode stops early, it cannot see damage below
 * the box; in strict mode a file with no EOI marker after its first scan is therefore
 * always decoded whole, so truncation is found however small the box.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "pim_jpeg.h"
#include "pim_jpeg_huffman.h"
#include "pim_jpeg_restart.h"
#include "pim_jpeg_seek_index.h"

#define PL_ROWS 8 /* scanlines per jpeg_read_scanlines call */

/* ---------------------------------------------------------------- errors ---------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf env;
    int strict;
    int warnings;
    int data_lost;
    char message[PL_JPEG_MSG_LEN];
} pl_error_mgr;

static void pl_set_message(char *dst, const char *src)
{
    snprintf(dst, PL_JPEG_MSG_LEN, "%s", src);
}

static void pl_error_exit(j_common_ptr cinfo)
{
    pl_error_mgr *err = (pl_error_mgr *)cinfo->err;
    char text[JMSG_LENGTH_MAX];

    (*cinfo->err->format_message)(cinfo, text);
    pl_set_message(err->message, text);
    longjmp(err->env, 1);
}

/* Warnings after which some pixels are not the encoded ones. */
static int pl_warning_loses_data(int code)
{
    return code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE || code == JWRN_ARITH_BAD_CODE ||
           code == JWRN_MUST_RESYNC || code == JWRN_JPEG_EOF;
}

static void pl_emit_message(j_common_ptr cinfo, int level)
{
    pl_error_mgr *err = (pl_error_mgr *)cinfo->err;
    int lost;
    char text[JMSG_LENGTH_MAX];

    if (level >= 0)
        return; /* trace output: not wanted */
    lost = pl_warning_loses_data(cinfo->err->msg_code);
    err->pub.num_warnings++;
    err->warnings++;
    if (err->warnings == 1 || (lost && !err->data_lost)) {
        (*cinfo->err->format_message)(cinfo, text);
        pl_set_message(err->message, text);
    }
    if (lost) {
        err->data_lost = 1;
        if (err->strict)
            longjmp(err->env, 1);
    }
}

static void pl_output_message(j_common_ptr cinfo)
{
    (void)cinfo; /* never print */
}

static void pl_init_error(pl_error_mgr *err, int strict)
{
    jpeg_std_error(&err->pub);
    err->pub.error_exit = pl_error_exit;
    err->pub.emit_message = pl_emit_message;
    err->pub.output_message = pl_output_message;
    err->strict = strict;
    err->warnings = 0;
    err->data_lost = 0;
    err->message[0] = '\0';
}

/* ---------------------------------------------------------------- source ---------- */

typedef struct {
    struct jpeg_source_mgr pub;
    int hit_end;
} pl_source_mgr;

static const JOCTET pl_fake_eoi[2] = {0xFF, JPEG_EOI};

static void pl_src_init(j_decompress_ptr cinfo)
{
    (void)cinfo;
}

/* Called only when the data is used up: hand out an EOI marker, as libjpeg's memory
 * source does, but without its warning (the decision is taken from what was lost). */
static boolean pl_src_fill(j_decompress_ptr cinfo)
{
    pl_source_mgr *src = (pl_source_mgr *)cinfo->src;

    src->hit_end = 1;
    src->pub.next_input_byte = pl_fake_eoi;
    src->pub.bytes_in_buffer = 2;
    return TRUE;
}

static void pl_src_skip(j_decompress_ptr cinfo, long num_bytes)
{
    struct jpeg_source_mgr *src = cinfo->src;

    if (num_bytes <= 0)
        return;
    if ((size_t)num_bytes > src->bytes_in_buffer) {
        pl_src_fill(cinfo);
        return;
    }
    src->next_input_byte += num_bytes;
    src->bytes_in_buffer -= (size_t)num_bytes;
}

static void pl_src_term(j_decompress_ptr cinfo)
{
    (void)cinfo;
}

static void pl_set_source(j_decompress_ptr cinfo, pl_source_mgr *src, const uint8_t *data,
                          size_t size)
{
    src->pub.init_source = pl_src_init;
    src->pub.fill_input_buffer = pl_src_fill;
    src->pub.skip_input_data = pl_src_skip;
    src->pub.resync_to_restart = jpeg_resync_to_restart;
    src->pub.term_source = pl_src_term;
    src->pub.next_input_byte = (const JOCTET *)data;
    src->pub.bytes_in_buffer = size;
    src->hit_end = 0;
    cinfo->src = &src->pub;
}

/* An EOI marker in data[from:size], searched from the end (where it normally is; trailing
 * data such as an appended preview is passed over).  `from` is the start of the first
 * scan's entropy-coded data, which cannot contain 0xFF 0xD9 (0xFF is always followed by
 * 0x00 or RSTn there), so an EOI found there means the file was not cut short. */
static int pl_has_eoi(const uint8_t *data, size_t from, size_t size)
{
    size_t i;

    for (i = size; i >= from + 2; i--)
        if (data[i - 2] == 0xFF && data[i - 1] == JPEG_EOI)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- header ---------- */

static void pl_fill_header(j_decompress_ptr cinfo, pl_jpeg_header *hdr)
{
    int ci;

    hdr->height = (int32_t)cinfo->image_height;
    hdr->width = (int32_t)cinfo->image_width;
    hdr->components = cinfo->num_components;
    hdr->colorspace = (int32_t)cinfo->jpeg_color_space;
    hdr->progressive = cinfo->progressive_mode ? 1 : 0;
    hdr->precision = cinfo->data_precision;
    hdr->adobe = cinfo->saw_Adobe_marker ? 1 : 0;
    hdr->max_h_samp = cinfo->max_h_samp_factor;
    hdr->max_v_samp = cinfo->max_v_samp_factor;
    for (ci = 0; ci < 4; ci++) {
        int have = ci < cinfo->num_components;
        hdr->h_samp[ci] = have ? cinfo->comp_info[ci].h_samp_factor : 0;
        hdr->v_samp[ci] = have ? cinfo->comp_info[ci].v_samp_factor : 0;
    }
}

int pl_jpeg_read_header(const uint8_t *data, size_t size, pl_jpeg_header *hdr)
{
    struct jpeg_decompress_struct cinfo;
    pl_error_mgr err;
    pl_source_mgr src;
    volatile int created = 0;

    memset(hdr, 0, sizeof(*hdr));
    pl_init_error(&err, 0);
    cinfo.err = &err.pub;
    src.hit_end = 0;
    if (setjmp(err.env)) {
        if (src.hit_end)
            snprintf(hdr->message, PL_JPEG_MSG_LEN, "Premature end of JPEG file (%s)", err.message);
        else
            pl_set_message(hdr->message, err.message);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        return PL_JPEG_EDATA;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    pl_set_source(&cinfo, &src, data, size);
    jpeg_read_header(&cinfo, TRUE);
    pl_fill_header(&cinfo, hdr);
    jpeg_destroy_decompress(&cinfo);
    return PL_JPEG_OK;
}

/* ---------------------------------------------------------------- decode ---------- */

/* libjpeg-turbo before 3.0 computes a cropped component's downsampled width without its
 * IDCT scaling (fixed upstream in 3a536273, "jpeg_crop_scanline: Fix calc w/sclg +
 * 2x4,4x2 samp").  That matters only where a component is both IDCT-scaled differently
 * from the smallest one and still upsampled, horizontally or vertically (4x2 / 2x4
 * sampling with DCT scaling; tests/test_decode.py has both): there we do not crop
 * columns. */
static int pl_crop_is_unsafe(j_decompress_ptr cinfo)
{
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 3000000
    (void)cinfo;
    return 0;
#else
    int ci;

    for (ci = 0; ci < cinfo->num_components; ci++) {
        jpeg_component_info *comp = &cinfo->comp_info[ci];
        int upsampled = comp->h_samp_factor * comp->DCT_scaled_size !=
                            cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size ||
                        comp->v_samp_factor * comp->DCT_scaled_size !=
                            cinfo->max_v_samp_factor * cinfo->min_DCT_scaled_size;
        if (comp->DCT_scaled_size != cinfo->min_DCT_scaled_size && upsampled)
            return 1;
    }
    return 0;
#endif
}

/* The columns to ask jpeg_crop_scanline for, given the box [x0, x0 + w) of a row of
 * width W.  libjpeg's fancy (smooth) h2v1/h2v2 upsampling treats the edges of a cropped
 * region as image edges, so the region gets one extra column each side of the box
 * (unless the box touches the image edge, where a full decode has the same edge), and at
 * least two iMCU columns, so that no subsampled component is cropped below 2 samples,
 * where jpeg_crop_scanline re-initialises the upsampler with a different (non-fancy)
 * method.  Returns 0 when the whole width is needed anyway. */
static int pl_choose_columns(j_decompress_ptr cinfo, JDIMENSION x0, JDIMENSION w,
                             JDIMENSION *lo_out, JDIMENSION *width_out)
{
    JDIMENSION W = cinfo->output_width, align, lo, hi;

    if (cinfo->comps_in_scan == 1 && cinfo->num_components == 1)
        align = (JDIMENSION)cinfo->min_DCT_scaled_size;
    else
        align = (JDIMENSION)(cinfo->min_DCT_scaled_size * cinfo->max_h_samp_factor);
    if (align == 0)
        return 0;
    lo = x0 > 0 ? x0 - 1 : 0;
    hi = x0 + w < W ? x0 + w + 1 : W;
    lo = lo / align * align;
    if (hi - lo < 2 * align) {
        hi = lo + 2 * align < W ? lo + 2 * align : W;
        if (hi - lo < 2 * align)
            lo = hi > 2 * align ? (hi - 2 * align) / align * align : 0;
    }
    if (lo == 0 && hi == W)
        return 0;
    *lo_out = lo;
    *width_out = hi - lo;
    return 1;
}

/* All coefficients of a progressive JPEG refined to full precision? */
static int pl_progression_complete(j_decompress_ptr cinfo)
{
    int ci, k;

    if (cinfo->coef_bits == NULL)
        return 0;
    for (ci = 0; ci < cinfo->num_components; ci++)
        for (k = 0; k < DCTSIZE2; k++)
            if (cinfo->coef_bits[ci][k] != 0)
                return 0;
    return 1;
}

/* Pillow's CMYK -> RGB (Convert.c cmyk2rgb) on Adobe-inverted samples as libjpeg returns
 * them: with c = 255 - C', nk = 255 - k = K',  R = nk - round(c * nk / 255). */
static void pl_cmyk_row(const JSAMPLE *in, uint8_t *out, JDIMENSION n)
{
    JDIMENSION x;

    for (x = 0; x < n; x++, in += 4, out += 3) {
        int nk = in[3], c;
        for (c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            out[c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        }
    }
}

static int pl_arg_error(pl_jpeg_result *res, const char *text)
{
    pl_set_message(res->message, text);
    return PL_JPEG_EARG;
}

/* The decode proper; pl_jpeg_decode holds the setjmp that libjpeg errors return to. */
static int pl_decode_body(j_decompress_ptr cinfo, pl_error_mgr *err, pl_source_mgr *src,
                          const uint8_t *data, size_t size, const pl_jpeg_request *req,
                          uint8_t *out, int64_t out_row_stride, size_t out_size,
                          pl_jpeg_result *res, const pl_indexed_rows *rows)
{
    int cmyk = 0, roi, direct, out_ch, dec_ch;
    JDIMENSION W, H, x0, y0, w, h, dec_x, dec_w, stop, colofs;
    JSAMPARRAY scratch;
    size_t scan_start;

    pl_set_source(cinfo, src, data, size);
    jpeg_read_header(cinfo, TRUE);
    res->image_height = (int32_t)cinfo->image_height;
    res->image_width = (int32_t)cinfo->image_width;
    /* A decompression bomb (a small file whose header promises a huge image) is refused
     * here, before jpeg_start_decompress allocates row buffers (or, for a progressive
     * file, the whole image's coefficients) and before the caller sizes any buffer. */
    if (req->max_pixels > 0 &&
        (int64_t)cinfo->image_width * (int64_t)cinfo->image_height > req->max_pixels) {
        snprintf(res->message, PL_JPEG_MSG_LEN, "image of %lld pixels (%ux%u) is over the "
                 "limit of %lld", (long long)cinfo->image_width * (long long)cinfo->image_height,
                 (unsigned)cinfo->image_width, (unsigned)cinfo->image_height,
                 (long long)req->max_pixels);
        return PL_JPEG_EBOMB;
    }
    /* the source now points just past the first SOS header */
    scan_start = src->hit_end ? size : (size_t)(src->pub.next_input_byte - data);

    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
        out_ch = req->channels == 3 ? 3 : 1;
        cinfo->out_color_space = out_ch == 3 ? JCS_RGB : JCS_GRAYSCALE;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        out_ch = 3;
        cinfo->out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        out_ch = 3;
        cmyk = 1;
        cinfo->out_color_space = JCS_CMYK;
        break;
    default:
        return pl_arg_error(res, "unsupported JPEG colour space");
    }
    if (req->channels == 1 && out_ch != 1)
        return pl_arg_error(res, "channels=1 needs a greyscale JPEG");
    dec_ch = cmyk ? 4 : out_ch;
    cinfo->scale_num = (unsigned int)req->scale_num;
    cinfo->scale_denom = 8;
    cinfo->dct_method = JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    jpeg_calc_output_dimensions(cinfo);
    W = cinfo->output_width;
    H = cinfo->output_height;
    res->scaled_height = (int32_t)H;
    res->scaled_width = (int32_t)W;

    if (req->height == 0 || req->width == 0) {
        y0 = x0 = 0;
        h = H;
        w = W;
    } else {
        y0 = (JDIMENSION)req->top;
        x0 = (JDIMENSION)req->left;
        h = (JDIMENSION)req->height;
        w = (JDIMENSION)req->width;
        if ((uint64_t)y0 + h > H || (uint64_t)x0 + w > W)
            return pl_arg_error(res, "box outside the (scaled) image");
    }
    if (req->margin) {
        if (out_row_stride != 0)
            return pl_arg_error(res, "margin rows are packed: out_row_stride must be 0");
        if ((uint64_t)h * W * out_ch > out_size)
            return pl_arg_error(res, "output buffer too small for the box's rows");
    } else if (out_row_stride < (int64_t)w * out_ch ||
               (uint64_t)(h - 1) * (uint64_t)out_row_stride + (uint64_t)w * out_ch > out_size)
        return pl_arg_error(res, "output buffer too small for the box");
    res->out_height = (int32_t)h;
    res->out_width = (int32_t)w;
    res->out_channels = out_ch;

    /* In strict mode a file that may be truncated is decoded whole (see the top). */
    roi = req->roi && (!req->strict || (!src->hit_end && pl_has_eoi(data, scan_start, size)));
    res->roi_used = roi;

    jpeg_start_decompress(cinfo); /* multi-scan files: all entropy decoding happens here */
    if (src->hit_end && jpeg_has_multiple_scans(cinfo) &&
        !(cinfo->progressive_mode && pl_progression_complete(cinfo))) {
        /* Scans are missing.  (A sequential multi-scan file cannot tell; assume the worst.) */
        if (!err->data_lost)
            pl_set_message(err->message, "Premature end of JPEG file (scans missing)");
        err->data_lost = 1;
        if (req->strict)
            longjmp(err->env, 1);
    }
    if (rows != NULL && !pl_huffman_install(cinfo, rows)) {
        pl_set_message(err->message, "the seek index's rows do not fit the JPEG's scan");
        longjmp(err->env, 1);
    }

    dec_x = 0;
    dec_w = W;
    if (roi && w < W && !pl_crop_is_unsafe(cinfo) &&
        pl_choose_columns(cinfo, x0, w, &dec_x, &dec_w))
        jpeg_crop_scanline(cinfo, &dec_x, &dec_w);
    res->decoded_left = (int32_t)dec_x;
    res->decoded_width = (int32_t)dec_w;
    colofs = x0 - dec_x;
    if (req->margin) { /* the rows carry every decoded column */
        out_row_stride = (int64_t)dec_w * out_ch;
        colofs = 0;
        x0 = dec_x;
        w = dec_w;
    }

    if (roi && y0 > 0)
        res->rows_skipped = (int32_t)jpeg_skip_scanlines(cinfo, y0);

    scratch = (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                          dec_w * (JDIMENSION)dec_ch, PL_ROWS);
    direct = !cmyk && dec_x == x0 && dec_w == w; /* rows can go straight into out */
    stop = roi ? y0 + h : H;
    while (cinfo->output_scanline < stop) {
        JDIMENSION y = cinfo->output_scanline, want = stop - y, n, i;
        JSAMPROW rows[PL_ROWS];
        int in_box;

        if (want > PL_ROWS)
            want = PL_ROWS;
        if (y < y0 && y + want > y0)
            want = y0 - y; /* never straddle the box's top or bottom edge */
        if (y < y0 + h && y + want > y0 + h)
            want = y0 + h - y;
        in_box = y >= y0 && y < y0 + h;
        for (i = 0; i < want; i++)
            rows[i] = (direct && in_box) ? out + (int64_t)(y - y0 + i) * out_row_stride
                                         : scratch[i];
        n = jpeg_read_scanlines(cinfo, rows, want);
        if (n == 0) {
            pl_set_message(err->message, "decoder produced no scanlines");
            longjmp(err->env, 1);
        }
        res->rows_decoded += (int32_t)n;
        if (in_box && !direct) {
            for (i = 0; i < n; i++) {
                uint8_t *dst = out + (int64_t)(y - y0 + i) * out_row_stride;
                const JSAMPLE *row = scratch[i] + (size_t)colofs * dec_ch;
                if (cmyk)
                    pl_cmyk_row(row, dst, w);
                else
                    memcpy(dst, row, (size_t)w * out_ch);
            }
        }
    }
    res->warnings = err->warnings;
    res->data_lost = err->data_lost;
    res->hit_end = src->hit_end;
    pl_set_message(res->message, err->message);
    /* Stopping early is fine: destroying the decompressor releases everything. */
    return PL_JPEG_OK;
}

static int pl_decode(const uint8_t *data, size_t size, const pl_jpeg_request *req, uint8_t *out,
                     int64_t out_row_stride, size_t out_size, pl_jpeg_result *res,
                     const pl_indexed_rows *rows);

/* The decode of a sub-image of `rect` (a JPEG of its own, `image`; its scan read in place
 * from `rows` when not NULL), with the box moved into it; the results in the whole image's
 * terms. */
static int pl_decode_subimage(const uint8_t *image, size_t bytes, const pl_restart_layout *layout,
                              const pl_mcu_rect *rect, const pl_jpeg_request *req, uint8_t *out,
                              int64_t out_row_stride, size_t out_size, pl_jpeg_result *res,
                              const pl_indexed_rows *rows)
{
    pl_jpeg_request sub = *req;
    const int32_t scale = req->scale_num;
    int status;

    sub.seek = 0;
    sub.seek_index = NULL;
    sub.seek_index_size = 0;
    sub.top -= rect->row0 * layout->mcu_height * scale / 8;
    sub.left -= rect->col0 * layout->mcu_width * scale / 8;
    status = pl_decode(image, bytes, &sub, out, out_row_stride, out_size, res, rows);
    res->seek_used = 1;
    res->decoded_left += rect->col0 * layout->mcu_width * scale / 8;
    res->scaled_height = pl_scaled(layout->height, scale);
    res->scaled_width = pl_scaled(layout->width, scale);
    res->image_height = layout->height;
    res->image_width = layout->width;
    return status;
}

/* A box of a JPEG with restart markers: decodes the sub-image of the restart intervals
 * around it (jpeg_restart.c), with the box moved into it (at any DCT scale). -1 when the
 * file or the box does not allow it, or it would not pay (a box outside the image, a box that needs
 * nearly every interval a plain region-of-interest decode reads): the caller then
 * decodes as usual, with its usual errors. */
static int pl_decode_seeking(const uint8_t *data, size_t size, const pl_jpeg_request *req,
                             uint8_t *out, int64_t out_row_stride, size_t out_size,
                             pl_jpeg_result *res)
{
    pl_restart_layout layout;
    pl_mcu_rect rect;
    uint8_t *image;
    size_t bytes;
    int status;
    const int32_t scale = req->scale_num;

    if (!pl_restart_layout_read(data, size, &layout) ||
        /* too many pixels: the plain path refuses it, with its message */
        (req->max_pixels > 0 && (int64_t)layout.width * layout.height > req->max_pixels) ||
        (int64_t)req->top + req->height > pl_scaled(layout.height, scale) ||
        (int64_t)req->left + req->width > pl_scaled(layout.width, scale))
        return -1;
    pl_seek_box(&layout, scale, req->top, req->left, req->height, req->width, &rect);
    if (!pl_seek_pays(&layout, &rect) || !pl_restart_layout_index(data, size, &layout))
        return -1;
    if ((image = malloc(bytes = pl_subimage_size(&layout, &rect))) == NULL) {
        pl_restart_layout_free(&layout);
        return -1;
    }
    pl_subimage_write(data, &layout, &rect, image);
    status = pl_decode_subimage(image, bytes, &layout, &rect, req, out, out_row_stride,
                                out_size, res, NULL);
    free(image);
    pl_restart_layout_free(&layout);
    return status;
}

/* A box of a JPEG without restart markers, with its seek index (jpeg_seek_index.c): the
 * rows of MCUs around the box, read in place (jpeg_huffman.c). -1, as pl_decode_seeking,
 * when the index is not this file's, or the box does not allow it or it would not pay. */
static int pl_decode_indexed(const uint8_t *data, size_t size, const pl_jpeg_request *req,
                             uint8_t *out, int64_t out_row_stride, size_t out_size,
                             pl_jpeg_result *res)
{
    pl_restart_layout layout;
    pl_mcu_rect rect;
    pl_indexed_rows rows;
    size_t bytes;
    int status;
    uint8_t *image = pl_seek_index_rows(data, size, req->seek_index, req->seek_index_size,
                                        req->scale_num, req->top, req->left, req->height,
                                        req->width, req->max_pixels, &layout, &rect, &bytes,
                                        &rows);

    if (image == NULL)
        return -1;
    status = pl_decode_subimage(image, bytes, &layout, &rect, req, out, out_row_stride,
                                out_size, res, &rows);
    free(image);
    return status;
}

int pl_jpeg_decode(const uint8_t *data, size_t size, const pl_jpeg_request *req,
                   uint8_t *out, int64_t out_row_stride, size_t out_size, pl_jpeg_result *res)
{
    return pl_decode(data, size, req, out, out_row_stride, out_size, res, NULL);
}

/* pl_jpeg_decode; with `rows`, the scan is the rows' (pl_decode_indexed). */
static int pl_decode(const uint8_t *data, size_t size, const pl_jpeg_request *req, uint8_t *out,
                     int64_t out_row_stride, size_t out_size, pl_jpeg_result *res,
                     const pl_indexed_rows *rows)
{
    struct jpeg_decompress_struct cinfo;
    pl_error_mgr err;
    pl_source_mgr src;
    volatile int created = 0;

    memset(res, 0, sizeof(*res));
    if (req->scale_num < 1 || req->scale_num > 8)
        return pl_arg_error(res, "scale_num must be in 1..8");
    if (req->channels != 0 && req->channels != 1 && req->channels != 3)
        return pl_arg_error(res, "channels must be 0 (native), 1 or 3");
    if (req->top < 0 || req->left < 0 || req->height < 0 || req->width < 0)
        return pl_arg_error(res, "negative box");
    if (req->seek && req->roi && req->height > 0 && req->width > 0) {
        const int status = pl_decode_seeking(data, size, req, out, out_row_stride, out_size, res);
        if (status >= 0)
            return status;
        memset(res, 0, sizeof(*res));
    }
    if (req->seek_index != NULL && req->roi && req->height > 0 && req->width > 0) {
        const int status = pl_decode_indexed(data, size, req, out, out_row_stride, out_size, res);
        if (status >= 0)
            return status;
        memset(res, 0, sizeof(*res));
    }

    pl_init_error(&err, req->strict);
    cinfo.err = &err.pub;
    src.hit_end = 0;
    if (setjmp(err.env)) {
        res->warnings = err.warnings;
        res->data_lost = err.data_lost;
        res->hit_end = src.hit_end;
        if (src.hit_end && strncmp(err.message, "Premature end", 13) != 0)
            snprintf(res->message, PL_JPEG_MSG_LEN, "Premature end of JPEG file (%s)", err.message);
        else
            pl_set_message(res->message, err.message);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        return PL_JPEG_EDATA;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    {
        int status = pl_decode_body(&cinfo, &err, &src, data, size, req, out, out_row_stride,
                                    out_size, res, rows);
        jpeg_destroy_decompress(&cinfo);
        return status;
    }
}

/* ---------------------------------------------------------------- encode ---------- */

int pl_jpeg_encode(const uint8_t *pixels, int32_t height, int32_t width, int32_t in_components,
                   int32_t in_colorspace, int32_t jpeg_colorspace, int32_t quality,
                   const int32_t *h_samp, const int32_t *v_samp, int32_t progressive,
                   int32_t restart_rows, int32_t arithmetic,
                   uint8_t **out, size_t *out_size, char *message)
{
    struct jpeg_compress_struct cinfo;
    pl_error_mgr err;
    struct {
        unsigned char *buffer;
        unsigned long size;
    } dst = {NULL, 0};
    volatile int created = 0;
    int ci;

    *out = NULL;
    *out_size = 0;
    message[0] = '\0';
    pl_init_error(&err, 0);
    cinfo.err = &err.pub;
    if (setjmp(err.env)) {
        pl_set_message(message, err.message);
        if (created)
            jpeg_destroy_compress(&cinfo);
        free(dst.buffer);
        return PL_JPEG_EDATA;
    }
    jpeg_create_compress(&cinfo);
    created = 1;
    jpeg_mem_dest(&cinfo, &dst.buffer, &dst.size);
    cinfo.image_height = (JDIMENSION)height;
    cinfo.image_width = (JDIMENSION)width;
    cinfo.input_components = in_components;
    cinfo.in_color_space = (J_COLOR_SPACE)in_colorspace;
    jpeg_set_defaults(&cinfo);
    jpeg_set_colorspace(&cinfo, (J_COLOR_SPACE)jpeg_colorspace);
    jpeg_set_quality(&cinfo, quality, TRUE);
    if (h_samp != NULL && v_samp != NULL)
        for (ci = 0; ci < cinfo.num_components; ci++) {
            cinfo.comp_info[ci].h_samp_factor = h_samp[ci];
            cinfo.comp_info[ci].v_samp_factor = v_samp[ci];
        }
    if (progressive)
        jpeg_simple_progression(&cinfo);
    cinfo.restart_in_rows = restart_rows;
    cinfo.arith_code = arithmetic ? TRUE : FALSE;
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)cinfo.next_scanline * width * in_components);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    *out = dst.buffer;
    *out_size = dst.size;
    return PL_JPEG_OK;
}

void pl_jpeg_free(uint8_t *buffer)
{
    free(buffer);
}
