"""cffi build (API mode) of `pimloader._sample_cache`: the lock-free table of the
encoded-sample cache (csrc/sample_cache.c; pimloader/datasets/cache.py).

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is the
`cffi-cdef-begin` / `cffi-cdef-end` block of csrc/include/pim_sample_cache.h.
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")
HEADER = os.path.join(INCLUDE, "pim_sample_cache.h")

_BLOCK = re.compile(r"/\* cffi-cdef-begin.*?\*/(.*?)/\* cffi-cdef-end \*/", re.S)


def cdef_text() -> str:
    """The declarations of pim_sample_cache.h's cffi block, comments stripped."""
    with open(HEADER, encoding="utf-8") as f:
        blocks = _BLOCK.findall(f.read())
    if not blocks:
        raise RuntimeError(f"{HEADER} has no cffi-cdef-begin/end block")
    return re.sub(r"/\*.*?\*/", "", "\n".join(blocks), flags=re.S)


def _rel(path: str) -> str:
    # setuptools wants sources relative to the directory setup.py runs in
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "pimloader._sample_cache",
    '#include "pim_sample_cache.h"\n',
    sources=[_rel(os.path.join(HERE, "sample_cache.c"))],
    include_dirs=[INCLUDE],
    depends=[HEADER],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
