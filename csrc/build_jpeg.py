"""cffi (API mode) build of pimloader._jpeg: JPEG decoding on the system libjpeg(-turbo).

The cdef is the `cffi-cdef-begin` / `cffi-cdef-end` block of csrc/include/pim_jpeg.h
(csrc/cffi_build.py), so the C header and the Python binding cannot drift apart. Needs
libjpeg-turbo >= 2.0 headers (jpeg_crop_scanline, jpeg_skip_scanlines), e.g. Debian's
libjpeg62-turbo-dev.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cffi_build import INCLUDE, compile_args, extension, sources  # noqa: E402

ffibuilder = extension(
    "pimloader._jpeg", [os.path.join(INCLUDE, "pim_jpeg.h")],
    sources=sources("jpeg_decode.c", "jpeg_huffman.c", "jpeg_restart.c", "jpeg_seek_index.c"),
    include_dirs=[INCLUDE],
    libraries=["jpeg"],
    extra_compile_args=compile_args("-O2", std=None),
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.join(os.path.dirname(HERE), "build"), verbose=True)
