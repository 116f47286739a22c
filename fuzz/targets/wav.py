"""WAV: pimloader's RIFF walk and header checks (pimloader/decode/audio.py) and its PCM
conversion (csrc/audio_waveform.c's pim_audio_pcm), else libsndfile.

Documented error: DecodeError. What is checked beyond it: where libsndfile (soundfile) reads
the same bytes, pimloader's samples and rate are libsndfile's, exactly, and downmixing gives
one row. Every file is compared, well-formed or not: pimloader reads directly only a file
that is one well-formed RIFF (`one_well_formed_riff`) and leaves the rest to libsndfile,
whose chunk walk goes past the RIFF size (docs/fuzzing.md, "What the runs found", finding
3). Where pimloader refuses a file that libsndfile reads (a truncated data chunk, a second
`fmt `, the audio limits), it raises its documented error; the target does not flag it."""
from __future__ import annotations

import io

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
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as file:   # by count: some codecs
            reference_rate = file.samplerate                    # cannot seek (finding 5)
            reference = file.read(file.frames, dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError, ValueError):
        return
    assert rate == reference_rate, (rate, reference_rate)
    assert np.array_equal(samples, reference.T, equal_nan=True), "samples differ from libsndfile's"

