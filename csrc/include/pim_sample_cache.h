/* pim_sample_cache.h: the lock-free table of the encoded-sample cache
 * (pimloader/datasets/cache.py; docs/loader.md "Encoded-sample cache").
 *
 * The table lives in shared memory, mapped by the loader's main process and every worker:
 * one entry (offset, length) per dataset index, and a fill pointer (bytes of the data
 * segment handed out so far). Every step is one atomic operation, so no process ever waits
 * for another: a process killed (SIGKILL) at any instruction cannot leave anything held.
 * An entry goes FREE -> BEING_WRITTEN (claimed, space reserved) -> its length (published
 * once the bytes are written); a claim that finds no room goes back to FREE. A process
 * killed between claim and publish leaves its entry BEING_WRITTEN for good: that sample is
 * never cached (a miss every epoch) and its reserved bytes are never reused. */
#ifndef PIM_SAMPLE_CACHE_H
#define PIM_SAMPLE_CACHE_H

#include <stdint.h>

/* cffi-cdef-begin */
#define PIM_CACHE_FREE -1
#define PIM_CACHE_BEING_WRITTEN -2

/* One dataset index's entry; `length` is a byte count once published, else FREE or
 * BEING_WRITTEN. The table is an array of these, one per dataset index. */
typedef struct {
    int64_t offset;
    int64_t length;
} pim_cache_entry;

/* Claim `entry` (if FREE) and reserve `length` bytes of the `budget` for it (if they fit in
 * what `fill` leaves): the offset of those bytes, or -1 when the entry was not FREE or the
 * bytes do not fit (the entry is then FREE again). */
int64_t pim_cache_claim(pim_cache_entry *entry, int64_t *fill, int64_t length, int64_t budget);

/* Make a claimed entry visible, after the last of its bytes is written. */
void pim_cache_publish(pim_cache_entry *entry, int64_t length);

/* The published length of `entry` (its offset in *offset), or a negative state (FREE,
 * BEING_WRITTEN) when there is nothing to read. */
int64_t pim_cache_lookup(const pim_cache_entry *entry, int64_t *offset);

/* The bytes handed out so far. */
int64_t pim_cache_filled(const int64_t *fill);
/* cffi-cdef-end */

#endif /* PIM_SAMPLE_CACHE_H */
