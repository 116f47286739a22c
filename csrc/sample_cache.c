/* The encoded-sample cache's table, lock-free (csrc/include/pim_sample_cache.h).
 * The table is shared between processes, so its atomics must be address-free: lock-free
 * 8-byte atomics (x86-64, AArch64) are; a lock-based fallback in libatomic would not be. */
#include "pim_sample_cache.h"

_Static_assert(__atomic_always_lock_free(sizeof(int64_t), 0),
               "the sample cache's table needs lock-free 8-byte atomics");

static int64_t reserve(int64_t *fill, int64_t length, int64_t budget)
{
    int64_t start = __atomic_load_n(fill, __ATOMIC_RELAXED);
    do {
        if (length > budget - start)
            return -1;
    } while (!__atomic_compare_exchange_n(fill, &start, start + length, 1,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return start;
}

int64_t pim_cache_claim(pim_cache_entry *entry, int64_t *fill, int64_t length, int64_t budget)
{
    int64_t state = PIM_CACHE_FREE;
    if (!__atomic_compare_exchange_n(&entry->length, &state, PIM_CACHE_BEING_WRITTEN, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return -1;
    int64_t offset = reserve(fill, length, budget);
    if (offset < 0) {
        __atomic_store_n(&entry->length, PIM_CACHE_FREE, __ATOMIC_RELEASE);
        return -1;
    }
    entry->offset = offset;  /* read by others only after the release in pim_cache_publish */
    return offset;
}

void pim_cache_publish(pim_cache_entry *entry, int64_t length)
{
    /* release: the bytes and the offset written before are seen by whoever sees the length */
    __atomic_store_n(&entry->length, length, __ATOMIC_RELEASE);
}

int64_t pim_cache_lookup(const pim_cache_entry *entry, int64_t *offset)
{
    int64_t length = __atomic_load_n(&entry->length, __ATOMIC_ACQUIRE);
    if (length >= 0)
        *offset = entry->offset;
    return length;
}

int64_t pim_cache_filled(const int64_t *fill)
{
    return __atomic_load_n(fill, __ATOMIC_ACQUIRE);
}
