/* Tasklet 0 returns early while the others wait on a barrier that counts it: a deadlock on
 * hardware (the host would wait forever); the emulator faults the DPU. */
#include <stdint.h>
#include <barrier.h>
#include <defs.h>
BARRIER_INIT(all, NR_TASKLETS);
int main(void)
{
    if (me() == 0)
        return 0;
    barrier_wait(&all);
    return 0;
}
