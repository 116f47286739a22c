/* torch_loops.c: where torch's elementwise loops round a multiply-add once (see
 * pim_torch_loops.h): chunks per thread, rows, steps of two vectors and the tail. */
#include <string.h>

#include "pim_torch_loops.h"

#define GRAIN 32768 /* at::internal::GRAIN_SIZE */

static uint32_t blocks[2];                          /* 0: not told */
static uint64_t tails[2][PIM_TORCH_MAX_BLOCK];

void pim_torch_loops_set(const uint32_t *new_blocks, const uint64_t *new_tails)
{
    for (int kind = 0; kind < 2; kind++)
        blocks[kind] = new_blocks[kind] <= PIM_TORCH_MAX_BLOCK ? new_blocks[kind] : 0;
    memcpy(tails, new_tails, sizeof tails);
}

pim_torch_pass_t pim_torch_pass(uint32_t kind, int fused, size_t total, size_t row,
                                uint32_t threads)
{
    size_t chunk = total;
    if (total >= GRAIN && threads > 1) {
        const size_t needed = (total + GRAIN - 1) / GRAIN;
        const size_t used = threads < needed ? threads : needed;
        chunk = (total + used - 1) / used;
    }
    const pim_torch_pass_t pass = {kind, fused, total, row ? row : total, chunk ? chunk : 1};
    return pass;
}

static size_t smaller(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Whether [begin, end) is a whole row shorter than a step (all tail, as every whole row of
 * its chunk) whose values all round as `once` says: so do the chunk's next whole rows. */
static int whole_rows_alike(const pim_torch_pass_t *pass, size_t begin, size_t end,
                            uint64_t mask, int once)
{
    const size_t row = pass->row;
    if (end - begin != row || row >= blocks[pass->kind])
        return 0;
    const uint64_t values = ((uint64_t)1 << row) - 1;
    return (mask & values) == (once ? values : 0);
}

int pim_torch_rounds_once(const pim_torch_pass_t *pass, size_t index, size_t *run_end)
{
    const size_t chunk_begin = index - index % pass->chunk;
    const size_t row_begin = index - index % pass->row;
    const size_t begin = chunk_begin > row_begin ? chunk_begin : row_begin;
    const size_t end =
        smaller(smaller(chunk_begin + pass->chunk, row_begin + pass->row), pass->total);
    const uint32_t block = blocks[pass->kind];
    const size_t steps_end = block ? end - (end - begin) % block : end;
    if (!pass->fused || index < steps_end) {
        *run_end = pass->fused ? steps_end : end;
        return pass->fused;
    }
    const uint64_t mask = tails[pass->kind][(end - begin) % block];
    const size_t j = index - steps_end;
    const int once = (int)((mask >> j) & 1);
    size_t k = j + 1;
    while (steps_end + k < end && (int)((mask >> k) & 1) == once)
        k++;
    *run_end = steps_end + k;
    if (*run_end == end && whole_rows_alike(pass, begin, end, mask, once)) {
        const size_t chunk_end = smaller(chunk_begin + pass->chunk, pass->total);
        const size_t rows_end = chunk_end - chunk_end % pass->row;
        *run_end = rows_end > end ? rows_end : end;
    }
    return once;
}
