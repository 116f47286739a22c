/* pim_jpeg_restart.h: the layout of a JPEG with restart markers, and sub-images of it
 * (csrc/jpeg_restart.c). Internal to the JPEG module. */
#ifndef PIM_JPEG_RESTART_H
#define PIM_JPEG_RESTART_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t height, width, components;
    int32_t mcu_width, mcu_height;  /* in pixels */
    int32_t mcus_per_row, mcu_rows;
    int32_t interval;               /* MCUs per restart interval; divides mcus_per_row */
    size_t frame_size_at;           /* offset of the SOF's height (then width) field */
    size_t scan_at;                 /* first byte of the entropy-coded data */
    int64_t count;                  /* intervals */
    size_t *starts;                 /* count + 1: each interval's first byte; past EOI */
} pl_restart_layout;

typedef struct {
    int32_t row0, row1, col0, col1; /* MCU rows [row0, row1), columns [col0, col1) */
} pl_mcu_rect;

/* A marker segment of a JPEG's headers (B.1.1.4): where its 0xFF is, its code, and its
 * payload (after the length field) and the payload's length. */
typedef struct {
    size_t at;
    unsigned marker;
    const uint8_t *payload;
    size_t length;
} pl_segment;

/* The segment at data[*next] (0xFF fill bytes allowed before its code), *next moved past
 * it: 1, or 0 where the bytes there are not a whole segment. Start at 2, after SOI. */
int pl_next_segment(const uint8_t *data, size_t size, size_t *next, pl_segment *segment);

/* The MCU geometry from a frame (SOF0/SOF1) segment's payload; 0 for one of other than
 * 8-bit samples or 1 to 4 components. */
int pl_restart_layout_frame(const uint8_t *payload, size_t length, pl_restart_layout *layout);
/* 1 for a baseline single-scan JPEG whose restart interval divides its MCU rows (from its
 * markers only; no allocation); 0 otherwise. */
int pl_restart_layout_read(const uint8_t *data, size_t size, pl_restart_layout *layout);
/* Then where each interval starts: 1 (and a layout to free) when every interval is there,
 * followed by EOI; 0 otherwise (nothing to free). */
int pl_restart_layout_index(const uint8_t *data, size_t size, pl_restart_layout *layout);
void pl_restart_layout_free(pl_restart_layout *layout);

/* Whether decoding `rect` alone saves at least a tenth of the MCUs a region-of-interest
 * decode of the whole file reads (every MCU row through rect's last): below that, finding
 * the intervals and copying them costs more than it saves. */
int pl_seek_pays(const pl_restart_layout *layout, const pl_mcu_rect *rect);

/* The whole intervals that decode the box (in pixels of the image decoded at scale_num/8)
 * exactly: one pixel of upsampling context kept inside every edge that is not the image's. */
void pl_seek_box(const pl_restart_layout *layout, int32_t scale_num, int32_t top, int32_t left,
                 int32_t height, int32_t width, pl_mcu_rect *rect);
/* A size at scale_num/8, rounded up as libjpeg does. */
int32_t pl_scaled(int32_t size, int32_t scale_num);
size_t pl_subimage_size(const pl_restart_layout *layout, const pl_mcu_rect *rect);
void pl_subimage_write(const uint8_t *data, const pl_restart_layout *layout,
                       const pl_mcu_rect *rect, uint8_t *out);

#endif /* PIM_JPEG_RESTART_H */
