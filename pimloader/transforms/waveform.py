"""Waveform augmentations of keyword spotting: crop or pad to a fixed length, time shift,
gain, background noise at a random SNR.

torchaudio has none of these as random transforms, so their arguments are defined here.
Each acts on a float tensor (..., time) and draws its random numbers from torch's global
generator with the calls its docstring lists, in that order and nothing else, so that a
reference written with plain torch calls replays them under the same seed (and so that a
loader's workers seed them as torch's DataLoader does). A coin for `p` is drawn only when
p < 1: `torch.rand(1) >= p` skips the transform (torchvision's convention).

Drawing is separate from applying (torchvision v2's make_params): `make_params` draws from
the clip's shape alone, and `forward` applies what it drew; the audio pipeline's native
waveform step (backends/audio_waveform.py) applies the same draws in C.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ._rng import rand1, randint1

__all__ = ["RandomCropOrPad", "CropOrPad", "RandomTimeShift", "RandomGain",
           "AddBackgroundNoise", "add_noise"]

_POSITIONS = ("start", "center", "end")


def _checked_length(length) -> int:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an int >= 1 (samples), got {length!r}")
    return length


def _checked_p(p) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    return float(p)


def _skipped(p: float) -> bool:
    """torch.rand(1) >= p, compared as torch compares them: in float32 (p rounded to
    float32 first), here on Python floats, which hold both exactly."""
    return p < 1.0 and rand1() >= float(np.float32(p))


def _uniform(low: float, high: float) -> float:
    """low + (high - low) * u, u = torch.rand(1) (one draw)."""
    return low + (high - low) * rand1()


def _place(waveform: torch.Tensor, length: int, start: int, fill: float) -> torch.Tensor:
    """`waveform`'s samples [start, start + length) along time, `fill` where that range
    leaves the waveform (start may be negative or past the end): a view when the range is
    inside the waveform, else one constant pad, whose negative widths crop."""
    size = waveform.shape[-1]
    if 0 <= start and start + length <= size:
        return waveform[..., start:start + length]
    if start >= size or start + length <= 0:
        return waveform.new_full(waveform.shape[:-1] + (length,), fill)
    return F.pad(waveform, (-start, start + length - size), value=fill)


def _padding_start(position: str, missing: int) -> int:
    return {"start": missing, "center": missing // 2, "end": 0}[position]


class CropOrPad(torch.nn.Module):
    """Crop or pad the time axis to `length` samples, without randomness.

    position: where the kept (or padded) clip sits: "start" keeps the last `length`
    samples / pads before the clip, "center" keeps the middle (floor) / pads (missing // 2)
    before, "end" keeps the first `length` samples / pads after the clip. fill: the value
    of the padding."""

    def __init__(self, length: int, position: str = "center", fill: float = 0.0) -> None:
        super().__init__()
        if position not in _POSITIONS:
            raise ValueError(f"position must be one of {_POSITIONS}, got {position!r}")
        self.length = _checked_length(length)
        self.position = position
        self.fill = float(fill)

    def make_params(self, size: int) -> int:
        """The first sample kept (negative: that many samples of padding come first)."""
        if size >= self.length:
            excess = size - self.length
            return {"start": excess, "center": excess // 2, "end": 0}[self.position]
        return -_padding_start(self.position, self.length - size)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return _place(waveform, self.length, self.make_params(waveform.shape[-1]), self.fill)


class RandomCropOrPad(torch.nn.Module):
    """Crop a random `length`-sample window of a longer clip; pad a shorter one.

    Draws: a clip longer than `length`: `offset = torch.randint(0, size - length + 1, (1,))`,
    the window starts at `offset`. A shorter clip with pad_position="random":
    `offset = torch.randint(0, length - size + 1, (1,))` samples of `fill` go before it;
    with "start", "center" or "end" the clip is padded as CropOrPad's position says, and
    nothing is drawn. A clip of exactly `length` samples draws nothing."""

    def __init__(self, length: int, pad_position: str = "end", fill: float = 0.0) -> None:
        super().__init__()
        if pad_position not in _POSITIONS + ("random",):
            raise ValueError(f"pad_position must be one of {_POSITIONS + ('random',)}, "
                             f"got {pad_position!r}")
        self.length = _checked_length(length)
        self.pad_position = pad_position
        self.fill = float(fill)

    def make_params(self, size: int) -> int:
        """The first sample kept (negative: that many samples of padding come first)."""
        if size > self.length:
            return randint1(0, size - self.length + 1)
        if size == self.length:
            return 0
        missing = self.length - size
        if self.pad_position == "random":
            return -randint1(0, missing + 1)
        return -_padding_start(self.pad_position, missing)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        if waveform.shape[-1] == self.length:
            return waveform
        return _place(waveform, self.length, self.make_params(waveform.shape[-1]), self.fill)


class RandomTimeShift(torch.nn.Module):
    """Shift the clip in time by a random whole number of samples in
    [-max_shift, max_shift], keeping its length: a positive shift delays it (`fill` enters
    at the start), a negative one advances it; rollover=True wraps the samples around
    instead (torch.roll).

    Draws: [p coin], `shift = torch.randint(-max_shift, max_shift + 1, (1,))`."""

    def __init__(self, max_shift: int, fill: float = 0.0, rollover: bool = False,
                 p: float = 1.0) -> None:
        super().__init__()
        if isinstance(max_shift, bool) or not isinstance(max_shift, int) or max_shift < 0:
            raise ValueError(f"max_shift must be an int >= 0 (samples), got {max_shift!r}")
        self.max_shift = max_shift
        self.fill = float(fill)
        self.rollover = bool(rollover)
        self.p = _checked_p(p)

    def make_params(self) -> int | None:
        """The shift in samples, or None when the coin skips the step."""
        if _skipped(self.p):
            return None
        return randint1(-self.max_shift, self.max_shift + 1)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        shift = self.make_params()
        if shift is None:
            return waveform
        if self.rollover:
            return torch.roll(waveform, shift, dims=-1)
        return _place(waveform, waveform.shape[-1], -shift, self.fill)


class RandomGain(torch.nn.Module):
    """Multiply the clip by 10 ** (gain_db / 20), gain_db uniform in
    [min_gain_db, max_gain_db]. No clipping: samples may leave [-1, 1] (unlike
    torchaudio's Vol, which clamps).

    Draws: [p coin], `u = torch.rand(1)`, gain_db = min_gain_db + (max - min) * u."""

    def __init__(self, min_gain_db: float = -6.0, max_gain_db: float = 6.0,
                 p: float = 1.0) -> None:
        super().__init__()
        if min_gain_db > max_gain_db:
            raise ValueError(f"min_gain_db ({min_gain_db}) must be <= max_gain_db "
                             f"({max_gain_db})")
        self.min_gain_db = float(min_gain_db)
        self.max_gain_db = float(max_gain_db)
        self.p = _checked_p(p)

    def make_params(self) -> float | None:
        """The factor 10 ** (gain_db / 20), or None when the coin skips the step."""
        if _skipped(self.p):
            return None
        return 10.0 ** (_uniform(self.min_gain_db, self.max_gain_db) / 20.0)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        factor = self.make_params()
        return waveform if factor is None else waveform * factor


def add_noise(waveform: torch.Tensor, noise: torch.Tensor, snr) -> torch.Tensor:
    """`noise` scaled so that the signal-to-noise ratio of each (..., time) row is `snr` dB
    (a number or a tensor of the leading shape), added to `waveform`: the quantity of
    torchaudio.functional.add_noise (scale = 10^((snr_now - snr) / 20)), computed as
    sqrt(signal energy / noise energy * 10^(-snr / 10)) in fewer operations (equal to
    torchaudio's within float32 rounding; tested). A silent row of noise adds nothing,
    where torchaudio's formula gives NaN."""
    signal_energy = waveform.square().sum(-1)
    noise_energy = noise.square().sum(-1)
    wanted = 10.0 ** (-torch.as_tensor(snr, dtype=waveform.dtype) / 10.0)
    scale = torch.sqrt(signal_energy * wanted / noise_energy)
    scale = torch.where(noise_energy > 0, scale, torch.zeros_like(scale))
    return waveform + scale.unsqueeze(-1) * noise


class AddBackgroundNoise(torch.nn.Module):
    """Mix a random stretch of a random noise clip into the clip at a random SNR.

    noises: a sequence of float tensors (time) or (channels, time), e.g.
    `AudioFolder.background_noise()`, each at the clip's sample rate and at least one
    sample long and not silent; a mono noise is mixed into every channel. snr: (min_db,
    max_db), the signal-to-noise ratio in dB. The noise is scaled per channel so that
    10 log10(signal energy / noise energy) = snr, as torchaudio.functional.add_noise does
    (a silent clip stays silent). A noise clip shorter than the clip is first repeated
    end to end until it is at least as long.

    Draws: [p coin], `which = torch.randint(0, len(noises), (1,))`,
    `offset = torch.randint(0, len(noise) - size + 1, (1,))` over the (repeated) noise's
    length (0, not drawn, when it is exactly as long as the clip), `u = torch.rand(1)`, snr_db = min_db + (max - min) * u."""

    def __init__(self, noises: Sequence[torch.Tensor], snr: tuple = (0.0, 20.0),
                 p: float = 1.0) -> None:
        super().__init__()
        self.noises = [self._checked_noise(noise, i) for i, noise in enumerate(noises)]
        if not self.noises:
            raise ValueError("AddBackgroundNoise needs at least one noise clip")
        low, high = snr
        if low > high:
            raise ValueError(f"snr must be (min_db, max_db) with min_db <= max_db, got {snr!r}")
        self.snr = (float(low), float(high))
        self.p = _checked_p(p)

    @staticmethod
    def _checked_noise(noise, index: int) -> torch.Tensor:
        noise = torch.as_tensor(noise)
        if not noise.is_floating_point() or noise.ndim not in (1, 2) or noise.shape[-1] < 1:
            raise ValueError(f"noise clip {index} must be a float tensor (time) or (channels, "
                             f"time) of at least one sample, got {noise.dtype} {tuple(noise.shape)}")
        if not bool((noise != 0).any()):
            raise ValueError(f"noise clip {index} is silent: no SNR can be set with it")
        return noise

    def make_params(self, shape: tuple) -> tuple | None:
        """(noise index, offset into the repeated noise, snr_db) for a clip of `shape`
        (..., time), or None when the coin skips the step."""
        if _skipped(self.p):
            return None
        which = randint1(0, len(self.noises))
        noise = self.noises[which]
        channels = shape[-2] if len(shape) >= 2 else 1
        if noise.ndim == 2 and noise.shape[0] not in (1, channels):
            raise ValueError(f"a noise clip of {noise.shape[0]} channels cannot be mixed "
                             f"into a clip of shape {tuple(shape)}")
        size, noise_length = shape[-1], noise.shape[-1]
        repeated = noise_length * -(-size // noise_length) if noise_length < size else noise_length
        offset = 0
        if repeated > size:
            offset = randint1(0, repeated - size + 1)
        return which, offset, _uniform(*self.snr)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        params = self.make_params(tuple(waveform.shape))
        if params is None:
            return waveform
        which, offset, snr_db = params
        noise, size = self.noises[which], waveform.shape[-1]
        if noise.shape[-1] < size:
            noise = noise.repeat(*([1] * (noise.ndim - 1)), -(-size // noise.shape[-1]))
        stretch = noise[..., offset:offset + size].to(waveform.dtype)
        stretch = stretch.expand(waveform.shape)
        return add_noise(waveform, stretch, snr_db)
