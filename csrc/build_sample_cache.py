"""cffi build (API mode) of `pimloader._sample_cache`: the lock-free table of the
encoded-sample cache (csrc/sample_cache.c; pimloader/datasets/cache.py).

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is the
`cffi-cdef-begin` / `cffi-cdef-end` block of csrc/include/pim_sample_cache.h (csrc/cffi_build.py).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cffi_build import INCLUDE, compile_args, extension, sources  # noqa: E402

ffibuilder = extension(
    "pimloader._sample_cache", [os.path.join(INCLUDE, "pim_sample_cache.h")],
    sources=sources("sample_cache.c"),
    include_dirs=[INCLUDE],
    extra_compile_args=compile_args("-O2", warnings=("-Wall", "-Wextra")),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
