/* Integer arithmetic of every kind a kernel compiles to, for checking the proxy ISA's
 * simulator (csrc/proxy/rv32sim.c) against the emulator's host build of the same source:
 * each tasklet reads pairs (a, b) of uint32 from MRAM and writes OUT_WORDS results per pair
 * (32-bit products and high halves, divisions, shifts, compares, sign extension, 64-bit
 * arithmetic through libgcc's helpers).  Input: n_pairs (uint32, padded to 8 bytes), then the
 * pairs, at DPU_MRAM_HEAP_POINTER; output after them. */
#include <stdint.h>
#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>

#define OUT_WORDS 20
#define BLOCK 8 /* pairs per DMA */

static uint32_t results[NR_TASKLETS][BLOCK * OUT_WORDS] __attribute__((aligned(8)));
static uint32_t pairs[NR_TASKLETS][BLOCK * 2] __attribute__((aligned(8)));
static uint32_t header[2] __attribute__((aligned(8)));
BARRIER_INIT(start, NR_TASKLETS);

static void compute(uint32_t a, uint32_t b, uint32_t *out)
{
    const int32_t sa = (int32_t)a, sb = (int32_t)b;
    const uint32_t d = b | 1u, sd = (sb == -1 || sb == 0) ? 3 : (uint32_t)sb; /* no UB: never 0, never INT_MIN/-1 */
    out[0] = a * b;
    out[1] = (uint32_t)(((int64_t)sa * sb) >> 32);
    out[2] = (uint32_t)(((uint64_t)a * b) >> 32);
    out[3] = (uint32_t)(((int64_t)sa * (int64_t)(uint64_t)b) >> 32);
    out[4] = a / d;
    out[5] = a % d;
    out[6] = (uint32_t)(sa / (int32_t)sd);
    out[7] = (uint32_t)(sa % (int32_t)sd);
    out[8] = a << (b & 31);
    out[9] = a >> (b & 31);
    out[10] = (uint32_t)(sa >> (b & 31));
    out[11] = (uint32_t)((sa < sb) | (a < b) << 1 | (sa >= sb) << 2 | (a >= b) << 3 | (a == b) << 4);
    out[12] = (uint32_t)(int32_t)(int8_t)(a >> 8);
    out[13] = (uint32_t)(int32_t)(int16_t)(a >> 8);
    const uint64_t wide = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull;
    out[14] = (uint32_t)wide;
    out[15] = (uint32_t)(wide >> 32);
    const uint64_t q = wide / ((uint64_t)d << 7 | 1);
    out[16] = (uint32_t)q;
    out[17] = (uint32_t)(q >> 32);
    out[18] = (a ^ 0x5a5a5a5au) + (b | 0x0f0f0000u) - (a & b);
    out[19] = (uint32_t)((int64_t)sa * sa + (int64_t)sb);
}

int main(void)
{
    const uint32_t id = me(), base = (uint32_t)DPU_MRAM_HEAP_POINTER;
    if (id == 0)
        mem_reset();
    mram_read((__mram_ptr void const *)base, header, sizeof(header));
    barrier_wait(&start);
    const uint32_t n = header[0], in = base + 8, out = in + n * 8;
    for (uint32_t first = id * BLOCK; first < n; first += BLOCK * NR_TASKLETS) {
        mram_read((__mram_ptr void const *)(in + first * 8), pairs[id], BLOCK * 8);
        for (uint32_t i = 0; i < BLOCK; i++)
            compute(pairs[id][2 * i], pairs[id][2 * i + 1], &results[id][i * OUT_WORDS]);
        for (uint32_t k = 0; k < BLOCK * OUT_WORDS * 4; k += 2048) {
            const uint32_t bytes = BLOCK * OUT_WORDS * 4 - k < 2048 ? BLOCK * OUT_WORDS * 4 - k : 2048;
            mram_write((uint8_t *)results[id] + k, (__mram_ptr void *)(out + first * OUT_WORDS * 4 + k), bytes);
        }
    }
    return 0;
}
