/* pimloader DPU emulator: UPMEM's mutex.h (MUTEX_INIT, mutex_lock, mutex_trylock,
 * mutex_unlock).  A mutex is one byte of the DPU's WRAM, as the hardware's atomic bit. */
#ifndef DPUSYSCORE_MUTEX_H
#define DPUSYSCORE_MUTEX_H

#include <stdint.h>
#include <stdbool.h>
#include <sysdef.h>
#include <dpuemu_rt.h>

typedef uint8_t *mutex_id_t;

#define MUTEX_GET(_name) _name
#define MUTEX_INIT(_name)                                                                                \
    uint8_t __dpuemu_mutex_##_name = 0;                                                                  \
    const mutex_id_t MUTEX_GET(_name) = &__dpuemu_mutex_##_name

static inline void mutex_lock(mutex_id_t mutex)
{
    __dpuemu_ops->mutex_lock(mutex);
}

static inline bool mutex_trylock(mutex_id_t mutex)
{
    return __dpuemu_ops->mutex_trylock(mutex);
}

static inline void mutex_unlock(mutex_id_t mutex)
{
    __dpuemu_ops->mutex_unlock(mutex);
}

#endif /* DPUSYSCORE_MUTEX_H */
