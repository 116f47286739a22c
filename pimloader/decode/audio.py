"""Audio decoding: encoded bytes (WAV, FLAC, and the other formats libsndfile reads) ->
float32 samples [channels, frames] in [-1, 1], as torchaudio.load returns them.

The decoder is libsndfile, through `soundfile` (its wheel bundles the library, so nothing is
needed from the system). Why libsndfile rather than code of our own (dr_wav-style WAV
parsing, libFLAC directly): it is the reference reader of both formats, maintained for
decades, reads every WAV variant in the wild (PCM 8-32 bit, float, WAVE_FORMAT_EXTENSIBLE,
RF64) and FLAC through libFLAC itself, and scales integers to floats as torchaudio does
(PCM 16 / 32768, PCM 24 / 2^23). One exception, measured: a WAV of plain samples (PCM 8,
16, 24 or 32 bit, float or double, also as WAVE_FORMAT_EXTENSIBLE), the format of nearly
every clip of Speech Commands, is read directly (the same floats: every scale is a power of
two), because soundfile's per-call overhead is several times the whole read of a one-second
clip, and with fused features that overhead was a large share of a clip's cost
(docs/audio.md). The header walk is ours (it also finds truncated files); the samples are
converted, and channels averaged when asked, by csrc/audio_waveform.c where pimloader's
native audio module is built, else 16-bit files by numpy and the rest by libsndfile.
The direct read takes only a WAV that is one well-formed RIFF (its declared size the
file's, its chunks ending exactly at the file's end, none twice): libsndfile walks chunks
past the RIFF size to the file's end, resyncs on markers it meets there, and reads the
last `data` chunk it finds, so in any other file the two could take different samples
(a fuzz finding, docs/fuzzing.md); libsndfile reads those files, so pimloader gives its
samples.

libsndfile decodes a WAV whose data was cut short without complaint (it reads what is
there); `decode_audio` refuses it, as the image path refuses a truncated JPEG, because a
clip that silently lost its end is a broken file.

Every header, read by our walk or by libsndfile, goes through audio_limits.py before a
sample is allocated: what libsndfile refuses (impossible sample rates or channel counts, a
second `fmt ` chunk) is refused on the direct path too, and a clip that promises more than
`MAX_AUDIO_SAMPLES` samples gets a warning, or above twice it an error. A FLAC whose
STREAMINFO leaves its length unknown is refused: libsndfile cannot read it to its end.
"""
from __future__ import annotations

import io
import struct
from typing import NamedTuple

import numpy as np
import soundfile

from . import audio_limits
from .errors import DecodeError

try:
    from pimloader import _audio
except ImportError:  # a build without the native audio module
    _audio = None

__all__ = ["decode_audio"]

_STREAMED_SIZES = (0, 0xFFFFFFFF)  # a WAV written to a pipe leaves its sizes unknown
_WAVE_FORMAT_PCM, _WAVE_FORMAT_FLOAT, _WAVE_FORMAT_EXTENSIBLE = 1, 3, 0xFFFE
# the 14 bytes after the format tag in a WAVE_FORMAT_EXTENSIBLE sub-format GUID
_KSDATAFORMAT_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
# (format tag, bits per sample) -> pim_audio_wave.h's PIM_PCM_* code
_PLAIN_FORMATS = {(_WAVE_FORMAT_PCM, 8): 0, (_WAVE_FORMAT_PCM, 16): 1, (_WAVE_FORMAT_PCM, 24): 2,
                  (_WAVE_FORMAT_PCM, 32): 3, (_WAVE_FORMAT_FLOAT, 32): 4,
                  (_WAVE_FORMAT_FLOAT, 64): 5}
_PCM_S16 = 1
_UNKNOWN_FRAMES = 2 ** 63 - 1   # libsndfile's SF_COUNT_MAX: a stream that does not say


class PlainWav(NamedTuple):
    """Where the samples of a WAV of plain samples are, and how they are stored."""

    format: int      # PIM_PCM_*
    channels: int
    rate: int
    start: int       # offset of the data chunk's samples
    frames: int


