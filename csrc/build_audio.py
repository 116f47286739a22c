"""cffi build (API mode) of `pimloader._audio`: the fused audio feature kernel of
csrc/audio_features.c (pad, frame, window, real FFT, power, mel, dB, DCT, masks, normalise),
with the waveform steps and PCM decoding of csrc/audio_waveform.c.

setup.py picks this file up through its `csrc/build_*.py:ffibuilder` glob. The cdef is the
`cffi-cdef-begin` / `cffi-cdef-end` blocks of csrc/include/pim_audio.h and pim_audio_wave.h
(the waveform steps and PCM decoding of csrc/audio_waveform.c), so the spec struct and
the prototypes are written once, in C (csrc/cffi_build.py cuts them). In API mode every call
releases the GIL.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cffi_build import INCLUDE, compile_args, extension, sources  # noqa: E402

ffibuilder = extension(
    "pimloader._audio", [os.path.join(INCLUDE, name) for name in ("pim_audio.h", "pim_audio_wave.h")],
    sources=sources("audio_features.c", "audio_fft_plan.c", "audio_waveform.c"),
    include_dirs=[INCLUDE],
    depends=[os.path.join(INCLUDE, "pim_audio_fft.h"), os.path.join(HERE, "audio_lanes.h")],
    # -fno-math-errno: sqrtf and the other calls of the lane loops vectorise; -Wno-psabi:
    # the 32-byte lane vectors never cross a call boundary in the portable build (always_inline)
    extra_compile_args=compile_args("-O3", "-fno-math-errno", "-Wno-psabi"),
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
