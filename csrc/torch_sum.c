/* torch_sum.c: torch's float32 sum of a whole contiguous tensor on the CPU, reproduced.
 *
 * torch sums float32 in float32 with a cascade (aten's cascade_sum), which rounds
 * differently from an exact sum once the partial sums pass 2^24; contrast blends with a
 * mean taken that way, so the kernel sums the same way, in the same order:
 *
 *  - parallel_reduce: below GRAIN values, or with one thread, one chunk; else the values
 *    are cut into min(threads, ceil(n / GRAIN)) equal chunks (the last shorter), each
 *    summed into its thread's slot of a buffer of `threads` zeros, and the buffer is then
 *    summed (the same loop) into the output;
 *  - a chunk of at least `lanes` values: vectors of `lanes` consecutive values, summed lane
 *    by lane by row_sum; the values past the last whole vector summed in order from 0,
 *    then the lanes added to that one by one;
 *  - a shorter chunk: row_sum over single values;
 *  - row_sum(m items): the items as rows of ILP; multi_row_sum adds each column in levels
 *    of 2^power rows (power = max(4, ceil_log2(rows) / LEVELS)), carrying a full level
 *    into the next; then the rows past the last whole one into column 0, then columns
 *    1..ILP-1 into column 0.
 *
 * Every addition below is a float32 addition (the file is built with -ffp-contract=off
 * and without fast-math), in torch's order; lanes only ever add to themselves.
 */
#include <string.h>

#include "pim_torch_sum.h"

#define GRAIN 32768 /* at::internal::GRAIN_SIZE */
#define ILP 4
#define LEVELS 4
#define MAX_LANES 16

static int64_t ceil_log2(int64_t x)
{
    if (x <= 2)
        return 1;
    int64_t bits = 0;
    for (uint64_t v = (uint64_t)(x - 1); v != 0; v >>= 1)
        bits++;
    return bits;
}

/* row_sum over `items` items of `lanes` values each (item t at values[t * lanes]), lane
 * by lane, into out[0..lanes-1]. VALUE is the element type. */
#define DEFINE_ROW_SUM(NAME, VALUE)                                                          \
    static void NAME(const VALUE *values, int64_t items, uint32_t lanes, float *out)        \
    {                                                                                        \
        float acc[LEVELS][ILP][MAX_LANES];                                                   \
        memset(acc, 0, sizeof acc);                                                          \
        const int64_t rows = items / ILP;                                                    \
        int64_t power = ceil_log2(rows) / LEVELS;                                            \
        if (power < 4)                                                                       \
            power = 4;                                                                       \
        const int64_t step = (int64_t)1 << power, mask = step - 1;                           \
        int64_t i = 0;                                                                       \
        while (i + step <= rows) {                                                           \
            for (int64_t j = 0; j < step; ++j, ++i)                                          \
                for (int k = 0; k < ILP; ++k)                                                \
                    for (uint32_t l = 0; l < lanes; ++l)                                     \
                        acc[0][k][l] += (float)values[(i * ILP + k) * lanes + l];            \
            for (int j = 1; j < LEVELS; ++j) {                                               \
                for (int k = 0; k < ILP; ++k)                                                \
                    for (uint32_t l = 0; l < lanes; ++l) {                                   \
                        acc[j][k][l] += acc[j - 1][k][l];                                    \
                        acc[j - 1][k][l] = 0.0f;                                             \
                    }                                                                        \
                if ((i & (mask << (j * power))) != 0)                                        \
                    break;                                                                   \
            }                                                                                \
        }                                                                                    \
        for (; i < rows; ++i)                                                                \
            for (int k = 0; k < ILP; ++k)                                                    \
                for (uint32_t l = 0; l < lanes; ++l)                                         \
                    acc[0][k][l] += (float)values[(i * ILP + k) * lanes + l];                \
        for (int j = 1; j < LEVELS; ++j)                                                     \
            for (int k = 0; k < ILP; ++k)                                                    \
                for (uint32_t l = 0; l < lanes; ++l)                                         \
                    acc[0][k][l] += acc[j][k][l];                                            \
        for (int64_t t = rows * ILP; t < items; ++t)                                         \
            for (uint32_t l = 0; l < lanes; ++l)                                             \
                acc[0][0][l] += (float)values[t * lanes + l];                                \
        for (int k = 1; k < ILP; ++k)                                                        \
            for (uint32_t l = 0; l < lanes; ++l)                                             \
                acc[0][0][l] += acc[0][k][l];                                                \
        memcpy(out, acc[0][0], lanes * sizeof(float));                                       \
    }

/* One chunk of n values, as cascade_sum's loop sums it (added to an output of 0). */
#define DEFINE_CHUNK_SUM(NAME, ROW_SUM, VALUE)                                               \
    static float NAME(const VALUE *values, int64_t n, uint32_t lanes)                        \
    {                                                                                        \
        float partial[MAX_LANES];                                                            \
        if (n < (int64_t)lanes) {                                                            \
            ROW_SUM(values, n, 1, partial);                                                  \
            return 0.0f + partial[0];                                                        \
        }                                                                                    \
        const int64_t vectors = n / lanes;                                                   \
        ROW_SUM(values, vectors, lanes, partial);                                            \
        float sum = 0.0f;                                                                    \
        for (int64_t k = vectors * lanes; k < n; ++k)                                        \
            sum += (float)values[k];                                                         \
        for (uint32_t l = 0; l < lanes; ++l)                                                 \
            sum += partial[l];                                                               \
        return 0.0f + sum;                                                                   \
    }

DEFINE_ROW_SUM(row_sum_u8, uint8_t)
DEFINE_ROW_SUM(row_sum_f32, float)
DEFINE_CHUNK_SUM(chunk_sum_u8, row_sum_u8, uint8_t)
DEFINE_CHUNK_SUM(chunk_sum_f32, row_sum_f32, float)

float pim_torch_sum_u8(const uint8_t *values, size_t n, uint32_t threads, uint32_t lanes)
{
    if (lanes < 1 || lanes > MAX_LANES)
        lanes = MAX_LANES;
    if (n < GRAIN || threads <= 1)
        return chunk_sum_u8(values, (int64_t)n, lanes);
    if (threads > 1024)
        threads = 1024;
    const size_t chunks_needed = (n + GRAIN - 1) / GRAIN;
    const size_t used = threads < chunks_needed ? threads : chunks_needed;
    const size_t chunk = (n + used - 1) / used;
    float buffer[1024];
    for (uint32_t t = 0; t < threads; t++) {
        const size_t begin = (size_t)t * chunk;
        buffer[t] = t < used && begin < n
                        ? chunk_sum_u8(values + begin, (int64_t)(n - begin < chunk ? n - begin : chunk), lanes)
                        : 0.0f;
    }
    return chunk_sum_f32(buffer, threads, lanes);
}