def decode_audio(data: bytes, name: str | None = None, downmix: bool = False
                 ) -> tuple[np.ndarray, int]:
    """(samples as float32 [channels, frames], sample rate) of an encoded audio file; with
    downmix=True [1, frames], the mean of the channels (torch's waveform.mean(0)).

    Raises DecodeError naming `name` for an empty, truncated, corrupt or unsupported file,
    or one with no audio frames."""
    where = name if name is not None else "the audio data"
    if not isinstance(data, bytes):   # a memoryview, bytearray or uint8 array: its bytes
        data = memoryview(data).cast("B").tobytes()
    if len(data) == 0:
        raise DecodeError(f"{where}: the file is empty", name, "empty")
    chunks = _wav_chunks(data)
    _check_wav_format(data, name)
    _check_wav_length(data, chunks, where, name)
    plain = plain_wav(data, chunks)
    if plain is not None:
        audio_limits.check_samples(name, plain.frames, plain.channels)
    decoded = _read_plain(data, plain, downmix) if plain is not None else None
    if decoded is None:
        decoded = _libsndfile(data, where, name, downmix)
    samples, rate = decoded
    if samples.shape[1] == 0:
        raise DecodeError(f"{where}: the file holds no audio frames", name, "no frames")
    return samples, rate


def _libsndfile(data: bytes, where: str, name: str | None, downmix: bool
                ) -> tuple[np.ndarray, int]:
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as file:
            audio_limits.check_format(name, file.samplerate, file.channels)
            samples, rate = _read_within_limit(file, name), file.samplerate
    except (soundfile.SoundFileError, RuntimeError) as error:
        reason = str(error).split(": ", 1)[-1]
        raise DecodeError(f"{where}: cannot decode audio ({reason})", name, reason) from None
    samples = np.ascontiguousarray(samples.T)
    return (_channel_mean(samples) if downmix else samples), int(rate)


def _read_within_limit(file: soundfile.SoundFile, name) -> np.ndarray:
    """[frames, channels] float32 of an open file, its frame count checked first, then read
    by that count: libsndfile cannot seek in some codecs (G.721 and G.723 ADPCM), and
    soundfile reads those only by count (tested). A stream that does not say its length (a
    FLAC whose STREAMINFO gives 0 samples: libsndfile then reports 2**63 - 1 frames) is
    refused: libsndfile fails at its last block (tested)."""
    if file.frames == _UNKNOWN_FRAMES:
        raise audio_limits.refuse(name, "frame count", "is unknown (a stream that does not "
                                  "say its length, such as a FLAC whose STREAMINFO gives 0 "
                                  "samples), which libsndfile cannot read to its end")
    audio_limits.check_samples(name, file.frames, file.channels, stacklevel=4)
    return file.read(file.frames, dtype="float32", always_2d=True)


def _channel_mean(samples: np.ndarray) -> np.ndarray:
    """[1, frames]: (x_0 + ... + x_{c-1}) / c in float32, the rows summed in order, as
    torch's mean(0) computes it (tested)."""
    if samples.shape[0] == 1:
        return samples
    total = samples[0].copy()
    for row in samples[1:]:
        total += row
    return (total / np.float32(samples.shape[0]))[None]


