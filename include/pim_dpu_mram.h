/* MRAM transfers of any length for pimloader's DPU kernels (dpu_src/): the hardware moves at
 * most PIM_MRAM_DMA_MAX bytes per mram_read/mram_write (upmem-reference.md), so longer ones
 * are cut into pieces. Addresses and lengths must still be 8-byte aligned. Include after
 * <mram.h>; DPU side only. */
#ifndef PIM_DPU_MRAM_H
#define PIM_DPU_MRAM_H

#include <stdint.h>

#define PIM_MRAM_DMA_MAX 2048u

static inline void read_big(uint32_t from, void *to, uint32_t n)
{
    uint8_t *d = (uint8_t *)to;
    for (uint32_t k; n; from += k, d += k, n -= k) {
        k = n > PIM_MRAM_DMA_MAX ? PIM_MRAM_DMA_MAX : n;
        mram_read((__mram_ptr void const *)from, d, k);
    }
}

static inline void write_big(const void *from, uint32_t to, uint32_t n)
{
    const uint8_t *s = (const uint8_t *)from;
    for (uint32_t k; n; s += k, to += k, n -= k) {
        k = n > PIM_MRAM_DMA_MAX ? PIM_MRAM_DMA_MAX : n;
        mram_write(s, (__mram_ptr void *)to, k);
    }
}

#endif
