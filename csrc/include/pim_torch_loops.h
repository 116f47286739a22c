/* pim_torch_loops.h: which values torch's CPU elementwise loops round once, so that the
 * colour code rounds each multiply-add `x.add_(y, alpha=k)` where torch does
 * (csrc/torch_loops.c).
 *
 * torch runs such an op as a loop over the tensor's values in memory order, cut into
 * chunks, one per thread (at::parallel_for: below GRAIN values or with one thread, one
 * chunk; else min(threads, ceil(n / GRAIN)) equal chunks, the last shorter), and within a
 * chunk into rows where one operand cannot be walked with the others (a broadcast over the
 * channels of a channels-last image: rows of 3). Each piece (a row within a chunk) is done
 * in steps of two vectors, whose multiply-adds round once where the CPU has FMA, then the
 * values past the last whole step (the tail) by scalar code, which the compiler may or may
 * not have fused, differently for the first of them, the next 4 or 8, and the last: what
 * it did is asked of torch itself (pimloader/backends/torch_loops.py) and told here as a
 * mask per tail length, for the two kinds of loop colour needs. */
#ifndef PIM_TORCH_LOOPS_H
#define PIM_TORCH_LOOPS_H

#include <stddef.h>
#include <stdint.h>

/* cffi-cdef-begin */
#define PIM_TORCH_BROADCAST 0   /* y is one value (contrast's mean) */
#define PIM_TORCH_ELEMENTWISE 1 /* y is a tensor walked with x (the gray image) */
#define PIM_TORCH_MAX_BLOCK 64

/* How this torch build's loops round, per kind: blocks[kind] values a step, and bit j of
 * tails[kind * PIM_TORCH_MAX_BLOCK + t] set where value j of a tail of t values rounds
 * once. Process-wide; until told, every value rounds as the vectors do. */
void pim_torch_loops_set(const uint32_t *blocks, const uint64_t *tails);
/* cffi-cdef-end */

/* One such op over `total` values. */
typedef struct pim_torch_pass {
    uint32_t kind;   /* PIM_TORCH_* */
    int fused;       /* 0: no value rounds once (no FMA, or torchvision v1's expressions) */
    size_t total;    /* values of the op, in torch's memory order */
    size_t row;      /* values of a row */
    size_t chunk;    /* values of a thread's chunk */
} pim_torch_pass_t;

pim_torch_pass_t pim_torch_pass(uint32_t kind, int fused, size_t total, size_t row,
                                uint32_t threads);

/* Whether value `index` (< total) rounds once; *run_end: the end of the run of values from
 * `index` that round alike. */
int pim_torch_rounds_once(const pim_torch_pass_t *pass, size_t index, size_t *run_end);

#endif /* PIM_TORCH_LOOPS_H */
