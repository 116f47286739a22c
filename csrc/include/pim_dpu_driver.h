/* pim_dpu_driver.h: the host driver of the DPU backend (csrc/dpu_driver.c), written against
 * UPMEM's libdpu API (dpu.h) only. Built twice by cffi: against pimloader's emulator
 * (csrc/build_dpu_emulated.py -> pimloader._dpu_emulated) and, when the SDK is present,
 * against the real libdpu (csrc/build_dpu_upmem.py -> pimloader._dpu_upmem).
 *
 * One batch = the descriptors, axis tables and lookup table of pim_params.h (as
 * pimloader._kernels_api.pack_batch makes them for the CPU kernel) + per-sample source
 * pointers + the output batch. The driver plans the batch (pim_dpu_plan.h: contiguous runs
 * of samples over the DPUs balanced by estimated work), packs each DPU's chunk
 * (include/pim_dpu_layout.h, pim_dpu_chunk.h), pushes it, launches the kernel, gathers the
 * outputs and copies each into its slot.
 */
#ifndef PIM_DPU_DRIVER_H
#define PIM_DPU_DRIVER_H

#include <stdint.h>

#include "pim_params.h"

/* cffi-cdef-begin */
#define PIM_DPU_OK 0
#define PIM_DPU_E_ARG 1      /* invalid argument, or a sample the kernel cannot take */
#define PIM_DPU_E_LIBDPU 2   /* a libdpu call returned an error */
#define PIM_DPU_E_FAULT 3    /* a DPU faulted during the launch */
#define PIM_DPU_E_KERNEL 4   /* the kernel reported an error in its status block */
#define PIM_DPU_E_NOMEM 5    /* host memory */
#define PIM_DPU_E_BUSY 6     /* PIM_DPU_MAX_PENDING batches already in flight */

#define PIM_DPU_MAX_PENDING 2 /* batches in flight at once: double-buffered host staging */

#define PIM_DPU_DEBUG_CORRUPT 256 /* test hook: the driver corrupts the first descriptor sent to debug_dpu */
#define PIM_DPU_DEBUG_HOLD 512    /* test hook: the batch's jobs wait on every rank for pim_dpu_release_hold */

typedef struct pim_dpu_driver pim_dpu_driver_t;

/* Sources already in MRAM: a stage before the kernel (the JPEG decoder, pim_dpu_decode_stage)
 * left them there, on the DPU the batch's split gives their sample. On every DPU the sources
 * lie in [keep_from, keep_to): the chunk the host writes must end at or before keep_from
 * (it may overwrite what the stage before consumed, below it), and the outputs start at or
 * after keep_to. keep_to = 0: no sources in MRAM (extra_work alone). */
#define PIM_DPU_HOST_SOURCE 0xFFFFFFFFFFFFFFFFull /* offsets[i]: sample i's source is srcs[i] */
typedef struct pim_dpu_mram_sources {
    const uint64_t *offsets;    /* [n] sample i's source from DPU_MRAM_HEAP_POINTER, 8-byte aligned
                                   (its pim_sample_t says its size and row stride), or
                                   PIM_DPU_HOST_SOURCE */
    const uint64_t *extra_work; /* [n] estimated work of the stage before, weighed in the split
                                   (pim_dpu_plan_t.extra_work); NULL: none */
    uint64_t keep_from, keep_to;
} pim_dpu_mram_sources_t;

typedef struct pim_dpu_run_info {
    uint32_t active_dpus;     /* DPUs that got samples in the last run */
    uint32_t arena_bytes;     /* per-tasklet WRAM arena planned for */
    uint64_t xfer_bytes;      /* common host->DPU length per DPU (padded) */
    uint64_t out_xfer_bytes;  /* common DPU->host length per DPU (padded) */
    uint64_t in_real_bytes;   /* sum of the chunks' real input lengths */
    uint64_t out_real_bytes;  /* sum of the chunks' real output lengths */
} pim_dpu_run_info_t;

