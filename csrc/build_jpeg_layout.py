"""cffi build (API mode) of `pimloader._jpeg_layout`: the host's reading of a baseline JPEG's
structure and the packing of its restart intervals for the DPU decoder (csrc/jpeg_layout.c).

The cdef is cut from the `cffi-cdef-begin` / `cffi-cdef-end` blocks of include/pim_jpeg.h
(the chunk layout the DPU kernel reads) and csrc/include/pim_jpeg_layout.h, so the structs
are written once, in C. setup.py picks this file up through its `csrc/build_*.py:ffibuilder`
glob. No library beyond libc.
"""
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from build_kernels import INCLUDE, SHARED_INCLUDE, _BLOCK, _rel  # noqa: E402

HEADERS = (os.path.join(SHARED_INCLUDE, "pim_jpeg.h"), os.path.join(INCLUDE, "pim_jpeg_layout.h"))


def layout_cdef() -> str:
    import re
    parts = []
    for path in HEADERS:
        with open(path, encoding="utf-8") as f:
            blocks = _BLOCK.findall(f.read())
        if not blocks:
            raise RuntimeError(f"{path} has no cffi-cdef-begin/end block")
        parts.extend(blocks)
    return re.sub(r"/\*.*?\*/", "", "\n".join(parts), flags=re.S)


ffibuilder = FFI()
ffibuilder.cdef(layout_cdef())
ffibuilder.set_source(
    "pimloader._jpeg_layout",
    '#include "pim_jpeg.h"\n#include "pim_jpeg_layout.h"\n',
    sources=[_rel(os.path.join(HERE, "jpeg_layout.c"))],
    include_dirs=[SHARED_INCLUDE, INCLUDE],   # include/pim_jpeg.h, not csrc/include's
    depends=list(HEADERS),
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
