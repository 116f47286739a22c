/* pimloader DPU emulator: UPMEM's alloc.h (the incremental WRAM heap).
 *
 * mem_alloc returns 8-byte aligned WRAM after the globals and the tasklets' stacks; asking
 * for more than the 64 KB WRAM holds faults the DPU, as on hardware.  mem_reset empties the
 * heap.  The heap is reset at each launch. */
#ifndef DPUSYSCORE_ALLOC_H
#define DPUSYSCORE_ALLOC_H

#include <stddef.h>
#include <attributes.h>
#include <dpuemu_rt.h>

static inline void *(mem_alloc)(size_t size)
{
    return __dpuemu_ops->mem_alloc(size, "?", 0);
}
#define mem_alloc(size) __dpuemu_ops->mem_alloc((size), __FILE__, __LINE__)

static inline void *mem_reset(void)
{
    return __dpuemu_ops->mem_reset();
}

#endif /* DPUSYSCORE_ALLOC_H */
