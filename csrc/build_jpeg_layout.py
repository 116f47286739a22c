"""cffi build (API mode) of `pimloader._jpeg_layout`: the host's reading of a baseline JPEG's
structure and the packing of its restart intervals for the DPU decoder (csrc/jpeg_layout.c).

The cdef is cut from the `cffi-cdef-begin` / `cffi-cdef-end` blocks of include/pim_jpeg.h
(the chunk layout the DPU kernel reads) and csrc/include/pim_jpeg_layout.h, so the structs
are written once, in C (csrc/cffi_build.py). setup.py picks this file up through its
`csrc/build_*.py:ffibuilder` glob. No library beyond libc.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cffi_build import INCLUDE, SHARED_INCLUDE, compile_args, extension, sources  # noqa: E402

ffibuilder = extension(
    "pimloader._jpeg_layout",
    (os.path.join(SHARED_INCLUDE, "pim_jpeg.h"), os.path.join(INCLUDE, "pim_jpeg_layout.h")),
    sources=sources("jpeg_layout.c"),
    include_dirs=[SHARED_INCLUDE, INCLUDE],   # include/pim_jpeg.h, not csrc/include's
    extra_compile_args=compile_args("-O2"),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
