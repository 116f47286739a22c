"""cffi build (API mode) of `pimloader._dpu_emulated`: the DPU host driver (csrc/dpu_driver.c,
with its planning, csrc/dpu_plan.c, and csrc/axis_check.c) compiled against pimloader's libdpu
emulator (csrc/emulator/, `emulator_build_args()`). The plan (pim_dpu_plan.h) needs no DPU:
the cost model calls it through this module.

The driver source is the one that builds against UPMEM's real libdpu (csrc/build_dpu_upmem.py,
which takes `driver_extension` from here); here `PIM_DPU_EMULATED` only adds the emulator's
optional hooks (DMA counters, fault details). The cdef is cut from the `cffi-cdef-begin` /
`cffi-cdef-end` blocks of the headers (csrc/cffi_build.py). setup.py picks this file up through
its `csrc/build_*.py:ffibuilder` glob.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_dpuemu import emulator_build_args  # noqa: E402
from cffi_build import INCLUDE, SHARED_INCLUDE, extension, sources  # noqa: E402

HEADERS = (os.path.join(SHARED_INCLUDE, "pim_params.h"), os.path.join(SHARED_INCLUDE, "pim_dpu_layout.h"),
           os.path.join(INCLUDE, "pim_dpu_plan.h"), os.path.join(INCLUDE, "pim_dpu_driver.h"))
SOURCES = ("dpu_driver.c", "dpu_stage.c", "dpu_emulator_hooks.c", "dpu_plan.c", "dpu_chunk.c", "axis_check.c")
# pim_dpu_layout.h's static inline functions, reached from Python (the cost model) as they are:
# in API mode cffi compiles a call to each, so a signature that drifts fails the build
INLINE_CDEF = """
uint32_t pim_dpu_arena_bytes(uint32_t nr_tasklets, uint32_t stack_bytes);
uint32_t pim_dpu_sample_wram(uint32_t w, uint32_t channels, uint32_t esize, uint32_t taps_x, uint32_t taps_y,
                             uint32_t src_buf, uint32_t ring_rows);
"""


def driver_extension(module: str, *, extra_sources=(), include_dirs=(), depends=(), **kwargs):
    """The FFI builder of the driver as `module`: what both driver builds share (the cdef, the
    sources, include dirs and headers), then what the libdpu at hand adds."""
    return extension(
        module, HEADERS, cdef_extra=INLINE_CDEF,
        sources=sources(*SOURCES) + list(extra_sources),
        include_dirs=[INCLUDE, SHARED_INCLUDE, *include_dirs],
        depends=[os.path.join(INCLUDE, h) for h in ("pim_axis_check.h", "pim_dpu_chunk.h", "pim_error.h",
                                                    "pim_dpu_driver_state.h")]
        + [os.path.join(SHARED_INCLUDE, "pim_resample.h"), *depends],
        **kwargs)


_emulator = emulator_build_args()
ffibuilder = driver_extension(
    "pimloader._dpu_emulated",
    extra_sources=_emulator["sources"],
    include_dirs=_emulator["include_dirs"],
    libraries=_emulator["libraries"],
    extra_compile_args=_emulator["extra_compile_args"] + ["-DPIM_DPU_EMULATED=1"],
    depends=_emulator["depends"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
