/* pimloader DPU emulator: UPMEM's sysdef.h. */
#ifndef DPUSYSCORE_SYSDEF_H
#define DPUSYSCORE_SYSDEF_H
typedef unsigned int thread_id_t;
typedef unsigned int sysname_t;
#endif
