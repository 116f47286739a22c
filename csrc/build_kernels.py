"""cffi build (API mode) of `pimloader._kernels`: the fused CPU kernels of csrc/cpu_kernels.c.

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is cut
from the `cffi-cdef-begin` / `cffi-cdef-end` blocks of the headers, so the struct layouts and
prototypes are written once, in C. In API mode every call into the module releases the GIL.
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")                           # host-only headers
SHARED_INCLUDE = os.path.join(os.path.dirname(HERE), "include")   # shared with dpu_src/
HEADERS = (os.path.join(SHARED_INCLUDE, "pim_params.h"), os.path.join(INCLUDE, "pim_extra.h"),
           os.path.join(INCLUDE, "pim_cpu.h"),  # order matters: pim_cpu.h uses the others' types
           os.path.join(INCLUDE, "pim_torch_sum.h"))

_BLOCK = re.compile(r"/\* cffi-cdef-begin.*?\*/(.*?)/\* cffi-cdef-end \*/", re.S)


def cdef_text() -> str:
    """The declarations of every header's cffi block, comments stripped."""
    parts = []
    for path in HEADERS:
        with open(path, encoding="utf-8") as f:
            blocks = _BLOCK.findall(f.read())
        if not blocks:
            raise RuntimeError(f"{path} has no cffi-cdef-begin/end block")
        parts.extend(blocks)
    text = "\n".join(parts)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _rel(path: str) -> str:
    # setuptools wants sources relative to the directory setup.py runs in
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "pimloader._kernels",
    '#include "pim_params.h"\n#include "pim_extra.h"\n#include "pim_cpu.h"\n'
    '#include "pim_torch_sum.h"\n',
    sources=[_rel(os.path.join(HERE, name)) for name in ("cpu_kernels.c", "cpu_colour.c",
                                                             "cpu_colour_avx2.c", "torch_sum.c",
                                                             "axis_tables.c", "axis_check.c")],
    include_dirs=[INCLUDE, SHARED_INCLUDE],
    depends=[os.path.join(SHARED_INCLUDE, h) for h in ("pim_params.h", "pim_resample.h")]
    + [os.path.join(INCLUDE, h) for h in ("pim_cpu.h", "pim_extra.h", "pim_cpu_colour.h",
                                            "pim_axis_check.h", "pim_torch_sum.h")],
    # -ffp-contract=off: the colour code's float32 and the axis tables' double products and
    # sums are rounded where they are written (torch's arithmetic); the colour code's fused
    # multiply-adds are explicit fmaf calls
    extra_compile_args=["-std=gnu11", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-ffp-contract=off", "-fno-fast-math"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
