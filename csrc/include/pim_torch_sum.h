/* pim_torch_sum.h: torch's float32 sum on the CPU, reproduced operation for operation
 * (csrc/torch_sum.c), so that a mean taken here rounds as torch.mean's does. */
#ifndef PIM_TORCH_SUM_H
#define PIM_TORCH_SUM_H

#include <stddef.h>
#include <stdint.h>

/* cffi-cdef-begin */
/* The float32 sum torch computes for n values (uint8, read as floats) of a contiguous
 * tensor reduced whole, in a process where torch runs `threads` threads and its CPU
 * kernels use vectors of `lanes` floats (8 for AVX2, 16 for AVX-512). */
float pim_torch_sum_u8(const uint8_t *values, size_t n, uint32_t threads, uint32_t lanes);
/* cffi-cdef-end */

#endif /* PIM_TORCH_SUM_H */
