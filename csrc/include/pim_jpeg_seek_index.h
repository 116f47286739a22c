/* pim_jpeg_seek_index.h: seek indexes of JPEGs without restart markers, and the
 * sub-images cut out with them (csrc/jpeg_seek_index.c). Internal to the JPEG module; the
 * index's making is in pim_jpeg.h's cdef.
 *
 * An index: "PLSI", a version, the JPEG's size in bytes and the interval k (4 bytes each,
 * native order), a 64-bit fingerprint of the file's bytes, then one point every k MCUs and one past the last MCU, each of
 * PL_SEEK_POINT_BYTES: the raw byte offset of the data byte holding the next bit, that
 * bit's position counted in data bits from the scan's start, how many bits of that byte
 * precede it, a byte of padding, and each scan component's DC prediction (int16). */
#ifndef PIM_JPEG_SEEK_INDEX_H
#define PIM_JPEG_SEEK_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "pim_jpeg_restart.h"

#define PL_SEEK_INDEX_HEADER 24
#define PL_SEEK_POINT_BYTES 16
#define PL_SEEK_INDEX_VERSION 1

/* An index point: the raw byte offset of the data byte holding the MCU's first bit, the
 * bit's position in data bits from the scan's start, the bits of that byte before it, and
 * each scan component's DC prediction there. */
typedef struct {
    uint32_t offset, bit;
    uint8_t skip;
    int32_t dc[3];
} pl_index_point;

/* The rows of MCUs around a box, to be read in place (jpeg_huffman.c): the file's data and
 * index, the point of the first row's first MCU, the points from one row to the next, and
 * the rectangle's size in MCUs. */
typedef struct {
    const uint8_t *data;
    size_t size;
    const uint8_t *index;
    int64_t first_point, points_per_row;
    int32_t rows, mcus_per_row;
} pl_indexed_rows;

void pl_seek_index_point(const uint8_t *index, int64_t number, pl_index_point *point);

/* The JPEG (malloc'ed, *image_size bytes) of the rectangle of MCUs around a box (in pixels
 * at scale_num/8): the file's headers with the rectangle's size, and an empty scan whose
 * MCUs `rows` locates in the file (pl_huffman_install reads them); *layout and *rect: the
 * file's geometry and the MCUs of the rectangle. NULL when the index is not this file's,
 * the box is not inside the image or the image is over max_pixels (> 0), reading the
 * rectangle alone would not pay (pl_seek_pays), or memory runs out: the caller then
 * decodes as usual. */
uint8_t *pl_seek_index_rows(const uint8_t *data, size_t size, const uint8_t *index,
                            size_t index_size, int32_t scale_num, int32_t top, int32_t left,
                            int32_t height, int32_t width, int64_t max_pixels,
                            pl_restart_layout *layout, pl_mcu_rect *rect, size_t *image_size,
                            pl_indexed_rows *rows);

#endif /* PIM_JPEG_SEEK_INDEX_H */
