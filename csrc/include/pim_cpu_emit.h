/* pim_cpu_emit.h: SIMD versions of pim_emit_row (pim_resample.h) for 3-channel rows:
 * 8 pixels at a time with AVX2 (csrc/cpu_emit_avx2.c), and for NCHW float outputs 64 at a
 * time with AVX-512 VBMI (csrc/cpu_emit_vbmi.c). Called by csrc/cpu_kernels.c (not
 * exported), which picks them by its SIMD level. */
#ifndef PIM_CPU_EMIT_H
#define PIM_CPU_EMIT_H

#include <stddef.h>
#include <stdint.h>

enum { PIM_EMIT_WIDE = 64 }; /* output pixels per step of the VBMI emitter */

/* A kernel call's lookup table as the VBMI emitter reads it (pim_emit_prepare). */
typedef struct pim_emit_tables {
    uint8_t planes[3][4][256];   /* [c][p][v]: byte p of the table's entry for value v */
    uint8_t split[2][3][64];     /* [hflip][c]: the source byte (mod 128) of each lane */
    uint64_t split_high[2][3];   /* the lanes whose source byte is one of 128..191 */
    uint32_t channels, esize;    /* what the tables were made for */
} pim_emit_tables_t;

/* The tables for `lut` (channels x 256 entries of esize 2 or 4 bytes, channels <= 3). */
void pim_emit_prepare(const void *lut, uint32_t channels, uint32_t esize,
                      pim_emit_tables_t *tables);

/* pim_emit_row's output for a row of n 3-channel pixels, written straight into the output
 * slot `dst` (element (c=0, x=0) of the row; NCHW planes plane_bytes apart), with
 * non-temporal stores where dst is aligned: the caller fences before the slot is read. For
 * CPUs with AVX2 (callers check). `wide`: NULL, or tables made for this lut on a CPU with
 * AVX-512 VBMI, which then does most of an NCHW row of their esize. Returns 1 when it wrote
 * the row, 0 when it did nothing (channels other than 3, 2-byte NCHW entries without `wide`,
 * or no x86-64 SIMD in this build): the caller then runs pim_emit_row. `lut`: as
 * pim_emit_row's (unused for esize 1). */
int pim_emit_row_avx2(const uint8_t *row, uint32_t n, uint32_t channels, int hflip, int nhwc,
                      uint32_t esize, const void *lut, const pim_emit_tables_t *wide,
                      uint8_t *dst, size_t plane_bytes);

/* NCHW output pixels [first, first + 64 * groups) of such a row, the entries t->esize bytes,
 * with non-temporal stores if `stream` (dst + first * esize and plane_bytes then multiples
 * of 64), plain ones otherwise. For CPUs with AVX-512 VBMI (callers check). */
void pim_emit_wide_vbmi(const uint8_t *row, uint32_t n, uint32_t first, uint32_t groups,
                        int hflip, const pim_emit_tables_t *t, uint8_t *dst,
                        size_t plane_bytes, int stream);

#endif /* PIM_CPU_EMIT_H */