/* Allocates nr_dpus DPUs (0xFFFFFFFF = DPU_ALLOCATE_ALL) with `profile`, loads `binary` (a
 * kernel built from dpu_src/crop_resize.c with NR_TASKLETS = nr_tasklets and
 * STACK_SIZE_DEFAULT = stack_bytes). On failure returns a PIM_DPU_E_* code, *out = NULL
 * and a message in err; nothing stays allocated. */
int pim_dpu_open(const char *profile, uint32_t nr_dpus, const char *binary, uint32_t nr_tasklets,
                 uint32_t stack_bytes, pim_dpu_driver_t **out, char *err, uint32_t err_len);

/* Queues one batch and returns at once: checks and plans every sample, packs each DPU's chunk
 * into host staging (the sources, tables and lookup table are read here and may be released
 * when it returns; `dst` must stay valid until the batch is waited for or cancelled), then
 * queues on every rank, with libdpu's asynchronous calls, the transfer of the chunks, the
 * launch, the gather of the outputs into staging and a completion callback. samples / srcs /
 * src_bytes / tables / lut / dst as pim_cpu_crop_resize (pim_cpu.h); lut_bytes is the lookup
 * table's size (0 without one). `debug` (0 normally): PIM_DPU_DEBUG_HALT (pim_dpu_layout.h)
 * makes the kernel on DPU debug_dpu fault, PIM_DPU_DEBUG_CORRUPT corrupts the first descriptor
 * sent to it. On success *ticket names the batch (0: an empty batch, nothing to wait for).
 * Returns PIM_DPU_OK, or a PIM_DPU_E_* code with a message naming the call and the DPU
 * (pim_dpu_last_dpu); PIM_DPU_E_BUSY when PIM_DPU_MAX_PENDING batches are in flight. */
int pim_dpu_submit(pim_dpu_driver_t *drv, const pim_sample_t *samples, uint32_t n_samples,
                   const uint8_t *const *srcs, const uint64_t *src_bytes, const uint8_t *tables,
                   uint64_t tables_bytes, const void *lut, uint32_t lut_bytes, uint8_t *dst,
                   uint64_t dst_bytes, const pim_dpu_mram_sources_t *mram, uint32_t debug,
                   int32_t debug_dpu, uint32_t *ticket, char *err, uint32_t err_len);

/* What pim_dpu_submit with these samples and `mram` (NULL: every source from the host) will
 * plan, without libdpu: the first sample of each DPU (first[nr_dpus + 1]; DPUs past the
 * returned count get none) and the bytes of each DPU's chunk as the host writes it
 * (chunk_bytes[nr_dpus], 0 for DPUs without samples), so that a stage before can lay out its
 * own MRAM around the chunk. Returns the DPUs with samples, or -1 with a message in err. */
int32_t pim_dpu_plan_chunks(const pim_sample_t *samples, uint32_t n_samples, const uint8_t *tables,
                            uint64_t tables_bytes, uint32_t lut_bytes, const pim_dpu_mram_sources_t *mram,
                            uint32_t nr_dpus, uint32_t nr_tasklets, uint32_t arena_bytes, uint32_t *first,
                            uint64_t *chunk_bytes, char *err, uint32_t err_len);

/* A synchronous stage before the kernel, on the same DPUs (csrc/dpu_stage.c): loads `binary`
 * (dpu_load; the kernel is loaded again by the next submit), pushes chunks[d] (xfer bytes
 * each, d = 0..nr_dpus-1) to DPU d's MRAM at DPU_MRAM_HEAP_POINTER, launches and waits, then
 * gathers status_bytes from status_off of each DPU into statuses[d] (all 8-byte multiples).
 * No batch may be in flight (PIM_DPU_E_BUSY). A fault is PIM_DPU_E_FAULT naming the DPU
 * (pim_dpu_last_dpu); the statuses are the caller's to read. */
int pim_dpu_run_stage(pim_dpu_driver_t *drv, const char *binary, const uint8_t *chunks, uint64_t xfer,
                      uint64_t status_off, uint64_t status_bytes, uint8_t *statuses, char *err,
                      uint32_t err_len);

