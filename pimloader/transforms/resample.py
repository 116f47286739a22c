"""Band-limited resampling, torchaudio's `Resample` and `functional.resample`: the same
arguments, defaults, errors and arithmetic (so the same float32 samples; tests measure it).

The maths: a signal sampled at `orig` Hz is x(t) = sum_i x[i] sinc(pi orig (t - i / orig));
sampling it at `new` Hz gives y[j] = x(j / new). After dividing both rates by their gcd,
output j + new uses the filter of output j shifted by `orig` inputs, so `new` filters of
2 * width + orig taps, applied with stride `orig`, make every output: one conv1d. The sinc
is cut at `lowpass_filter_width` zero crossings of the lower rate times `rolloff`
(anti-aliasing) and tapered by a Hann window (cos^2) or a Kaiser window of `beta`.
"""
from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

__all__ = ["Resample", "resample", "filter_taps"]

_METHODS = ("sinc_interp_hann", "sinc_interp_kaiser")
_OLD_NAMES = {"sinc_interpolation": "sinc_interp_hann", "kaiser_window": "sinc_interp_kaiser"}
_KAISER_BETA = 14.769656459379492


def sinc_filters(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                 rolloff: float = 0.99, resampling_method: str = "sinc_interp_hann",
                 beta: float | None = None, dtype: torch.dtype | None = None):
    """(filters [new, 1, taps], width) for rates already divided by their gcd."""
    resampling_method = _checked_method(resampling_method)
    if lowpass_filter_width <= 0:
        raise ValueError("Low pass filter width should be positive.")
    cutoff = min(orig_freq, new_freq) * rolloff
    width = math.ceil(lowpass_filter_width * orig_freq / cutoff)
    inputs = torch.arange(-width, width + orig_freq,
                          dtype=dtype if dtype is not None else torch.float64)[None, None]
    times = (torch.arange(0, -new_freq, -1, dtype=dtype)[:, None, None] / new_freq
             + inputs / orig_freq)
    times = (times * cutoff).clamp_(-lowpass_filter_width, lowpass_filter_width)
    window = _window(times, lowpass_filter_width, resampling_method, beta)
    times = times * math.pi
    sinc = torch.where(times == 0, torch.tensor(1.0).to(times), times.sin() / times)
    filters = sinc * (window * (cutoff / orig_freq))
    if dtype is None:
        filters = filters.to(dtype=torch.float32)
    return filters, width


def filter_taps(orig_freq: int, new_freq: int, lowpass_filter_width: int = 6,
                rolloff: float = 0.99) -> int:
    """How many taps `resample(..., orig_freq, new_freq)` builds its filters with (0 when the
    rates are equal), from the rates alone: new x (2 x width + orig) after dividing both by
    their gcd, so a caller can refuse a pair of rates before the filters are allocated."""
    orig, new = _reduced_rates(orig_freq, new_freq)
    if orig == new:
        return 0
    width = math.ceil(lowpass_filter_width * orig / (min(orig, new) * rolloff))
    return new * (2 * width + orig)


def _window(times: torch.Tensor, zeros: int, method: str, beta: float | None):
    if method == "sinc_interp_hann":
        return torch.cos(times * math.pi / zeros / 2) ** 2
    beta = _KAISER_BETA if beta is None else beta
    beta_tensor = torch.tensor(float(beta))
    return torch.i0(beta_tensor * torch.sqrt(1 - (times / zeros) ** 2)) / torch.i0(beta_tensor)


def _checked_method(method: str) -> str:
    if method in _OLD_NAMES:
        warnings.warn(f'"{method}" resampling method name is being deprecated and replaced by '
                      f'"{_OLD_NAMES[method]}" in the next release. The default behavior '
                      "remains unchanged.", stacklevel=4)
        return _OLD_NAMES[method]
    if method not in _METHODS:
        raise ValueError(f"Invalid resampling method: {method}")
    return method


def _reduced_rates(orig_freq, new_freq) -> tuple[int, int]:
    if not (int(orig_freq) == orig_freq and int(new_freq) == new_freq):
        raise ValueError(f"resampling rates must be whole numbers of Hz (got {orig_freq} and "
                         f"{new_freq}); scale both to integers with the same ratio")
    if orig_freq <= 0 or new_freq <= 0:
        raise ValueError("Original frequency and desired frequecy should be positive")
    divisor = math.gcd(int(orig_freq), int(new_freq))
    return int(orig_freq) // divisor, int(new_freq) // divisor


def apply_filters(waveform: torch.Tensor, orig: int, new: int, filters: torch.Tensor,
                  width: int) -> torch.Tensor:
    """Resample `waveform` (..., time) with `sinc_filters(orig, new, ...)`."""
    shape = waveform.shape
    rows = waveform.reshape(-1, shape[-1])
    length = rows.shape[-1]
    padded = F.pad(rows, (width, width + orig))
    out = F.conv1d(padded[:, None], filters, stride=orig)
    out = out.transpose(1, 2).reshape(rows.shape[0], -1)
    kept = int(torch.ceil(torch.as_tensor(new * length / orig)).item())
    return out[..., :kept].reshape(shape[:-1] + (min(kept, out.shape[-1]),))


def resample(waveform: torch.Tensor, orig_freq: int, new_freq: int,
             lowpass_filter_width: int = 6, rolloff: float = 0.99,
             resampling_method: str = "sinc_interp_hann",
             beta: float | None = None) -> torch.Tensor:
    """torchaudio.functional.resample: `waveform` (..., time) from `orig_freq` to
    `new_freq` Hz."""
    orig, new = _reduced_rates(orig_freq, new_freq)
    if orig == new:
        return waveform
    filters, width = _cached_filters(orig, new, lowpass_filter_width, rolloff,
                                     resampling_method, beta, waveform.dtype)
    return apply_filters(waveform, orig, new, filters, width)


@functools.lru_cache(maxsize=32)
def _cached_filters(*args):
    """sinc_filters(*args), made once per process for each rate pair and setting (a
    dataset resamples every clip of a rate with the same filters; they are never
    modified)."""
    return sinc_filters(*args)


class Resample(torch.nn.Module):
    """torchaudio.transforms.Resample: the filters are made once, at construction."""

    def __init__(self, orig_freq: int = 16000, new_freq: int = 16000,
                 resampling_method: str = "sinc_interp_hann", lowpass_filter_width: int = 6,
                 rolloff: float = 0.99, beta: float | None = None, *,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.orig_freq = orig_freq
        self.new_freq = new_freq
        self.gcd = math.gcd(int(orig_freq), int(new_freq))
        self.resampling_method = resampling_method
        self.lowpass_filter_width = lowpass_filter_width
        self.rolloff = rolloff
        self.beta = beta
        self._orig, self._new = _reduced_rates(orig_freq, new_freq)
        if self._orig != self._new:
            kernel, self.width = sinc_filters(self._orig, self._new, lowpass_filter_width,
                                              rolloff, resampling_method, beta, dtype)
            self.register_buffer("kernel", kernel, persistent=False)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        if self._orig == self._new:
            return waveform
        return apply_filters(waveform, self._orig, self._new,
                             self.kernel.to(waveform.dtype), self.width)
