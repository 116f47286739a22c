/* PrIM VA-style kernel: B[i] += A[i] over this DPU's slice of two uint32 vectors in MRAM.
 * MRAM layout from DPU_MRAM_HEAP_POINTER: A (transfer_size bytes), then B (same). */
#include <stdint.h>
#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>

#define BLOCK_SIZE_LOG2 10
#define BLOCK_SIZE (1 << BLOCK_SIZE_LOG2)

typedef struct {
    uint32_t size;          /* bytes of this DPU's slice (multiple of 8) */
    uint32_t transfer_size; /* common, padded length */
} dpu_arguments_t;

__host dpu_arguments_t DPU_INPUT_ARGUMENTS;

BARRIER_INIT(my_barrier, NR_TASKLETS);

int main(void)
{
    unsigned int tasklet_id = me();
    if (tasklet_id == 0)
        mem_reset();
    barrier_wait(&my_barrier);

    uint32_t input_size_dpu_bytes = DPU_INPUT_ARGUMENTS.size;
    uint32_t input_size_dpu_bytes_transfer = DPU_INPUT_ARGUMENTS.transfer_size;
    uint32_t base_tasklet = tasklet_id << BLOCK_SIZE_LOG2;
    uint32_t mram_base_addr_A = (uint32_t)DPU_MRAM_HEAP_POINTER;
    uint32_t mram_base_addr_B = (uint32_t)(DPU_MRAM_HEAP_POINTER + input_size_dpu_bytes_transfer);

    uint32_t *cache_A = (uint32_t *)mem_alloc(BLOCK_SIZE);
    uint32_t *cache_B = (uint32_t *)mem_alloc(BLOCK_SIZE);

    for (uint32_t byte_index = base_tasklet; byte_index < input_size_dpu_bytes; byte_index += BLOCK_SIZE * NR_TASKLETS) {
        uint32_t l_size_bytes
            = (byte_index + BLOCK_SIZE >= input_size_dpu_bytes) ? (input_size_dpu_bytes - byte_index) : BLOCK_SIZE;
        mram_read((__mram_ptr void const *)(mram_base_addr_A + byte_index), cache_A, l_size_bytes);
        mram_read((__mram_ptr void const *)(mram_base_addr_B + byte_index), cache_B, l_size_bytes);
        for (uint32_t i = 0; i < l_size_bytes >> 2; i++)
            cache_B[i] += cache_A[i];
        mram_write(cache_B, (__mram_ptr void *)(mram_base_addr_B + byte_index), l_size_bytes);
    }
    return 0;
}