/* dpu_load calls the driver made since it was opened (the kernel's first load included). */
uint32_t pim_dpu_loads(const pim_dpu_driver_t *drv);

/* Waits for batch `ticket`: dpu_sync on every rank (which also completes any batch queued
 * after it: libdpu's dpu_sync waits for everything queued on a rank), checks that its jobs ran
 * on every rank and each DPU's status, and copies the outputs into its output batch. Errors of
 * the asynchronous jobs (a DPU fault, a failed transfer) are reported here, naming the call
 * and the DPU; a batch queued behind a failed one on the same rank is reported as not run.
 * The batch is no longer in flight afterwards, whatever the outcome. */
int pim_dpu_wait(pim_dpu_driver_t *drv, uint32_t ticket, char *err, uint32_t err_len);

/* Drops batch `ticket`: its queued jobs are run out (libdpu cannot take back a queued job or
 * stop a launch), its outputs are not copied. PIM_DPU_E_ARG if it is not in flight. */
int pim_dpu_cancel(pim_dpu_driver_t *drv, uint32_t ticket);

/* Batches in flight (submitted, not yet waited for or cancelled). */
uint32_t pim_dpu_pending(const pim_dpu_driver_t *drv);

/* Test hook: lets the ranks run the jobs a submit with PIM_DPU_DEBUG_HOLD queued behind a
 * waiting callback (pim_dpu_close releases them too). */
void pim_dpu_release_hold(pim_dpu_driver_t *drv);

/* How often the driver loaded the program again after a fault (reloads) and allocated the
 * DPUs again after libdpu kept a failed asynchronous job's error on a rank (reallocs). */
void pim_dpu_recoveries(const pim_dpu_driver_t *drv, uint32_t *reloads, uint32_t *reallocs);

/* submit + wait. */
int pim_dpu_run(pim_dpu_driver_t *drv, const pim_sample_t *samples, uint32_t n_samples,
                const uint8_t *const *srcs, const uint64_t *src_bytes, const uint8_t *tables,
                uint64_t tables_bytes, const void *lut, uint32_t lut_bytes, uint8_t *dst,
                uint64_t dst_bytes, const pim_dpu_mram_sources_t *mram, uint32_t debug,
                int32_t debug_dpu, char *err, uint32_t err_len);

uint32_t pim_dpu_nr_dpus(const pim_dpu_driver_t *drv);
int32_t pim_dpu_last_dpu(const pim_dpu_driver_t *drv); /* DPU the last error was about, -1: none */
void pim_dpu_run_info(const pim_dpu_driver_t *drv, pim_dpu_run_info_t *info); /* of the last submit */

/* Runs out the batches in flight (their outputs are dropped), then frees the DPUs and the
 * driver (NULL is fine). Returns 0, or a PIM_DPU_E_* code. */
int pim_dpu_close(pim_dpu_driver_t *drv, char *err, uint32_t err_len);

/* Optional emulator hook (not part of libdpu): 1 when built against pimloader's emulator. */
int pim_dpu_emulated(void);
/* Emulator only: DMA counters of DPU `index` (0xFFFFFFFF: the whole set) since the last
 * reset, into values[10]: mram_read_calls, mram_read_bytes, mram_write_calls,
 * mram_write_bytes, host_to_dpu_bytes, dpu_to_host_bytes, launches, dma_cycles_model,
 * wram_static_bytes, wram_heap_peak. Returns 0, or -1 when not emulated / bad index. */
int pim_dpu_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values);
int pim_dpu_reset_counters(pim_dpu_driver_t *drv);
/* Emulator only: per tasklet of DPU `index`, mram_read calls, read bytes, mram_write calls,
 * write bytes (4 values per tasklet, nr_tasklets tasklets) since the last reset. */
int pim_dpu_tasklet_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values);
/* Emulator only: DPUs this process has allocated and not freed, or -1 when not emulated. */
int64_t pim_dpu_emulator_live_dpus(void);
/* cffi-cdef-end */

#endif /* PIM_DPU_DRIVER_H */
