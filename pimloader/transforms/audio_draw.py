"""SpecAugment's masks drawn on the host, with torchaudio's own random calls.

torchaudio.functional.mask_along_axis (iid_masks=False) draws, for one example,
    value = rand(1) * mask_param',  min_value = rand(1) * (axis_length - value)
and masks [long(min_value), long(min_value) + long(value)) on every channel;
mask_along_axis_iid draws rand(channels) twice instead, one mask per channel. Both in float32
from torch's default generator, where mask_param' = min(mask_param, int(axis_length * p))
when p < 1, and nothing is drawn when mask_param' < 1. Replaying these calls in the order of
the transforms gives the fused kernel torchaudio's masks under the same seed.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ._rng import rand1

from .audio_spec import FeatureSpec, MaskSpec


def _uniform(count: int, generator: Optional[torch.Generator]) -> np.ndarray:
    """torch.rand(count, generator=generator) as float32 numpy (one number: without a new
    tensor, transforms/_rng.py)."""
    if count == 1:
        return np.array([rand1(generator)], np.float32)
    return torch.rand(count, generator=generator).numpy()


def draw_intervals(mask: MaskSpec, axis_length: int, channels: int,
                   generator: Optional[torch.Generator] = None) -> list[tuple[int, int]]:
    """[start, end) of `mask` on each of `channels`, clipped to the axis (a mask_param above
    the axis length can start before 0 or end past it); [0, 0) when nothing is drawn."""
    limit = mask.mask_param if mask.p == 1.0 else min(mask.mask_param, int(axis_length * mask.p))
    if limit < 1:
        return [(0, 0)] * channels
    draws = channels if mask.iid_masks else 1
    # torchaudio's float32 arithmetic on its draws, in numpy (the same IEEE operations,
    # without a torch op's overhead per clip): value = u * limit, u' * (axis_length - value)
    value = _uniform(draws, generator) * np.float32(limit)
    min_value = _uniform(draws, generator) * (np.float32(axis_length) - value)
    starts, ends = min_value.astype(np.int64), min_value.astype(np.int64) + value.astype(np.int64)
    if not mask.iid_masks and int(ends[0] - starts[0]) >= limit:
        raise ValueError("Number of columns to be masked should be less than mask_param")
    pairs = [(min(max(s, 0), axis_length), min(max(e, 0), axis_length))
             for s, e in zip(starts.tolist(), ends.tolist())]
    return pairs if mask.iid_masks else pairs * channels


def draw_masks(spec: FeatureSpec, length: int, channels: Optional[int] = None,
               generator: Optional[torch.Generator] = None) -> tuple[np.ndarray, np.ndarray]:
    """The masks of one example of `length` samples, as torchaudio's FrequencyMasking and
    TimeMasking draw them on it, in the spec's order, from `generator` (None: torch's default
    one): (frequency, time) int32 arrays of [start, end) pairs, one per mask of that axis,
    [K, 2] for a mono example given as [L] or [1, L] (channels=None), [channels, K, 2] for a
    [channels, L] one. iid masks are drawn as on a [1, freq, time] example when mono."""
    count = 1 if channels is None else channels
    drawn = {"frequency": [], "time": []}
    for mask in spec.masks:
        drawn[mask.axis].append(draw_intervals(mask, spec.mask_axis_length(mask, length),
                                               count, generator))
    arrays = tuple(np.array(drawn[axis], np.int32).reshape(-1, count, 2).transpose(1, 0, 2)
                   for axis in ("frequency", "time"))
    return tuple(np.ascontiguousarray(a[0] if channels is None else a) for a in arrays)


# -- the waveform steps' draws (their registered ops' `draw`) ---------------------------------
# draw(step, shape [channels, time]) -> (operations, the clip's length after the step): each
# operation (kind, noise, at, length, value), with kind one of
#     "place"  the samples [at, at + length) of the clip, `value` where that leaves it
#     "roll"   the clip rolled by `at` samples
#     "gain"   times `value`
#     "noise"  the step's noise clip `noise`, from `at` on, mixed at `value` dB SNR
# (backends/audio_waveform.py runs them natively); [] when the step's coin skipped it.

def draw_crop_or_pad(step, shape: tuple) -> tuple[list, int]:
    return [("place", 0, step.make_params(shape[-1]), step.length, step.fill)], step.length


def draw_random_crop_or_pad(step, shape: tuple) -> tuple[list, int]:
    if shape[-1] == step.length:
        return [], step.length
    return draw_crop_or_pad(step, shape)


def draw_time_shift(step, shape: tuple) -> tuple[list, int]:
    shift = step.make_params()
    if shift is None:
        return [], shape[-1]
    if step.rollover:
        return [("roll", 0, shift, 0, 0.0)], shape[-1]
    return [("place", 0, -shift, shape[-1], step.fill)], shape[-1]


def draw_gain(step, shape: tuple) -> tuple[list, int]:
    factor = step.make_params()
    return ([] if factor is None else [("gain", 0, 0, 0, factor)]), shape[-1]


def draw_background_noise(step, shape: tuple) -> tuple[list, int]:
    params = step.make_params(shape)
    if params is None:
        return [], shape[-1]
    which, offset, snr_db = params
    return [("noise", which, offset, 0, snr_db)], shape[-1]
