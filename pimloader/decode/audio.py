"""Audio decoding: encoded bytes (WAV, FLAC, and the other formats libsndfile reads) ->
float32 samples [channels, frames] in [-1, 1], as torchaudio.load returns them.

The decoder is libsndfile, through `soundfile` (its wheel bundles the library, so nothing is
needed from the system). Why libsndfile rather than code of our own (dr_wav-style WAV
parsing, libFLAC directly): it is the reference reader of both formats, maintained for
decades, reads every WAV variant in the wild (PCM 8-32 bit, float, WAVE_FORMAT_EXTENSIBLE,
RF64) and FLAC through libFLAC itself, and scales integers to floats as torchaudio does
(PCM 16 / 32768, PCM 24 / 2^23). A clip is a few tens of kB decoded in tens of
microseconds, far below the cost of the features computed from it, so decoding natively
elsewhere would gain nothing measurable.

libsndfile decodes a WAV whose data was cut short without complaint (it reads what is
there); `decode_audio` refuses it, as the image path refuses a truncated JPEG, because a
clip that silently lost its end is a broken file.
"""
from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

from .errors import DecodeError

__all__ = ["decode_audio"]

_STREAMED_SIZES = (0, 0xFFFFFFFF)  # a WAV written to a pipe leaves its sizes unknown


def decode_audio(data: bytes, name: str | None = None) -> tuple[np.ndarray, int]:
    """(samples as float32 [channels, frames], sample rate) of an encoded audio file.

    Raises DecodeError naming `name` for an empty, truncated, corrupt or unsupported file,
    or one with no audio frames."""
    where = name if name is not None else "the audio data"
    if len(data) == 0:
        raise DecodeError(f"{where}: the file is empty", name, "empty")
    _check_wav_length(data, where, name)
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError) as error:
        reason = str(error).split(": ", 1)[-1]
        raise DecodeError(f"{where}: cannot decode audio ({reason})", name, reason) from None
    if samples.shape[0] == 0:
        raise DecodeError(f"{where}: the file holds no audio frames", name, "no frames")
    return np.ascontiguousarray(samples.T), int(rate)


def _check_wav_length(data: bytes, where: str, name: str | None) -> None:
    """A RIFF/WAVE file whose data chunk declares more bytes than the file holds is
    truncated."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return
    offset = 12
    while offset + 8 <= len(data):
        chunk, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        if chunk == b"data":
            held = len(data) - offset - 8
            if size not in _STREAMED_SIZES and size > held:
                reason = f"truncated: its header declares {size} bytes of audio, it holds {held}"
                raise DecodeError(f"{where}: {reason}", name, reason)
            return
        offset += 8 + size + (size & 1)
