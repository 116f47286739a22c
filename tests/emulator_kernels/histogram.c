/* PrIM HST-S-style kernel: a 256-bin histogram of this DPU's bytes, in two levels.
 * Each tasklet counts its blocks into its own WRAM histogram; after a barrier the tasklets
 * merge bin ranges into the DPU histogram (__host); a mutex guards a shared byte total. */
#include <stdint.h>
#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>
#include <mutex.h>

#define BLOCK 512
#define BINS 256

__host uint32_t nr_bytes;         /* multiple of 8 */
__host uint32_t histogram[BINS];  /* the DPU's result */
__host uint64_t total;            /* bytes counted, summed under the mutex */
__host uint32_t blocks_seen;      /* blocks read, summed under the mutex */

uint32_t *tasklet_hist[NR_TASKLETS];

BARRIER_INIT(counted, NR_TASKLETS);
BARRIER_INIT(merged, NR_TASKLETS);
MUTEX_INIT(total_mutex);

int main(void)
{
    unsigned int id = me();
    if (id == 0) {
        mem_reset();
        total = 0;
        blocks_seen = 0;
    }
    barrier_wait(&counted); /* heap reset before anyone allocates */

    uint32_t *hist = (uint32_t *)mem_alloc(BINS * sizeof(uint32_t));
    uint8_t *cache = (uint8_t *)mem_alloc(BLOCK);
    for (int b = 0; b < BINS; ++b)
        hist[b] = 0;
    tasklet_hist[id] = hist;

    uint32_t mine = 0, blocks = 0;
    uint32_t base = (uint32_t)DPU_MRAM_HEAP_POINTER;
    for (uint32_t off = id * BLOCK; off < nr_bytes; off += BLOCK * NR_TASKLETS) {
        uint32_t len = nr_bytes - off < BLOCK ? nr_bytes - off : BLOCK;
        mram_read((__mram_ptr void const *)(base + off), cache, len);
        for (uint32_t i = 0; i < len; ++i)
            hist[cache[i]]++;
        mine += len;
        blocks++;
    }
    mutex_lock(total_mutex);
    total += mine;
    blocks_seen += blocks;
    mutex_unlock(total_mutex);

    barrier_wait(&counted);
    for (uint32_t b = id; b < BINS; b += NR_TASKLETS) {
        uint32_t sum = 0;
        for (unsigned int t = 0; t < NR_TASKLETS; ++t)
            sum += tasklet_hist[t][b];
        histogram[b] = sum;
    }
    barrier_wait(&merged);
    return 0;
}
