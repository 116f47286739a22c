/* The DPU host driver's state (host only, not part of its API): the DPU set, its ranks, and
 * the host staging of the batches in flight. Shared by csrc/dpu_driver.c (the libdpu jobs)
 * and csrc/dpu_emulator_hooks.c (what tests read from the emulator build). */
#ifndef PIM_DPU_DRIVER_STATE_H
#define PIM_DPU_DRIVER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <dpu.h>

#include "pim_dpu_chunk.h"
#include "pim_dpu_driver.h"
#include "pim_dpu_layout.h"

typedef struct gather_info { /* where a sample's rows go in the output batch */
    uint64_t dst_offset, out_bytes;
    uint32_t nrows, row_bytes, pitch;
} gather_info_t;

enum { SLOT_FREE, SLOT_QUEUED, SLOT_DRAINED };

/* Host staging of one batch in flight: what libdpu's queued jobs read and write until a
 * dpu_sync has returned, so it lives until the batch is waited or cancelled. */
typedef struct batch_slot {
    int state;               /* SLOT_FREE, SLOT_QUEUED (jobs may be queued), SLOT_DRAINED (they ran or were dropped) */
    uint32_t batch_id;
    uint64_t seq;            /* submit order */
    uint32_t n, active;
    uint64_t xfer, out_xfer;
    pim_dpu_chunk_t *chunks;    /* per active DPU */
    gather_info_t *gathers;  /* per sample */
    pim_dpu_header_t *headers; /* per DPU */
    uint8_t *in, *out;       /* active x xfer, active x out_xfer */
    size_t chunks_cap, gathers_cap, in_cap, out_cap;
    uint8_t *rank_done;      /* per rank: the callback queued behind this batch's jobs ran */
    uint8_t *dst;            /* the output batch (the caller keeps it until wait/cancel) */
    /* the outcome, set when the batch's jobs have run (drain) */
    int rc;
    int32_t dpu;
    char msg[1024];
} batch_slot_t;

struct pim_dpu_driver {
    struct dpu_set_t set;
    uint32_t nr_dpus;
    uint32_t nr_tasklets;
    uint32_t arena;
    uint32_t batch_id;
    int32_t last_dpu;
    pim_dpu_run_info_t info;
    struct dpu_set_t *dpus;  /* each DPU as a one-DPU set, in DPU_FOREACH order */
    uint32_t nr_ranks;
    struct dpu_set_t *ranks; /* each rank as a one-rank set, in DPU_RANK_FOREACH order */
    uint32_t *rank_of;       /* DPU index -> rank index */
    char *binary;            /* the kernel, loaded again after a fault */
    const char *loaded;      /* the program the DPUs hold: binary, a stage's, NULL after a failed load */
    uint32_t loads;          /* dpu_load calls made */
    uint32_t loaded_heap;    /* DPU_MRAM_HEAP_POINTER of the loaded program (dpu_get_symbol) */
    uint32_t kernel_heap;    /* and of the kernel's: a stage's MRAM offsets count from the same place */
    char *profile;           /* for a new allocation after an asynchronous failure */
    uint32_t requested_dpus;
    bool lost;               /* the set could not be allocated again: every call fails */
    char lost_msg[400];
    /* A launch that faulted leaves the kernel's WRAM (its globals, and the state of its barriers
     * and mutexes: a barrier mid-round, a mutex still held by the tasklet that stopped) as the
     * fault found it; WRAM is not reset between launches, on hardware as on the emulator.
     * Launching that again would start with a barrier already partly counted (it releases the
     * tasklets early, then hangs or deadlocks a round later), so the next batch loads the
     * program again first (`recover`). And a failed asynchronous job leaves libdpu's rank
     * with a sticky error that only a new allocation clears (see recover()). */
    bool recover;
    dpu_error_t *rank_err;   /* first error dpu_sync returned per rank since the last recovery */
    uint32_t *rank_culprit;  /* batch whose job failed on the rank (0: none yet) */
    int32_t *rank_fault_dpu; /* the DPU found faulted there, -1 if none */
    uint32_t reloads, reallocs;
    uint32_t held;           /* PIM_DPU_DEBUG_HOLD: the ranks' queues wait while this is set */
    uint64_t seq;
    batch_slot_t slots[PIM_DPU_MAX_PENDING];
};

/* dpu_driver.c's pieces that csrc/dpu_stage.c uses too. */
void pim_dpu_error_text(dpu_error_t e, char *buf, size_t n);
/* The first DPU of drv->dpus[first .. first + count) that dpu_status reports faulted, or -1. */
int32_t pim_dpu_find_fault(const pim_dpu_driver_t *drv, uint32_t first, uint32_t count);
/* ": " and the emulator's account of DPU `dpu`'s fault into `detail` (dpu_emulator_hooks.c);
 * "" against UPMEM's SDK, or when there is none. */
void pim_dpu_fault_detail(const pim_dpu_driver_t *drv, int32_t dpu, char *detail, size_t n);
/* After a failure, before more jobs: the DPUs allocated again if a rank kept libdpu's error,
 * else the kernel loaded again (dpu_driver.c's `recover`). */
int pim_dpu_recover(pim_dpu_driver_t *drv, char *err, uint32_t err_len);
/* dpu_load of `binary` (kept as drv->loaded: the caller keeps the string alive), counted. */
int pim_dpu_load_program(pim_dpu_driver_t *drv, const char *binary, char *err, uint32_t err_len);

#endif /* PIM_DPU_DRIVER_STATE_H */
