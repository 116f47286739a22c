/* pimloader DPU emulator: UPMEM's mram.h.
 *
 * mram_read / mram_write are checked by the emulator as the hardware does: MRAM and WRAM
 * addresses 8-byte aligned, a size that is a multiple of 8 from 8 to 2048 bytes, the MRAM
 * range inside the DPU's 64 MB and the WRAM range inside its WRAM.  A violation faults the
 * DPU.  Both are also counted (calls and bytes, per tasklet). */
#ifndef DPUSYSCORE_MRAM_H
#define DPUSYSCORE_MRAM_H

#include <stdint.h>
#include <attributes.h>
#include <dpuemu_rt.h>

/* First free MRAM byte, after the kernel's MRAM variables (defined by mram.ld). */
extern __mram_ptr __dma_aligned uint8_t __sys_used_mram_end[0];
#define DPU_MRAM_HEAP_POINTER ((__mram_ptr void *)(&__sys_used_mram_end))

static inline void (mram_read)(const __mram_ptr void *from, void *to, unsigned int nb_of_bytes)
{
    __dpuemu_ops->ldma(to, from, nb_of_bytes, "?", 0);
}

static inline void (mram_write)(const void *from, __mram_ptr void *to, unsigned int nb_of_bytes)
{
    __dpuemu_ops->sdma(from, to, nb_of_bytes, "?", 0);
}

/* The same, reporting the caller's source line in fault messages. */
#define mram_read(from, to, nb_of_bytes)                                                                 \
    __dpuemu_ops->ldma((to), (const void *)(from), (nb_of_bytes), __FILE__, __LINE__)
#define mram_write(from, to, nb_of_bytes)                                                                \
    __dpuemu_ops->sdma((from), (void *)(to), (nb_of_bytes), __FILE__, __LINE__)

#endif /* DPUSYSCORE_MRAM_H */
