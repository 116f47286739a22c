/* One deliberately bad kernel per hardware rule, chosen with -DRULE=n.  The last tasklet
 * breaks the rule while the others wait on a barrier (they must not hang). */
#include <stdint.h>
#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>

#define RULE_MISALIGNED_MRAM 1
#define RULE_OVERSIZED 2
#define RULE_SIZE_NOT_MULTIPLE 3
#define RULE_MRAM_OOB 4
#define RULE_WRAM_BUDGET 5
#define RULE_MISALIGNED_WRAM 6
#define RULE_UNDERSIZED 7

__host uint32_t reached;
__dma_aligned uint8_t cache[4096];
BARRIER_INIT(all, NR_TASKLETS);

int main(void)
{
    unsigned int id = me();
    uint32_t heap = (uint32_t)DPU_MRAM_HEAP_POINTER;
    if (id == NR_TASKLETS - 1) {
#if RULE == RULE_MISALIGNED_MRAM
        mram_read((__mram_ptr void const *)(heap + 4), cache, 8);
#elif RULE == RULE_OVERSIZED
        mram_read((__mram_ptr void const *)heap, cache, 2056);
#elif RULE == RULE_SIZE_NOT_MULTIPLE
        mram_write(cache, (__mram_ptr void *)heap, 12);
#elif RULE == RULE_MRAM_OOB
        mram_read((__mram_ptr void const *)(heap + (64u << 20)), cache, 8);
#elif RULE == RULE_WRAM_BUDGET
        for (int i = 0; i < 64; ++i)
            mem_alloc(2048);
#elif RULE == RULE_MISALIGNED_WRAM
        mram_read((__mram_ptr void const *)heap, cache + 4, 8);
#elif RULE == RULE_UNDERSIZED
        mram_read((__mram_ptr void const *)heap, cache, 0);
#endif
    }
    barrier_wait(&all);
    reached = 1;
    return 0;
}
