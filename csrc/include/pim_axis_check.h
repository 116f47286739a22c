/* pim_axis_check.h: the one check of an axis table (include/pim_params.h format) that every
 * host path runs before it reads a table: the CPU kernel (csrc/cpu_kernels.c) and the DPU
 * host driver's planning (csrc/dpu_plan.c) both call it, so a table one of them refuses the
 * other refuses too, with the same message. Defined in csrc/axis_check.c. */
#ifndef PIM_AXIS_CHECK_H
#define PIM_AXIS_CHECK_H

#include <stdint.h>

#include "pim_params.h"

/* The axis table at byte `offset` of `tables` (tables_bytes long), checked against the
 * extents it must map (n_in -> n_out): 8-byte aligned and inside the tables; its header maps
 * n_in -> n_out; when resampled, taps a nonzero multiple of 4, precision in range, every
 * window inside the source and moving forward, zero weights past each window's count, and no
 * window that could overflow the int32 accumulator. Returns the table, or NULL with a message
 * naming the axis (`name`) in err. */
const pim_axis_t *pim_check_axis(const uint8_t *tables, uint64_t tables_bytes, uint32_t offset,
                                 uint32_t n_in, uint32_t n_out, const char *name, char *err,
                                 uint32_t err_len);

#endif /* PIM_AXIS_CHECK_H */
