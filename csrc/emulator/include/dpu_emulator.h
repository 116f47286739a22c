/* pimloader libdpu emulator: emulator-only extensions to dpu.h (not part of UPMEM's API).
 * A driver that must also build against the real SDK guards their use with
 * `#ifdef PIMLOADER_DPU_EMULATOR`. */
#ifndef PIMLOADER_DPU_EMULATOR_H
#define PIMLOADER_DPU_EMULATOR_H

#include <dpu.h>

#define PIMLOADER_DPU_EMULATOR 1
#define DPUEMU_MAX_TASKLETS 24
#define DPUEMU_MRAM_SIZE (64u << 20)
#define DPUEMU_WRAM_SIZE (64u << 10)

struct dpuemu_tasklet_counters {
    uint64_t mram_read_calls;  /* mram_read (ldma) calls by this tasklet */
    uint64_t mram_read_bytes;
    uint64_t mram_write_calls; /* mram_write (sdma) calls */
    uint64_t mram_write_bytes;
};

struct dpuemu_counters {
    uint32_t nr_dpus;          /* DPUs summed into this record */
    uint32_t nr_tasklets;      /* NR_TASKLETS of the loaded kernel (max over the DPUs) */
    uint64_t launches;         /* dpu_launch boots, summed over DPUs */
    uint64_t mram_read_calls;  /* sums of the per-tasklet records */
    uint64_t mram_read_bytes;
    uint64_t mram_write_calls;
    uint64_t mram_write_bytes;
    uint64_t host_to_dpu_bytes; /* dpu_copy_to, dpu_push_xfer(TO), dpu_broadcast_to: bytes landing on each DPU */
    uint64_t dpu_to_host_bytes; /* dpu_copy_from, dpu_push_xfer(FROM) */
    uint64_t host_to_dpu_calls; /* transfers, one per DPU reached */
    uint64_t dpu_to_host_calls;
    uint64_t dma_cycles_model;  /* what perfcounter COUNT_CYCLES counts (see README) */
    uint32_t wram_static_bytes; /* globals + NR_TASKLETS stacks as laid out at load (max over DPUs) */
    uint32_t wram_heap_peak;    /* highest mem_alloc heap end seen, in bytes of WRAM (max over DPUs) */
    struct dpuemu_tasklet_counters tasklet[DPUEMU_MAX_TASKLETS];
};

/* Sum of the counters of every DPU of the set, since load or the last reset. */
dpu_error_t dpuemu_get_counters(struct dpu_set_t dpu_set, struct dpuemu_counters *counters);
dpu_error_t dpuemu_reset_counters(struct dpu_set_t dpu_set);

/* The message of the fault of one DPU set's first faulted DPU ("" when none): the rule, the
 * DPU, the tasklet and the kernel source line.  Writes at most `size` bytes, NUL included. */
dpu_error_t dpuemu_fault_message(struct dpu_set_t dpu_set, char *buffer, size_t size);

/* The index-th DPU of a set (the order of DPU_FOREACH), as a one-DPU set. */
dpu_error_t dpuemu_get_dpu(struct dpu_set_t dpu_set, uint32_t index, struct dpu_set_t *dpu);

/* NR_TASKLETS and the WRAM use of the program loaded on the set's first DPU. */
dpu_error_t dpuemu_program_info(struct dpu_set_t dpu_set, uint32_t *nr_tasklets, uint32_t *wram_globals_bytes,
    uint32_t *stack_bytes_per_tasklet);

/* Waits until the job queues of the set's ranks have run out, without consuming a failed
 * job's error (dpu_sync would); for tests. */
dpu_error_t dpuemu_wait_idle(struct dpu_set_t dpu_set);

/* DPUs of the set running now, and jobs reserved, queued or running on its ranks: a
 * snapshot, without waiting (tests of what overlaps). */
dpu_error_t dpuemu_nr_running(struct dpu_set_t dpu_set, uint32_t *nr_running);
dpu_error_t dpuemu_queued_jobs(struct dpu_set_t dpu_set, uint32_t *nr_jobs);

/* Test hook: while held, the DPUs a launch on the set's ranks boots count as running but do
 * not start (the launch job cannot end); releasing lets them run. Tests of what a queue does
 * behind a launch that has certainly not ended, without guessing how long a kernel runs. */
dpu_error_t dpuemu_hold_launches(struct dpu_set_t dpu_set, bool hold);

/* DPUs this process has allocated and not freed: tests that a loader frees its DPU sets. */
dpu_error_t dpuemu_live_dpus(uint32_t *nr_dpus);

#endif /* PIMLOADER_DPU_EMULATOR_H */
