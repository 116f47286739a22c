"""WAV: pimloader's RIFF walk and header checks (pimloader/decode/audio.py) and its PCM
conversion (csrc/audio_waveform.c's pim_audio_pcm), else libsndfile.

Documented error: DecodeError. What is checked beyond it: where libsndfile (soundfile) reads
the same bytes, pimloader's samples and rate are libsndfile's, exactly, and downmixing gives
one row. Compared only when the file is one well-formed RIFF (its size the file's, chunks
that end exactly at its end, no chunk twice): in other files libsndfile resyncs on chunk
markers found inside the data, and where pimloader takes the first data chunk, libsndfile may
take a later one (docs/fuzzing.md, "What the runs found"). Where pimloader accepts a file that
libsndfile refuses, part 2 of issue 22 decides; the target does not flag it.)"""
from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

from pimloader.decode import DecodeError, decode_audio

CORPUS = "wav"
MAX_LEN = 2048


def one_input(data: bytes) -> None:
    try:
        samples, rate = decode_audio(data, "fuzz.wav")
    except DecodeError:
        return
    assert samples.dtype == np.float32 and samples.ndim == 2 and samples.shape[1] > 0, samples.shape
    mixed, _ = decode_audio(data, "fuzz.wav", downmix=True)
    assert mixed.shape == (1, samples.shape[1]), (mixed.shape, samples.shape)
    if not well_formed(data):
        return
    try:
        reference, reference_rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError, ValueError):
        return
    assert rate == reference_rate, (rate, reference_rate)
    assert np.array_equal(samples, reference.T, equal_nan=True), "samples differ from libsndfile's"


def well_formed(data: bytes) -> bool:
    """One RIFF/WAVE whose declared size is the file's and whose chunks, each id once, end
    exactly at its end."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return False
    if struct.unpack_from("<I", data, 4)[0] != len(data) - 8:
        return False
    seen, offset = set(), 12
    while offset + 8 <= len(data):
        chunk, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        if chunk in seen:
            return False
        seen.add(chunk)
        offset += 8 + size + (size & 1)
    return offset == len(data)
