/* pimloader DPU emulator: UPMEM's barrier.h.
 *
 * BARRIER_INIT(name, count) defines the barrier `name` for `count` tasklets;
 * barrier_wait(&name) blocks until `count` tasklets have reached it.  When the DPU faults,
 * tasklets waiting on a barrier stop instead of hanging. */
#ifndef DPUSYSCORE_BARRIER_H
#define DPUSYSCORE_BARRIER_H

#include <stdint.h>
#include <attributes.h>
#include <dpuemu_rt.h>

typedef struct barrier_t {
    uint8_t count;         /* tasklets still expected in the current round */
    uint8_t initial_count; /* tasklets per round */
    uint16_t generation;   /* rounds completed (emulator bookkeeping) */
} barrier_t;

#define BARRIER_INIT(_name, _counter)                                                                    \
    _Static_assert(((_counter) < 128) && ((_counter) >= -127), "barrier counter must be encoded on a byte"); \
    barrier_t _name = { (uint8_t)(_counter), (uint8_t)(_counter), 0 }

static inline void (barrier_wait)(barrier_t *barrier)
{
    __dpuemu_ops->barrier_wait(barrier, "?", 0);
}
#define barrier_wait(barrier) __dpuemu_ops->barrier_wait((barrier), __FILE__, __LINE__)

#endif /* DPUSYSCORE_BARRIER_H */
