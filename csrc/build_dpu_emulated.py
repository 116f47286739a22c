"""cffi build (API mode) of `pimloader._dpu_emulated`: the DPU host driver (csrc/dpu_driver.c,
with its planning, csrc/dpu_plan.c, and csrc/axis_check.c) compiled against pimloader's libdpu
emulator (csrc/emulator/, `emulator_build_args()`). The plan (pim_dpu_plan.h) needs no DPU:
the cost model calls it through this module.

The driver source is the one that builds against UPMEM's real libdpu (csrc/build_dpu_upmem.py);
here `PIM_DPU_EMULATED` only adds the emulator's optional hooks (DMA counters, fault details).
The cdef is cut from the `cffi-cdef-begin` / `cffi-cdef-end` blocks of the headers.
setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob.
"""
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from build_dpuemu import emulator_build_args  # noqa: E402
from build_kernels import INCLUDE, SHARED_INCLUDE, _BLOCK, _rel  # noqa: E402

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
INCLUDES = "".join(f'#include "{os.path.basename(h)}"\n' for h in HEADERS)


def driver_cdef() -> str:
    import re
    parts = []
    for path in HEADERS:
        with open(path, encoding="utf-8") as f:
            blocks = _BLOCK.findall(f.read())
        if not blocks:
            raise RuntimeError(f"{path} has no cffi-cdef-begin/end block")
        parts.extend(blocks)
    return re.sub(r"/\*.*?\*/", "", "\n".join(parts), flags=re.S) + INLINE_CDEF


def driver_source_args() -> dict:
    """What both driver builds share: the source, include dirs and headers."""
    return dict(sources=[_rel(os.path.join(HERE, name)) for name in SOURCES],
                include_dirs=[INCLUDE, SHARED_INCLUDE],
                depends=list(HEADERS) + [os.path.join(INCLUDE, h) for h in ("pim_axis_check.h", "pim_dpu_chunk.h", "pim_error.h", "pim_dpu_driver_state.h")]
                + [os.path.join(SHARED_INCLUDE, "pim_resample.h")])


ffibuilder = FFI()
ffibuilder.cdef(driver_cdef())
_args = emulator_build_args()
_own = driver_source_args()
ffibuilder.set_source(
    "pimloader._dpu_emulated",
    INCLUDES,
    sources=_own["sources"] + _args["sources"],
    include_dirs=_own["include_dirs"] + _args["include_dirs"],
    libraries=_args["libraries"],
    extra_compile_args=_args["extra_compile_args"] + ["-DPIM_DPU_EMULATED=1"],
    depends=_own["depends"] + _args["depends"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
