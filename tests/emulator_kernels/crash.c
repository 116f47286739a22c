/* Tasklet 0 dereferences a bad pointer (a 32-bit MRAM address used directly): the DPU
 * faults instead of the host process crashing; the others wait on a barrier. */
#include <stdint.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>
BARRIER_INIT(all, NR_TASKLETS);
__host uint32_t value;
int main(void)
{
    if (me() == 0) {
        uint32_t addr = 16; /* not a host address */
        value = *(volatile uint32_t *)(uintptr_t)addr;
    }
    barrier_wait(&all);
    return 0;
}
