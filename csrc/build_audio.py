"""cffi build (API mode) of `pimloader._audio`: the fused audio feature kernel of
csrc/audio_features.c (pad, frame, window, real FFT, power, mel, dB, DCT, masks, normalise),
with the waveform steps and PCM decoding of csrc/audio_waveform.c.

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is the
`cffi-cdef-begin` / `cffi-cdef-end` blocks of csrc/include/pim_audio.h and pim_audio_wave.h
(the waveform steps and PCM decoding of csrc/audio_waveform.c), so the spec struct and
the prototypes are written once, in C. In API mode every call releases the GIL.
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")
HEADERS = [os.path.join(INCLUDE, name) for name in ("pim_audio.h", "pim_audio_wave.h")]

_BLOCK = re.compile(r"/\* cffi-cdef-begin.*?\*/(.*?)/\* cffi-cdef-end \*/", re.S)


def cdef_text() -> str:
    """The declarations of the headers' cffi blocks, comments stripped."""
    blocks = []
    for header in HEADERS:
        with open(header, encoding="utf-8") as f:
            found = _BLOCK.findall(f.read())
        if not found:
            raise RuntimeError(f"{header} has no cffi-cdef-begin/end block")
        blocks += found
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
    "pimloader._audio",
    '#include "pim_audio.h"\n#include "pim_audio_wave.h"\n',
    sources=[_rel(os.path.join(HERE, name)) for name in ("audio_features.c", "audio_fft_plan.c",
                                                        "audio_waveform.c")],
    include_dirs=[INCLUDE],
    depends=[*HEADERS, os.path.join(INCLUDE, "pim_audio_fft.h"), os.path.join(HERE, "audio_lanes.h")],
    # -fno-math-errno: sqrtf and the other calls of the lane loops vectorise; -Wno-psabi:
    # the 32-byte lane vectors never cross a call boundary in the portable build (always_inline)
    extra_compile_args=["-std=gnu11", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-fno-math-errno", "-Wno-psabi"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
