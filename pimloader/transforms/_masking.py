"""SpecAugment's masks with torchaudio's names and draws: FrequencyMasking, TimeMasking.

`draw_mask` is the one place a mask is drawn: the same two `torch.rand` calls, in float32,
that torchaudio.functional.mask_along_axis makes for one example, so the fused kernel (whose
masks are drawn on the host) and these classes mask the same rows under the same seed.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor


def effective_mask_param(mask_param: int, p: float, axis_length: int) -> int:
    """The longest mask allowed: mask_param, or at most p * axis_length when p < 1."""
    return mask_param if p == 1.0 else min(mask_param, int(axis_length * p))


def draw_mask(mask_param: int, p: float, axis_length: int,
              generator: Optional[torch.Generator] = None) -> Optional[tuple[int, int]]:
    """[start, end) of one mask along an axis of axis_length, or None when the mask can be
    empty only (no random number is drawn then, as in torchaudio)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"The value of p must be between 0.0 and 1.0 ({p} given).")
    limit = effective_mask_param(mask_param, p, axis_length)
    if limit < 1:
        return None
    value = torch.rand(1, generator=generator) * limit
    min_value = torch.rand(1, generator=generator) * (axis_length - value)
    start = int(min_value.long())
    end = start + int(value.long())
    if end - start >= limit:
        raise ValueError("Number of columns to be masked should be less than mask_param")
    return start, end


def mask_along_axis(specgram: Tensor, mask_param: int, mask_value: float, axis: int,
                    p: float = 1.0) -> Tensor:
    """One mask shared by every example and channel of `specgram` (..., freq, time)."""
    dim = specgram.dim()
    if dim < 2:
        raise ValueError(f"Spectrogram must have at least two dimensions (time and frequency) "
                         f"({dim} given).")
    _check_axis(axis, dim)
    interval = draw_mask(mask_param, p, specgram.shape[axis])
    if interval is None:
        return specgram
    positions = torch.arange(specgram.shape[axis], device=specgram.device)
    mask = (positions >= interval[0]) & (positions < interval[1])
    if axis == dim - 2:
        mask = mask.unsqueeze(-1)
    return specgram.masked_fill(mask, mask_value)


def mask_along_axis_iid(specgrams: Tensor, mask_param: int, mask_value: Union[float, Tensor],
                        axis: int, p: float = 1.0) -> Tensor:
    """An independent mask for every example and channel of `specgrams` (..., freq, time)."""
    dim = specgrams.dim()
    if dim < 3:
        raise ValueError(f"Spectrogram must have at least three dimensions ({dim} given).")
    _check_axis(axis, dim)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"The value of p must be between 0.0 and 1.0 ({p} given).")
    limit = effective_mask_param(mask_param, p, specgrams.shape[axis])
    if limit < 1:
        return specgrams
    device, dtype = specgrams.device, specgrams.dtype
    value = torch.rand(specgrams.shape[:dim - 2], device=device, dtype=dtype) * limit
    min_value = torch.rand(specgrams.shape[:dim - 2], device=device, dtype=dtype) * (
        specgrams.size(axis) - value)
    start = min_value.long()[..., None, None]
    end = (min_value.long() + value.long())[..., None, None]
    positions = torch.arange(0, specgrams.size(axis), device=device, dtype=dtype)
    moved = specgrams.transpose(axis, -1)
    inside = (positions >= start) & (positions < end)
    if isinstance(mask_value, Tensor):
        moved = torch.where(inside, mask_value.repeat(moved.shape), moved)
    else:
        moved = moved.masked_fill(inside, mask_value)
    return moved.transpose(axis, -1)


def _check_axis(axis: int, dim: int) -> None:
    if axis not in (dim - 2, dim - 1):
        raise ValueError(f"Only Frequency and Time masking are supported (axis {dim - 2} and "
                         f"axis {dim - 1} supported; {axis} given).")


class _AxisMasking(torch.nn.Module):
    def __init__(self, mask_param: int, axis: int, iid_masks: bool, p: float = 1.0) -> None:
        super().__init__()
        self.mask_param, self.axis, self.iid_masks, self.p = mask_param, axis, iid_masks, p

    def forward(self, specgram: Tensor, mask_value: Union[float, Tensor] = 0.0) -> Tensor:
        axis = self.axis + specgram.dim() - 3
        if self.iid_masks:
            return mask_along_axis_iid(specgram, self.mask_param, mask_value, axis, p=self.p)
        value = float(mask_value) if isinstance(mask_value, Tensor) else mask_value
        return mask_along_axis(specgram, self.mask_param, value, axis, p=self.p)


class FrequencyMasking(_AxisMasking):
    """torchaudio.transforms.FrequencyMasking: one band of [0, freq_mask_param) rows."""

    def __init__(self, freq_mask_param: int, iid_masks: bool = False) -> None:
        super().__init__(freq_mask_param, 1, iid_masks)


class TimeMasking(_AxisMasking):
    """torchaudio.transforms.TimeMasking: one band of [0, time_mask_param) frames, at most
    p of them."""

    def __init__(self, time_mask_param: int, iid_masks: bool = False, p: float = 1.0) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"The value of p must be between 0.0 and 1.0 ({p} given).")
        super().__init__(time_mask_param, 2, iid_masks, p=p)
