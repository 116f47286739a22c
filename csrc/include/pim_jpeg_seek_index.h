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

/* The JPEG (malloc'ed, *image_size bytes: one scan, no restart markers) of the MCUs of
 * the rows around a box (in pixels at scale_num/8), cut out with the file's `index`;
 * *layout and *rect: the file's geometry and the MCUs cut. NULL when the index is not
 * this file's, the box is not inside the image or the image is over max_pixels (> 0),
 * cutting would not pay (pl_seek_pays), a code does not decode or a DC value has no code,
 * or memory runs out: the caller then decodes as usual. */
uint8_t *pl_seek_index_cut(const uint8_t *data, size_t size, const uint8_t *index,
                           size_t index_size, int32_t scale_num, int32_t top, int32_t left,
                           int32_t height, int32_t width, int64_t max_pixels,
                           pl_restart_layout *layout, pl_mcu_rect *rect, size_t *image_size);

#endif /* PIM_JPEG_SEEK_INDEX_H */
