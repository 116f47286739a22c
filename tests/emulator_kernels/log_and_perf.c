/* printf goes to the DPU log (dpu_log_read); perfcounter counts modelled DMA work; an
 * initialised __mram variable and an __mram_noinit array live in the DPU's MRAM. */
#include <stdint.h>
#include <stdio.h>
#include <defs.h>
#include <mram.h>
#include <perfcounter.h>
__mram uint64_t mram_init_value = 0x1122334455667788ull;
__mram_noinit uint64_t mram_array[512];
__host uint64_t cycles, instructions, read_back;
__dma_aligned uint64_t buffer[256];
int main(void)
{
    perfcounter_config(COUNT_CYCLES, true);
    mram_read(&mram_init_value, buffer, 8);
    read_back = buffer[0];
    for (int i = 0; i < 256; ++i)
        buffer[i] = i;
    mram_write(buffer, mram_array, 2048);
    mram_write(buffer, &mram_array[256], 2048);
    cycles = perfcounter_get();
    perfcounter_config(COUNT_INSTRUCTIONS, true);
    mram_read(mram_array, buffer, 2048);
    instructions = perfcounter_get();
    printf("tasklet %u done, clock %u\n", me(), (unsigned)CLOCKS_PER_SEC);
    return 0;
}
