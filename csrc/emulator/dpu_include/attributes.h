/* pimloader DPU emulator: UPMEM's attributes.h for kernels compiled with the host gcc.
 *
 * MRAM variables go to sections that the emulator's linker script (csrc/emulator/mram.ld)
 * lays out as one 64 MB block at the start of each DPU's private MRAM; WRAM variables
 * (including __host ones) are ordinary globals of the DPU's private copy of the kernel. */
#ifndef DPUSYSCORE_ATTRIBUTES_H
#define DPUSYSCORE_ATTRIBUTES_H

#define DEPRECATED __attribute__((deprecated))
#if __STDC_VERSION__ >= 201112L
#define __NO_RETURN _Noreturn
#else
#define __NO_RETURN
#endif

#define __weak __attribute__((weak))
#define __section(s) __attribute__((section(s)))
#define __aligned(a) __attribute__((aligned(a)))
#define __used __attribute__((used))
#define __noinline __attribute__((noinline))
#define __atomic_bit __used
#define __dma_aligned __aligned(8)
#define __keep __used
#define __host __aligned(8) __used
#define __lower_data(name) __used

/* MRAM is a separate address space on a DPU; on the host an MRAM pointer is an ordinary
 * pointer (or its low 32 bits, as DPU code often keeps MRAM addresses in uint32_t). */
#define __mram_ptr
#define __mram __section(".dpu_mram") __dma_aligned __used
#define __mram_noinit __section(".bss.dpu_mram_noinit") __dma_aligned __used
#define __mram_keep __mram
#define __mram_noinit_keep __mram_noinit

#endif /* DPUSYSCORE_ATTRIBUTES_H */