def _walk_chunks(data: bytes):
    """(chunk id, offset of its data, declared size) of a RIFF/WAVE file's chunks, up to
    its data chunk (none for anything else)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return
    offset = 12
    while offset + 8 <= len(data):
        chunk, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        yield chunk, offset + 8, size
        if chunk == b"data":
            break
        offset += 8 + size + (size & 1)


def _wav_chunks(data: bytes) -> dict:
    """{chunk id: (offset of its data, declared size)} of a RIFF/WAVE file, up to its data
    chunk, the first of each id ({} for anything else)."""
    chunks = {}
    for chunk, offset, size in _walk_chunks(data):
        chunks.setdefault(chunk, (offset, size))
    return chunks


def _check_wav_format(data: bytes, name) -> None:
    """What libsndfile refuses in a WAV's `fmt ` chunks, refused before anything is read:
    a second one before the data, a sample rate or channel count out of its range."""
    formats = [(offset, size) for chunk, offset, size in _walk_chunks(data) if chunk == b"fmt "]
    if len(formats) > 1:
        raise audio_limits.refuse(name, "'fmt ' chunk", f"appears {len(formats)} times "
                                  "before the data (libsndfile refuses a second one)")
    if formats and formats[0][1] >= 16 and formats[0][0] + 16 <= len(data):
        channels, rate = struct.unpack_from("<HI", data, formats[0][0] + 2)
        audio_limits.check_format(name, rate, channels)


def _check_wav_length(data: bytes, chunks: dict, where: str, name: str | None) -> None:
    """A WAV whose data chunk declares more bytes than the file holds is truncated."""
    if b"data" not in chunks:
        return
    start, size = chunks[b"data"]
    held = len(data) - start
    if size not in _STREAMED_SIZES and size > held:
        reason = f"truncated: its header declares {size} bytes of audio, it holds {held}"
        raise DecodeError(f"{where}: {reason}", name, reason)


def plain_wav(data: bytes, chunks: dict) -> PlainWav | None:
    """Where a WAV's samples are when they are plain (PCM 8/16/24/32 bit, float 32/64,
    as format tag 1 or 3 or WAVE_FORMAT_EXTENSIBLE with all bits valid) and the file is
    one well-formed RIFF, or None for any other file (libsndfile reads those)."""
    if b"fmt " not in chunks or b"data" not in chunks or not one_well_formed_riff(data):
        return None
    fmt_at, fmt_size = chunks[b"fmt "]
    start, size = chunks[b"data"]
    if fmt_size < 16 or fmt_at + 16 > len(data):
        return None
    tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", data, fmt_at)
    if tag == _WAVE_FORMAT_EXTENSIBLE:
        tag = _extensible_tag(data, fmt_at, fmt_size, bits)
    kind = _PLAIN_FORMATS.get((tag, bits))
    if (kind is None or channels < 1 or rate < 1 or align != bits // 8 * channels
            or size in _STREAMED_SIZES or size % align):
        return None
    return PlainWav(kind, channels, rate, start, size // align)


def one_well_formed_riff(data: bytes) -> bool:
    """Whether `data` is one RIFF/WAVE whose declared size is the file's and whose chunks,
    each id once, end exactly at its end: where pimloader's walk and libsndfile's find the
    same chunks."""
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


def _extensible_tag(data: bytes, fmt_at: int, fmt_size: int, bits: int) -> int | None:
    """The format tag of a WAVE_FORMAT_EXTENSIBLE header's sub-format when every bit of
    its container is valid, else None."""
    if fmt_size < 40 or fmt_at + 40 > len(data):
        return None
    valid_bits, = struct.unpack_from("<H", data, fmt_at + 18)
    tag, = struct.unpack_from("<H", data, fmt_at + 24)
    if valid_bits != bits or data[fmt_at + 26:fmt_at + 40] != _KSDATAFORMAT_TAIL:
        return None
    return tag


def _read_plain(data: bytes, wav: PlainWav, downmix: bool):
    """(float32 samples, rate) of a plain WAV: natively, or, without the native module,
    16-bit PCM by numpy (None for the rest: libsndfile reads them)."""
    rows = 1 if downmix else wav.channels
    if wav.frames == 0:
        return np.zeros((rows, 0), np.float32), wav.rate
    if _audio is None:
        return _numpy_pcm16(data, wav, downmix) if wav.format == _PCM_S16 else None
    samples = np.empty((rows, wav.frames), np.float32)
    err = _audio.ffi.new("char[]", 256)
    status = _audio.lib.pim_audio_pcm(
        _audio.ffi.cast("uint8_t *", _audio.ffi.from_buffer(data)) + wav.start, wav.frames, wav.channels, wav.format,
        int(downmix), _audio.ffi.cast("float *", _audio.ffi.from_buffer(samples)), err, len(err))
    if status != 0:
        raise ValueError(f"PCM decoding: {_audio.ffi.string(err).decode()}")
    return samples, wav.rate


def _numpy_pcm16(data: bytes, wav: PlainWav, downmix: bool):
    """s / 32768, exact in float32."""
    pcm = np.frombuffer(data, "<i2", count=wav.frames * wav.channels, offset=wav.start)
    samples = np.ascontiguousarray(pcm.reshape(-1, wav.channels).T, dtype=np.float32)
    samples *= np.float32(1 / 32768)
    return (_channel_mean(samples) if downmix else samples), wav.rate
