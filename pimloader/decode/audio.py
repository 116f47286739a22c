"""Audio decoding: encoded bytes (WAV, FLAC, and the other formats libsndfile reads) ->
float32 samples [channels, frames] in [-1, 1], as torchaudio.load returns them.

The decoder is libsndfile, through `soundfile` (its wheel bundles the library, so nothing is
needed from the system). Why libsndfile rather than code of our own (dr_wav-style WAV
parsing, libFLAC directly): it is the reference reader of both formats, maintained for
decades, reads every WAV variant in the wild (PCM 8-32 bit, float, WAVE_FORMAT_EXTENSIBLE,
RF64) and FLAC through libFLAC itself, and scales integers to floats as torchaudio does
(PCM 16 / 32768, PCM 24 / 2^23). One exception, measured: a plain 16-bit PCM WAV, the
format of nearly every clip of Speech Commands, is read directly with numpy (the same
floats), because soundfile's per-call overhead is three to four times the whole read of a
one-second clip, and with fused features that overhead was a large share of a clip's cost
(docs/audio.md).

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
_WAVE_FORMAT_PCM = 1


def decode_audio(data: bytes, name: str | None = None) -> tuple[np.ndarray, int]:
    """(samples as float32 [channels, frames], sample rate) of an encoded audio file.

    Raises DecodeError naming `name` for an empty, truncated, corrupt or unsupported file,
    or one with no audio frames."""
    where = name if name is not None else "the audio data"
    if len(data) == 0:
        raise DecodeError(f"{where}: the file is empty", name, "empty")
    chunks = _wav_chunks(data)
    _check_wav_length(data, chunks, where, name)
    decoded = _plain_pcm16(data, chunks)
    if decoded is None:
        decoded = _libsndfile(data, where, name)
    samples, rate = decoded
    if samples.shape[1] == 0:
        raise DecodeError(f"{where}: the file holds no audio frames", name, "no frames")
    return samples, rate


def _libsndfile(data: bytes, where: str, name: str | None) -> tuple[np.ndarray, int]:
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError) as error:
        reason = str(error).split(": ", 1)[-1]
        raise DecodeError(f"{where}: cannot decode audio ({reason})", name, reason) from None
    return np.ascontiguousarray(samples.T), int(rate)


def _wav_chunks(data: bytes) -> dict:
    """{chunk id: (offset of its data, declared size)} of a RIFF/WAVE file, up to its data
    chunk ({} for anything else)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return {}
    chunks, offset = {}, 12
    while offset + 8 <= len(data):
        chunk, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        chunks.setdefault(chunk, (offset + 8, size))
        if chunk == b"data":
            break
        offset += 8 + size + (size & 1)
    return chunks


def _check_wav_length(data: bytes, chunks: dict, where: str, name: str | None) -> None:
    """A WAV whose data chunk declares more bytes than the file holds is truncated."""
    if b"data" not in chunks:
        return
    start, size = chunks[b"data"]
    held = len(data) - start
    if size not in _STREAMED_SIZES and size > held:
        reason = f"truncated: its header declares {size} bytes of audio, it holds {held}"
        raise DecodeError(f"{where}: {reason}", name, reason)


def _plain_pcm16(data: bytes, chunks: dict):
    """The samples of a plain 16-bit PCM WAV (format tag 1, Speech Commands' format) read
    directly, or None for any other file (libsndfile reads those). The same floats as
    libsndfile's: s / 32768 is exact in float32. libsndfile's own per-call overhead
    (opening a virtual file, reading its header through callbacks) is several times the
    work of this path on a one-second clip."""
    if b"fmt " not in chunks or b"data" not in chunks:
        return None
    fmt_at, fmt_size = chunks[b"fmt "]
    start, size = chunks[b"data"]
    if fmt_size < 16 or fmt_at + 16 > len(data):
        return None
    tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", data, fmt_at)
    if (tag != _WAVE_FORMAT_PCM or bits != 16 or channels < 1 or rate < 1
            or align != 2 * channels or size in _STREAMED_SIZES or size % align):
        return None
    pcm = np.frombuffer(data, "<i2", count=size // 2, offset=start).reshape(-1, channels)
    samples = np.ascontiguousarray(pcm.T, dtype=np.float32)
    samples *= np.float32(1 / 32768)
    return samples, rate
