/* Included first in every kernel built for rv32sim: as the emulator's dpuemu_nofloat.h, a
 * DPU has no FPU, so the floating-point type names are poisoned. */
#ifndef PIMLOADER_PROXY_PRELUDE_H
#define PIMLOADER_PROXY_PRELUDE_H
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#pragma GCC poison float double _Float16 _Float32 _Float64 __fp16
#endif
