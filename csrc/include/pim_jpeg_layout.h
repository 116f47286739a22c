/* pim_jpeg_layout.h: the structure of a baseline JPEG as the host reads it for the DPU
 * decoder (csrc/jpeg_layout.c; Python: pimloader.decode.baseline and the packer of
 * pimloader.backends.dpu.jpeg, through the cffi module pimloader._jpeg_layout).
 *
 * Reading takes two calls so that the caller can apply its decompression-bomb rule between
 * them, where the frame's size is known and nothing else has been looked at:
 *
 *   pim_jpeg_read_headers  the markers from SOI to SOS (ITU-T T.81 B.2): frame, tables,
 *                          restart interval, the APP0/APP14 colour hints;
 *   pim_jpeg_read_scan     the checks of what the DPU decoder takes (colour space, sampling,
 *                          one scan of every component, its tables defined), then the
 *                          entropy-coded data's restart intervals, between RSTn markers, up
 *                          to EOI.
 *
 * A call that fails fills a pim_jpeg_parse_status_t: CORRUPT (the Python side raises
 * DecodeError with `message`) or UNSUPPORTED (UnsupportedJpeg with `reason`, a key of
 * baseline.REASONS, and `message` as its detail).
 */
#ifndef PIM_JPEG_LAYOUT_H
#define PIM_JPEG_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* the tables and interval descriptors of include/pim_jpeg.h (its chunk layout), by their
 * struct tags: csrc/include has a pim_jpeg.h of its own (the libjpeg wrapper's) */
struct pim_jpeg_huff;
struct pim_jpeg_interval;
struct pim_jpeg_tables;

/* cffi-cdef-begin */
#define PIM_JPEG_PARSE_OK 0
#define PIM_JPEG_PARSE_CORRUPT 1
#define PIM_JPEG_PARSE_UNSUPPORTED 2

typedef struct pim_jpeg_parse_status {
    uint32_t kind;            /* PIM_JPEG_PARSE_* */
    char reason[24];          /* UNSUPPORTED: a key of pimloader.decode.baseline.REASONS */
    char message[160];        /* CORRUPT: what is wrong; UNSUPPORTED: the detail (may be "") */
} pim_jpeg_parse_status_t;

typedef struct pim_jpeg_frame_component {
    uint32_t id, h, v, tq;    /* component identifier, sampling factors, quantisation table */
} pim_jpeg_frame_component_t;

typedef struct pim_jpeg_headers {
    uint32_t have_frame;
    uint32_t height, width;
    uint32_t n_comp;                          /* as the frame says; the first 3 are kept */
    pim_jpeg_frame_component_t comp[3];
    uint32_t restart_mcus;                    /* DRI's Ri (0: none) */
    uint32_t jfif;                            /* an APP0 "JFIF" segment was seen */
    int32_t adobe_transform;                  /* APP14 "Adobe" transform flag; -1: none */
    uint32_t quant_defined;                   /* bit t: DQT table t was defined */
    uint16_t quant[4][64];                    /* natural (row-major) order */
    uint32_t huff_defined;                    /* bit 4 x class + id: DHT table defined */
    uint32_t huff_order[8];                   /* 4 x class + id, in order of first definition */
    uint32_t huff_tables;                     /* how many of huff_order are set */
    uint32_t huff_count[8];                   /* symbols of each table */
    uint8_t huff_bits[8][16];                 /* BITS: codes of each length 1..16 */
    uint8_t huff_values[8][256];              /* HUFFVAL */
    uint64_t scan_off, scan_bytes;            /* the SOS segment's payload */
    uint64_t data_start;                      /* the entropy-coded data's first byte */
    uint64_t interval_capacity;               /* room pim_jpeg_read_scan needs in spans */
} pim_jpeg_headers_t;

typedef struct pim_jpeg_scan {
    uint32_t dc[3], ac[3];                    /* each component's Huffman table ids (Td, Ta) */
    uint32_t mcus_x, mcus_y;
    uint64_t n_intervals;
} pim_jpeg_scan_t;

/* Both: PIM_JPEG_PARSE_OK or the kind of failure written to `status`. */
int pim_jpeg_read_headers(const uint8_t *data, size_t size, pim_jpeg_headers_t *headers,
                          pim_jpeg_parse_status_t *status);
/* spans: room for headers->interval_capacity [start, end) byte ranges, 2 values each. */
int pim_jpeg_read_scan(const uint8_t *data, size_t size, const pim_jpeg_headers_t *headers,
                       pim_jpeg_scan_t *scan, uint64_t *spans, pim_jpeg_parse_status_t *status);

/* A DHT table (BITS, HUFFVAL of `count` symbols) in pim_jpeg.h's lookup form, as
 * libjpeg-turbo's jpeg_make_d_derived_tbl builds it; 0, or -1 if its code lengths overflow. */
int pim_jpeg_huff_build(const uint8_t bits[16], const uint8_t *values, uint32_t count,
                        struct pim_jpeg_huff *table);

/* An image's pim_jpeg_tables_t: each frame component's quantisation table, and the Huffman
 * tables that `slots` names (4 x class + id each, in slot order) in lookup form; 0, or -1 if
 * one of them is not defined or its code lengths overflow. */
int pim_jpeg_pack_tables(const pim_jpeg_headers_t *headers, const uint32_t *slots, uint32_t n_slots,
                         struct pim_jpeg_tables *tables);

/* The chosen intervals (indices into spans) of one image: their descriptors, numbered from
 * MCU 0 in steps of restart_mcus and placed from data_offset on, and (bytes not NULL) their
 * entropy-coded bytes one after the other. */
void pim_jpeg_pack_intervals(const uint8_t *data, const uint64_t *spans, const int64_t *chosen,
                             uint32_t n_chosen, uint32_t restart_mcus, uint32_t total_mcus,
                             uint32_t data_offset, struct pim_jpeg_interval *descriptors, uint8_t *bytes);
/* cffi-cdef-end */

#endif /* PIM_JPEG_LAYOUT_H */
