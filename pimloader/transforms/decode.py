"""`Decode`: the first step of a pipeline over a dataset whose items are encoded bytes.

Tar shard members, Arrow cells, blobs from object storage and lists of `bytes` hold images
and clips still encoded. `Decode()` turns them into what the rest of the pipeline takes, as
torchvision's `decode_image` does for images:

    T.Compose([T.Decode(), T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
               T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)])

- images (JPEG, PNG, and what torchvision's decode_image reads): a `tv_tensors.Image`, uint8
  [C, H, W], exactly `decode_image(data, mode=mode)` (mode "RGB" by default, as a folder's
  images are);
- audio clips (WAV, FLAC): the float32 waveform [channels, frames] that
  `pimloader.datasets.AudioFolder` gives for the same file with the same `sample_rate` and
  `downmix` (libsndfile's samples, resampled with torchaudio's default filter).

The input may be `bytes`, `bytearray`, `memoryview`, a 1-D uint8 numpy array or tensor (as
`torchvision.io.read_file` returns). Bytes that are neither raise `DecodeError` (also an
OSError's and a ValueError's catcher's), as a corrupt file does.

Run as Python it is exactly the above. In a PIMDataLoader whose dataset's items are encoded
bytes (a source with `encoded_items`: TarShards, Arrow columns, any map-style dataset of
(bytes, target) items), the loader does not call it: the bytes take the native path, a region
of each JPEG decoded straight into the fused kernel's input, as for an image folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_image

from pimloader.decode import DecodeError
from pimloader.decode.audio import decode_audio
from pimloader.decode.audio_limits import check_resampling

from .resample import filter_taps, resample

_MODES = {"RGB": ImageReadMode.RGB, "GRAY": ImageReadMode.GRAY,
          "UNCHANGED": ImageReadMode.UNCHANGED, "RGB_ALPHA": ImageReadMode.RGB_ALPHA,
          "GRAY_ALPHA": ImageReadMode.GRAY_ALPHA}
_AUDIO_MAGIC = (b"RIFF", b"RIFX", b"RF64", b"fLaC")


class Decode(torch.nn.Module):
    """Encoded bytes -> a uint8 image (`decode_image(data, mode)`) or a float32 waveform.

    mode: the image's channels, a torchvision ImageReadMode or its name ("RGB", the
        default, as an ImageFolder's images; "UNCHANGED", "GRAY", ...).
    sample_rate: resample every clip to this rate in Hz (None: keep each file's), as
        AudioFolder's `sample_rate`.
    downmix: average a clip's channels into one, as AudioFolder's `downmix`."""

    def __init__(self, mode="RGB", sample_rate: int | None = None,
                 downmix: bool = False) -> None:
        super().__init__()
        self.mode = _read_mode(mode)
        if sample_rate is not None and (isinstance(sample_rate, bool)
                                        or not isinstance(sample_rate, int) or sample_rate <= 0):
            raise ValueError(f"Decode: sample_rate must be a positive int (Hz) or None, "
                             f"got {sample_rate!r}")
        self.sample_rate = sample_rate
        self.downmix = bool(downmix)

    def forward(self, *inputs):
        """Bytes -> image or waveform; given a whole sample ((bytes, target), as v2's
        joint transforms are called), the sample with its first element decoded."""
        if len(inputs) > 1:
            return (self.decoded(inputs[0]), *inputs[1:])
        data = inputs[0]
        if isinstance(data, tuple) and data:
            return (self.decoded(data[0]), *data[1:])
        return self.decoded(data)

    def decoded(self, data):
        encoded = encoded_bytes(data)
        if is_audio(encoded):
            return self.decode_audio(encoded)
        return self.decode_image(encoded)

    def decode_image(self, encoded: bytes, name: str | None = None) -> tv_tensors.Image:
        where = name or "the encoded image"
        if not encoded:
            raise DecodeError(f"{where}: empty bytes, nothing to decode", name, "empty")
        try:
            image = decode_image(torch.frombuffer(bytearray(encoded), dtype=torch.uint8),
                                 mode=self.mode)
        except RuntimeError as error:
            raise DecodeError(f"{where}: {error}", name, "corrupt") from error
        return tv_tensors.Image(image)

    def decode_audio(self, encoded: bytes, name: str | None = None) -> torch.Tensor:
        return self.audio_decoding(encoded, name)

    @property
    def audio_decoding(self) -> "AudioDecoding":
        """How this step turns a clip's bytes into a waveform."""
        return AudioDecoding(self.sample_rate, self.downmix)

    @property
    def image_mode_rgb(self) -> bool:
        """Whether images decode to RGB, what the native image path makes."""
        return self.mode == ImageReadMode.RGB

    def extra_repr(self) -> str:
        parts = [f"mode={self.mode.name}"]
        if self.sample_rate is not None:
            parts.append(f"sample_rate={self.sample_rate}")
        if self.downmix:
            parts.append("downmix=True")
        return ", ".join(parts)


@dataclass(frozen=True)
class AudioDecoding:
    """How a clip's bytes become a waveform (picklable: it goes to workers): libsndfile's
    samples, down-mixed, resampled; an AudioFolder's and a Decode step's alike."""

    sample_rate: Optional[int] = None   # resample every clip to this rate (Hz); None: keep
    downmix: bool = False               # average the channels into one
    # (waveform, orig_freq, new_freq) -> waveform: torchaudio's functional.resample, or the
    # loader's native one (backends/audio_waveform.py, within its tested tolerance)
    resample: Callable = resample

    def __call__(self, data: bytes, name: Optional[str]) -> torch.Tensor:
        samples, rate = decode_audio(data, name, downmix=self.downmix)
        waveform = torch.from_numpy(samples)
        if self.sample_rate is not None and rate != self.sample_rate:
            check_resampling(name, rate, self.sample_rate,
                             filter_taps(rate, self.sample_rate))
            waveform = self.resample(waveform, rate, self.sample_rate)
        return waveform


def encoded_bytes(data) -> bytes:
    """`data` (bytes, bytearray, memoryview, 1-D uint8 numpy array or tensor) as bytes."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1:
        return data.tobytes()
    if isinstance(data, torch.Tensor) and data.dtype == torch.uint8 and data.ndim == 1:
        return data.contiguous().numpy().tobytes()
    if isinstance(data, dict):
        raise TypeError(f"Decode takes encoded bytes, got a dict with keys {sorted(data)[:6]}: "
                        f"for a Hugging Face datasets.Dataset, hand the loader "
                        f"pimloader.datasets.ArrowColumns(dataset, column=..., label=...), "
                        f"whose items are (bytes, label)")
    raise TypeError(f"Decode takes encoded bytes (bytes, bytearray, memoryview, or a 1-D "
                    f"uint8 numpy array or tensor), got {_describe(data)}: a dataset that "
                    f"decodes its items itself needs no Decode step")


def is_audio(encoded: bytes) -> bool:
    """Whether `encoded` starts as a WAV (RIFF/RIFX/RF64) or FLAC file does."""
    return encoded[:4] in _AUDIO_MAGIC


def _read_mode(mode) -> ImageReadMode:
    if isinstance(mode, ImageReadMode):
        return mode
    if isinstance(mode, str) and mode.upper() in _MODES:
        return _MODES[mode.upper()]
    raise ValueError(f"Decode: mode must be an ImageReadMode or one of {sorted(_MODES)}, "
                     f"got {mode!r}")


def _describe(data) -> str:
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return f"a {type(data).__name__} of dtype {data.dtype} and shape {tuple(data.shape)}"
    return f"a {type(data).__name__}"
