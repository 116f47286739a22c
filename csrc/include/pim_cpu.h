/* pim_cpu.h: entry points of the fused CPU kernels (csrc/cpu_kernels.c), reached from Python
 * through the cffi module pimloader._kernels (built by csrc/build_kernels.py). */
#ifndef PIM_CPU_H
#define PIM_CPU_H

#include <stdint.h>

#include "pim_extra.h"
#include "pim_params.h"

/* cffi-cdef-begin */
/* Where an output sample's rows and channel planes lie, in bytes from the start of its slot:
 * row y of plane c at c * plane + y * row (NCHW), row y at y * row (NHWC, plane unused).
 * A slot may so be a (C, h, w) corner of a larger (C, H, W) image (a padded batch). */
typedef struct pim_out_pitch {
    uint64_t row;         /* bytes between the starts of two output rows */
    uint64_t plane;       /* bytes between the starts of two channel planes (NCHW) */
} pim_out_pitch_t;

/* Crop + resize (+ flip, + lookup conversion) a batch of samples, one after the other, each
 * straight into its slot of the output batch; with `extras`, also pad the source and adjust
 * the colours of the resampled image first (pim_extra.h).
 *
 *   samples     n_samples descriptors
 *   extras      NULL, or n_samples pim_extra_t: padding and colour ops per sample
 *   srcs        per sample, the base its src_offset is counted from
 *   src_bytes   per sample, the bytes readable from srcs[i] (bounds check), or NULL
 *   tables      base of the axis tables (xtab_offset / ytab_offset), tables_bytes long
 *   lut         channels x 256 output bit patterns when any out_esize > 1, else may be NULL
 *   dst         base of the output batch (dst_offset), dst_bytes long
 *   pitch       the output rows' and planes' pitch, the same for every sample; NULL: each
 *               slot contiguous (row = out_w [x channels] x out_esize, plane = out_h rows)
 *   err         receives a message on failure (err_len bytes, NUL-terminated)
 *
 * Every descriptor and table is checked before any pixel is touched. Returns 0 on success,
 * i + 1 when sample i is invalid (nothing written), -1 when scratch memory is unavailable.
 * Crop boxes lie inside their image, or inside the padded image when extras[i] pads. Output
 * slots hold extras[i].out_channels channels (s.channels without extras); the lookup table
 * has that many rows. */
int pim_cpu_crop_resize(const pim_sample_t *samples, const pim_extra_t *extras,
                        uint32_t n_samples, const uint8_t *const *srcs,
                        const uint64_t *src_bytes, const uint8_t *tables,
                        uint64_t tables_bytes, const void *lut, uint8_t *dst,
                        uint64_t dst_bytes, const pim_out_pitch_t *pitch, char *err,
                        uint32_t err_len);

/* Which implementation of the row loops pim_cpu_crop_resize uses: 0 = the portable code of
 * pim_resample.h alone, 1 = SSSE3, 2 = AVX2 row loops (same integer sums, so the same
 * bytes), 3 = those and an AVX-512 VBMI output step (the same table entries). request -1
 * picks the best the CPU supports, 0..3 asks for at most that level.
 * Returns the level now in use. Process-wide. */
int pim_cpu_simd(int request);

/* Number of (w, px) pairs, over all int16 w and uint8 px, where the 8x8-bit product of
 * pim_resample.h differs from the native one (0 expected). */
uint32_t pim_check_mul_8x8(void);
/* The pim_axis_t table (pim_params.h) resampling n_in samples to n_out, keeping outputs
 * start..start+count-1 (a window of the resized axis), with torch's antialiased uint8
 * weights for `interpolation` (PIM_INTERP_BILINEAR or _BICUBIC). Writes it to out when
 * out_size is enough, and returns its size in bytes either way; 0 for bad arguments (or no
 * memory). An axis with n_in == n_out is not resampled: a header only, whole axis only. */
size_t pim_axis_table(uint32_t n_in, uint32_t n_out, uint32_t interpolation, uint32_t start,
                      uint32_t count, uint8_t *out, size_t out_size);
/* cffi-cdef-end */

#endif /* PIM_CPU_H */
