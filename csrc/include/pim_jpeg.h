/* pim_jpeg.h: JPEG decoding for pimloader, on the libjpeg(-turbo) API.
 *
 * One call decodes one JPEG held in memory into a caller-provided uint8 HWC buffer,
 * optionally over a region of interest only (jpeg_skip_scanlines / jpeg_crop_scanline)
 * and optionally at a reduced DCT scale (scale_num / 8).  Errors never leave the process:
 * libjpeg's error_exit is replaced by a longjmp back into the call, which returns a
 * status code and a message.  Every call owns its own decompressor, so calls may run
 * concurrently from any number of threads.
 *
 * The text between the cffi-cdef markers is also the cffi cdef of pimloader._jpeg
 * (csrc/build_jpeg.py reads it), so it holds only what cffi's parser accepts.
 */
#ifndef PIM_JPEG_H
#define PIM_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* cffi-cdef-begin */
#define PL_JPEG_OK 0
#define PL_JPEG_EDATA 1      /* libjpeg rejected the data (corrupt, truncated, unsupported) */
#define PL_JPEG_EARG 2       /* bad request: box outside the image, buffer too small, ... */
#define PL_JPEG_EBOMB 3      /* more pixels than the request's max_pixels (nothing decoded) */
#define PL_JPEG_MSG_LEN 256

typedef struct {
    int32_t height, width;   /* full-resolution size */
    int32_t components;      /* 1 (grey), 3 (YCbCr / RGB), 4 (CMYK / YCCK) */
    int32_t colorspace;      /* libjpeg's J_COLOR_SPACE of the data (jpeg_color_space) */
    int32_t progressive;     /* 1 for a progressive (SOF2/SOF10) JPEG */
    int32_t precision;       /* bits per sample: 8 (12 is rejected by the decoder) */
    int32_t adobe;           /* 1 when an Adobe APP14 marker was seen */
    int32_t max_h_samp, max_v_samp;
    int32_t h_samp[4], v_samp[4];  /* per-component sampling factors (first 4) */
    char message[PL_JPEG_MSG_LEN];
} pl_jpeg_header;

typedef struct {
    int32_t scale_num;       /* 1..8: decode at scale_num/8 (8 = full resolution) */
    /* The box to write, in output (scaled) pixel coordinates; height == 0 or width == 0
     * means the whole (scaled) image. */
    int32_t top, left, height, width;
    int32_t channels;        /* 3: RGB; 1: grey (greyscale JPEGs only); 0: native (1 or 3) */
    int32_t strict;          /* 1: lost pixel data (truncation, corrupt entropy data) is an error */
    int32_t roi;             /* 1: decode only the rows/columns the box needs; 0: decode all */
    /* 1: write the box's rows with the decoded columns around it (no copy out of them):
     * rows of decoded_width pixels, packed (out_row_stride must be 0), the box starting at
     * column left - decoded_left. out must hold height x (scaled width) x channels. */
    int32_t margin;
    /* 1: with roi, decode a JPEG with restart markers (see jpeg_restart.c) from the
     * restart intervals around the box only */
    int32_t seek;
    /* > 0: refuse (PL_JPEG_EBOMB) an image of more than this many pixels (width x height,
     * from its header) before anything is allocated for decoding it; 0: no limit */
    int64_t max_pixels;
    /* with roi: the file's seek index (pl_jpeg_seek_index), or NULL. A JPEG without
     * restart markers is then decoded from the intervals around the box only. */
    const uint8_t *seek_index;
    size_t seek_index_size;
} pl_jpeg_request;

typedef struct {
    int32_t out_height, out_width, out_channels;  /* what was written */
    int32_t scaled_height, scaled_width;          /* the whole image at this scale */
    int32_t decoded_left, decoded_width;          /* the columns libjpeg decoded (iMCU-aligned) */
    int32_t rows_skipped;    /* rows above the box passed to jpeg_skip_scanlines */
    int32_t rows_decoded;    /* rows produced by jpeg_read_scanlines */
    int32_t roi_used;        /* 1 when skip/crop were used (0: full-decode fallback) */
    int32_t warnings;        /* libjpeg warnings seen */
    int32_t data_lost;       /* 1 when a warning meant pixel data was lost (non-strict) */
    int32_t hit_end;         /* 1 when the decoder read past the end of the data */
    int32_t seek_used;       /* 1 when only the restart intervals around the box were decoded */
    int32_t image_height, image_width;  /* full-resolution size, from the header */
    char message[PL_JPEG_MSG_LEN];  /* the error, else the first warning, else "" */
} pl_jpeg_result;

int pl_jpeg_read_header(const uint8_t *data, size_t size, pl_jpeg_header *hdr);

/* A seek index of a baseline JPEG without restart markers (jpeg_seek_index.c): where its
 * entropy-coded data stands every few MCUs. _size: the bytes it takes, 0 for a file that
 * cannot have one (progressive, arithmetic, restart markers, several scans, 2 or 4
 * components). pl_jpeg_seek_index writes it to out and returns its size; 0 when the file
 * cannot have one or its data does not decode to its last MCU. */
size_t pl_jpeg_seek_index_size(const uint8_t *data, size_t size);
size_t pl_jpeg_seek_index(const uint8_t *data, size_t size, uint8_t *out, size_t out_size);

/* Decodes into out: row r of the box starts at out + r * out_row_stride, pixels packed
 * (out_channels bytes each).  out_size is the number of bytes available at out. */
int pl_jpeg_decode(const uint8_t *data, size_t size, const pl_jpeg_request *req,
                   uint8_t *out, int64_t out_row_stride, size_t out_size,
                   pl_jpeg_result *res);

/* Encodes for tests and dataset makers: pixels are height x width x in_components (HWC).
 * in_colorspace / jpeg_colorspace are J_COLOR_SPACE values; h_samp / v_samp (or NULL for
 * libjpeg's defaults) give per-component sampling factors.  On success *out is a buffer
 * from malloc (release it with pl_jpeg_free) of *out_size bytes. */
int pl_jpeg_encode(const uint8_t *pixels, int32_t height, int32_t width, int32_t in_components,
                   int32_t in_colorspace, int32_t jpeg_colorspace, int32_t quality,
                   const int32_t *h_samp, const int32_t *v_samp, int32_t progressive,
                   int32_t restart_rows, int32_t arithmetic,
                   uint8_t **out, size_t *out_size, char *message);
/* A lossless copy of a JPEG with a restart marker every k MCUs, k the largest divisor of an
 * MCU row's count that is at most max_interval: the same coefficients, so the same pixels,
 * as one baseline scan (a progressive or arithmetic-coded file becomes baseline). Warnings
 * (corrupt data) are errors. optimize: Huffman tables fitted to the file (a second pass
 * over the coefficients, a smaller file), else the standard tables. *out is freed with
 * pl_jpeg_free. */
int pl_jpeg_add_restarts(const uint8_t *data, size_t size, int32_t max_interval,
                         int32_t optimize, uint8_t **out, size_t *out_size, char *message);
/* 1 when pl_jpeg_decode can seek in this JPEG; its interval (MCUs) and MCU size (pixels). */
int pl_jpeg_seek_info(const uint8_t *data, size_t size, int32_t *interval, int32_t *mcu_width,
                      int32_t *mcu_height);
void pl_jpeg_free(uint8_t *buffer);
/* cffi-cdef-end */

#endif /* PIM_JPEG_H */
