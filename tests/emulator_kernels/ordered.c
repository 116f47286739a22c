/* Tasklet 0 works for a while (`spins` 8-byte MRAM reads), then writes `stamp` over the first
 * 8 bytes of the MRAM heap, then faults if `fault` is set: the host checks which of its
 * queued transfers ran before or after the launch, and how a fault in a queue is reported. */
#include <stdint.h>
#include <defs.h>
#include <mram.h>
__host uint32_t spins;
__host uint32_t fault;
__host uint64_t stamp;
__dma_aligned uint64_t word;
int main(void)
{
    if (me() != 0)
        return 0;
    uint32_t heap = (uint32_t)DPU_MRAM_HEAP_POINTER;
    for (uint32_t i = 0; i < spins; ++i)
        mram_read((__mram_ptr void const *)(heap + 8), &word, 8);
    word = stamp;
    mram_write(&word, (__mram_ptr void *)heap, 8);
    if (fault)
        halt();
    return 0;
}
