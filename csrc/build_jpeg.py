"""cffi (API mode) build of pimloader._jpeg: JPEG decoding on the system libjpeg(-turbo).

The cdef is the marked part of csrc/include/pim_jpeg.h, so the C header and the Python
binding cannot drift apart.  Needs libjpeg-turbo >= 2.0 headers (jpeg_crop_scanline,
jpeg_skip_scanlines), e.g. Debian's libjpeg62-turbo-dev.
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEADER = os.path.join(HERE, "include", "pim_jpeg.h")


def _rel(path: str) -> str:
    # setup.py runs from the repository root; setuptools wants relative source paths.
    return os.path.relpath(path, os.getcwd()) if os.getcwd() == ROOT else path


def _cdef() -> str:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"/\* cdef-begin \*/(.*)/\* cdef-end \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{HEADER}: cdef markers not found")
    return match.group(1)


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "pimloader._jpeg",
    '#include "pim_jpeg.h"\n',
    sources=[_rel(os.path.join(HERE, name)) for name in ("jpeg_decode.c", "jpeg_restart.c")],
    include_dirs=[_rel(os.path.join(HERE, "include"))],
    libraries=["jpeg"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.join(ROOT, "build"), verbose=True)
