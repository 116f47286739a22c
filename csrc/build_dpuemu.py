"""cffi build (API mode) of `pimloader._dpuemu`: pimloader's libdpu emulator (csrc/emulator/).

The module exposes the host API of UPMEM's dpu.h as the emulator implements it, plus the
emulator-only calls of dpu_emulator.h (counters, fault messages), so that Python can drive
emulated DPUs directly (tests, counters for the cost model).  A C host driver built "against
the emulator" compiles csrc/emulator/dpuemu.c into its own module with
`include_dirs=[EMULATOR_INCLUDE]` instead of linking libdpu; `emulator_build_args()` gives
the arguments.  DPU kernels are built separately, by pimloader.backends.dpu.emulator.compile_kernel.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cffi_build import compile_args, extension, rel  # noqa: E402

EMULATOR = os.path.join(HERE, "emulator")
EMULATOR_INCLUDE = os.path.join(EMULATOR, "include")      # host side: dpu.h & co.
EMULATOR_SOURCE = os.path.join(EMULATOR, "dpuemu.c")

CDEF = """
typedef enum dpu_error_t {
    DPU_OK, DPU_ERR_INTERNAL, DPU_ERR_SYSTEM, DPU_ERR_DRIVER, DPU_ERR_ALLOCATION, DPU_ERR_INVALID_DPU_SET,
    DPU_ERR_INVALID_THREAD_ID, DPU_ERR_INVALID_NOTIFY_ID, DPU_ERR_INVALID_WRAM_ACCESS, DPU_ERR_INVALID_IRAM_ACCESS,
    DPU_ERR_INVALID_MRAM_ACCESS, DPU_ERR_INVALID_SYMBOL_ACCESS, DPU_ERR_MRAM_BUSY, DPU_ERR_TRANSFER_ALREADY_SET,
    DPU_ERR_NO_PROGRAM_LOADED, DPU_ERR_DIFFERENT_DPU_PROGRAMS, DPU_ERR_CORRUPTED_MEMORY, DPU_ERR_DPU_DISABLED,
    DPU_ERR_DPU_ALREADY_RUNNING, DPU_ERR_INVALID_MEMORY_TRANSFER, DPU_ERR_INVALID_LAUNCH_POLICY, DPU_ERR_DPU_FAULT,
    DPU_ERR_ELF_INVALID_FILE, DPU_ERR_ELF_NO_SUCH_FILE, DPU_ERR_ELF_NO_SUCH_SECTION, DPU_ERR_TIMEOUT,
    DPU_ERR_INVALID_PROFILE, DPU_ERR_UNKNOWN_SYMBOL, ...
} dpu_error_t;
typedef enum { DPU_SET_RANKS, DPU_SET_DPU } dpu_set_kind_t;
typedef enum { DPU_ASYNCHRONOUS, DPU_SYNCHRONOUS } dpu_launch_policy_t;
typedef enum { DPU_XFER_TO_DPU, DPU_XFER_FROM_DPU } dpu_xfer_t;
typedef enum { DPU_XFER_DEFAULT = 0, DPU_XFER_NO_RESET = 1, DPU_XFER_ASYNC = 2 } dpu_xfer_flags_t;
#define DPU_ALLOCATE_ALL ...
#define DPUEMU_MAX_TASKLETS ...
#define DPUEMU_MRAM_SIZE ...
#define DPUEMU_WRAM_SIZE ...

struct dpu_rank_t;
struct dpu_t;
struct dpu_program_t;
struct dpu_set_t {
    dpu_set_kind_t kind;
    union {
        struct { uint32_t nr_ranks; struct dpu_rank_t **ranks; } list;
        struct dpu_t *dpu;
    };
};
struct dpu_symbol_t { uint32_t address; uint32_t size; };

