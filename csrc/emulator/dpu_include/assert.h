/* pimloader DPU emulator: a failed assert() faults the DPU (as on hardware) instead of
 * aborting the host process. */
#ifndef PIMLOADER_DPUEMU_ASSERT_H
#define PIMLOADER_DPUEMU_ASSERT_H
#include <dpuemu_rt.h>
#ifdef NDEBUG
#define assert(expression) ((void)0)
#else
#define assert(expression)                                                                               \
    ((expression) ? (void)0 : __dpuemu_ops->fault("assert", "assertion failed: " #expression, __FILE__, __LINE__))
#endif
#endif
