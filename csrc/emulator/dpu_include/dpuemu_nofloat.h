/* pimloader DPU emulator: included first in every kernel built for the emulator
 * (gcc -include).  A DPU has no FPU, and pimloader's kernels use integers only: the
 * floating-point type names are poisoned, so a kernel that names one fails to build; the
 * build flag -mgeneral-regs-only also rejects any floating-point arithmetic left.
 * The common C headers are included before the poisoning since they declare functions on
 * double (strtod, ...). */
#ifndef PIMLOADER_DPUEMU_NOFLOAT_H
#define PIMLOADER_DPUEMU_NOFLOAT_H
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#pragma GCC poison float double _Float16 _Float32 _Float64 _Float128 _Float32x _Float64x __float128 __fp16 __bf16
#endif
