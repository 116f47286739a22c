/* pimloader DPU emulator: UPMEM's defs.h (me(), halt()). */
#ifndef DPUSYSCORE_DEFS_H
#define DPUSYSCORE_DEFS_H

#include <sysdef.h>
#include <attributes.h>
#include <dpuemu_rt.h>

#if __STDC_VERSION__ >= 201112L
#define __ATTRIBUTE_NO_RETURN__ _Noreturn
#else
#define __ATTRIBUTE_NO_RETURN__
#endif

/* This tasklet's id, 0 .. NR_TASKLETS - 1. */
static inline sysname_t me(void)
{
    return __dpuemu_ops->me();
}

/* Stops the DPU in fault, as on hardware. */
__ATTRIBUTE_NO_RETURN__ static inline void (halt)(void)
{
    __dpuemu_ops->fault("halt", "halt() called", "?", 0);
}
#define halt() __dpuemu_ops->fault("halt", "halt() called", __FILE__, __LINE__)

#endif /* DPUSYSCORE_DEFS_H */