const char *dpu_error_to_string(dpu_error_t status);
dpu_error_t dpu_alloc(uint32_t nr_dpus, const char *profile, struct dpu_set_t *dpu_set);
dpu_error_t dpu_alloc_ranks(uint32_t nr_ranks, const char *profile, struct dpu_set_t *dpu_set);
dpu_error_t dpu_free(struct dpu_set_t dpu_set);
dpu_error_t dpu_get_nr_ranks(struct dpu_set_t dpu_set, uint32_t *nr_ranks);
dpu_error_t dpu_get_nr_dpus(struct dpu_set_t dpu_set, uint32_t *nr_dpus);
dpu_error_t dpu_load(struct dpu_set_t dpu_set, const char *binary_path, struct dpu_program_t **program);
dpu_error_t dpu_get_symbol(struct dpu_program_t *program, const char *symbol_name, struct dpu_symbol_t *symbol);
dpu_error_t dpu_launch(struct dpu_set_t dpu_set, dpu_launch_policy_t policy);
dpu_error_t dpu_status(struct dpu_set_t dpu_set, bool *done, bool *fault);
dpu_error_t dpu_sync(struct dpu_set_t dpu_set);
dpu_error_t dpu_copy_to(struct dpu_set_t dpu_set, const char *symbol_name, uint32_t symbol_offset, const void *src, size_t length);
dpu_error_t dpu_copy_from(struct dpu_set_t dpu_set, const char *symbol_name, uint32_t symbol_offset, void *dst, size_t length);
dpu_error_t dpu_prepare_xfer(struct dpu_set_t dpu_set, void *buffer);
dpu_error_t dpu_push_xfer(struct dpu_set_t dpu_set, dpu_xfer_t xfer, const char *symbol_name, uint32_t symbol_offset,
                          size_t length, dpu_xfer_flags_t flags);
dpu_error_t dpu_broadcast_to(struct dpu_set_t dpu_set, const char *symbol_name, uint32_t symbol_offset, const void *src,
                             size_t length, dpu_xfer_flags_t flags);
dpu_error_t dpu_log_read(struct dpu_set_t set, FILE *stream);

struct dpuemu_tasklet_counters {
    uint64_t mram_read_calls; uint64_t mram_read_bytes; uint64_t mram_write_calls; uint64_t mram_write_bytes;
};
struct dpuemu_counters {
    uint32_t nr_dpus; uint32_t nr_tasklets; uint64_t launches;
    uint64_t mram_read_calls; uint64_t mram_read_bytes; uint64_t mram_write_calls; uint64_t mram_write_bytes;
    uint64_t host_to_dpu_bytes; uint64_t dpu_to_host_bytes; uint64_t host_to_dpu_calls; uint64_t dpu_to_host_calls;
    uint64_t dma_cycles_model; uint32_t wram_static_bytes; uint32_t wram_heap_peak;
    struct dpuemu_tasklet_counters tasklet[24];
};
dpu_error_t dpuemu_get_counters(struct dpu_set_t dpu_set, struct dpuemu_counters *counters);
dpu_error_t dpuemu_reset_counters(struct dpu_set_t dpu_set);
dpu_error_t dpuemu_fault_message(struct dpu_set_t dpu_set, char *buffer, size_t size);
dpu_error_t dpuemu_get_dpu(struct dpu_set_t dpu_set, uint32_t index, struct dpu_set_t *dpu);
dpu_error_t dpuemu_program_info(struct dpu_set_t dpu_set, uint32_t *nr_tasklets, uint32_t *wram_globals_bytes,
                                uint32_t *stack_bytes_per_tasklet);
dpu_error_t dpuemu_wait_idle(struct dpu_set_t dpu_set);
dpu_error_t dpuemu_nr_running(struct dpu_set_t dpu_set, uint32_t *nr_running);
dpu_error_t dpuemu_queued_jobs(struct dpu_set_t dpu_set, uint32_t *nr_jobs);
dpu_error_t dpuemu_hold_launches(struct dpu_set_t dpu_set, bool hold);
dpu_error_t dpuemu_live_dpus(uint32_t *nr_dpus);

/* dpu_log_read into memory (a FILE from open_memstream) */
FILE *open_memstream(char **ptr, size_t *sizeloc);
int fclose(FILE *stream);
void free(void *ptr);
"""


def emulator_build_args() -> dict:
    """Keyword arguments of `ffibuilder.set_source` that build a host driver against the emulator."""
    return dict(sources=[rel(EMULATOR_SOURCE)], include_dirs=[EMULATOR_INCLUDE], libraries=["dl", "pthread"],
                extra_compile_args=compile_args("-O2", "-pthread"),
                depends=[os.path.join(EMULATOR_INCLUDE, h) for h in
                         ("dpu.h", "dpu_types.h", "dpu_error.h", "dpu_macro_utils.h", "dpu_emulator.h")]
                + [os.path.join(EMULATOR, "dpu_include", "dpuemu_rt.h")])


# the cdef above is the emulator's dpu.h as Python needs it, not a header's cffi block
ffibuilder = extension(
    "pimloader._dpuemu", (), cdef_extra=CDEF,
    preamble="#include <stdio.h>\n#include <stdlib.h>\n#include <dpu.h>\n#include <dpu_emulator.h>\n",
    **emulator_build_args(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
