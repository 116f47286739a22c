"""cffi build (API mode) of `pimloader._kernels`: the fused CPU kernels of csrc/cpu_kernels.c.

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is cut
from the `cffi-cdef-begin` / `cffi-cdef-end` blocks of the headers (csrc/cffi_build.py), so the
struct layouts and prototypes are written once, in C. In API mode every call into the module
releases the GIL.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cffi_build import INCLUDE, SHARED_INCLUDE, compile_args, extension, sources  # noqa: E402

HEADERS = (os.path.join(SHARED_INCLUDE, "pim_params.h"), os.path.join(INCLUDE, "pim_extra.h"),
           os.path.join(INCLUDE, "pim_cpu.h"),  # order matters: pim_cpu.h uses the others' types
           os.path.join(INCLUDE, "pim_torch_sum.h"), os.path.join(INCLUDE, "pim_torch_loops.h"))

ffibuilder = extension(
    "pimloader._kernels", HEADERS,
    sources=sources("cpu_kernels.c", "cpu_checks.c", "cpu_colour.c", "cpu_colour_avx2.c",
                    "cpu_emit_avx2.c", "cpu_emit_vbmi.c", "cpu_hpass_vbmi.c", "torch_sum.c",
                    "torch_loops.c", "axis_tables.c", "axis_check.c"),
    include_dirs=[INCLUDE, SHARED_INCLUDE],
    depends=[os.path.join(SHARED_INCLUDE, "pim_resample.h")]
    + [os.path.join(INCLUDE, h)
       for h in ("pim_cpu_checks.h", "pim_cpu_colour.h", "pim_cpu_emit.h",
                 "pim_axis_check.h")],
    # -ffp-contract=off: the colour code's float32 and the axis tables' double products and
    # sums are rounded where they are written (torch's arithmetic); the colour code's fused
    # multiply-adds are explicit fmaf calls
    extra_compile_args=compile_args("-O3", "-ffp-contract=off", "-fno-fast-math"),
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
