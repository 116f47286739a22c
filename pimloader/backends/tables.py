"""The kernels' tables, computed on the host once: resampling weights per axis (exactly
torch's uint8 antialias arithmetic, in fixed point) and per-channel conversion tables (the
bit patterns of ToDtype + Normalize for each of the 256 input levels)."""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from .structs import AXIS_DTYPE, INTERPOLATIONS, OUT_DTYPES, ffi, lib


def _linear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _cubic(x: np.ndarray) -> np.ndarray:
    # Keys' cubic with a = -0.5, as torch (antialias=True) and Pillow; same operation order
    a = -0.5
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


_FILTERS = {"bilinear": (2, _linear), "bicubic": (4, _cubic)}


def axis_weights(n_in: int, n_out: int, interpolation: str = "bilinear"):
    """Antialiased resampling of one axis from n_in to n_out samples, as torch computes it
    for uint8 input: returns (first, count, weights int16 [n_out, K], precision).

    Mirrors `_compute_indices_min_size_weights_aa` and `_compute_index_ranges_int16_weights`
    of ATen's UpSampleKernel.cpp in float64, operation for operation (sequential sums
    included), so that the rounded int16 weights are the same numbers."""
    if interpolation not in _FILTERS:
        raise ValueError(f"interpolation must be one of {sorted(_FILTERS)}, got {interpolation!r}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"axis sizes must be positive, got {n_in} -> {n_out}")
    interp_size, filt = _FILTERS[interpolation]
    scale = float(n_in) / float(n_out)
    support = (interp_size * 0.5) * scale if scale >= 1.0 else interp_size * 0.5
    k_max = int(math.ceil(support)) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0

    i = np.arange(n_out, dtype=np.float64)
    center = scale * (i + 0.5)
    first = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    end = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in)
    count = np.clip(end - first, 0, k_max)

    j = np.arange(k_max, dtype=np.int64)
    used = j[None, :] < count[:, None]
    pos = (j[None, :] + first[:, None]).astype(np.float64)
    w = np.where(used, filt((pos - center[:, None] + 0.5) * invscale), 0.0)
    total = np.zeros(n_out)
    for col in range(k_max):  # left to right, as the C++ loop adds them
        total = total + w[:, col]
    nonzero = total != 0.0
    w = np.where(nonzero[:, None], w / np.where(nonzero, total, 1.0)[:, None], w)
    w_max = float(w[nonzero].max()) if nonzero.any() else 0.0

    precision = 0
    while precision < 22:
        if int(0.5 + w_max * (1 << (precision + 1))) >= (1 << 15):
            break
        precision += 1
    v = w * float(1 << precision)
    w16 = np.where(v < 0, np.trunc(-0.5 + v), np.trunc(0.5 + v)).astype(np.int16)
    return first.astype(np.uint32), count.astype(np.uint32), w16, precision


@lru_cache(maxsize=4096)
def axis_table(n_in: int, n_out: int, interpolation: str = "bilinear", start: int = 0,
               count: Optional[int] = None) -> bytes:
    """The pim_axis_t table (header, ranges, padded int16 weights) mapping n_in -> n_out.

    With `start`/`count`, only outputs start..start+count-1 of that resampling (a window of
    the resized axis, e.g. CenterCrop after Resize): the same weights and precision as the
    whole axis, so the window equals cropping the full resize. Built in C (csrc/
    axis_tables.c, about 1 us); `reference_axis_table` is the same in numpy."""
    count, kind = _check_axis_request(n_in, n_out, interpolation, start, count)
    size = lib.pim_axis_table(n_in, n_out, kind, start, count, ffi.NULL, 0)
    if size == 0:
        raise MemoryError(f"no memory for the {n_in} -> {n_out} axis table")
    table = bytearray(size)
    lib.pim_axis_table(n_in, n_out, kind, start, count, ffi.from_buffer(table), size)
    return bytes(table)


def _check_axis_request(n_in, n_out, interpolation, start, count) -> tuple[int, int]:
    if interpolation not in _FILTERS:
        raise ValueError(f"interpolation must be one of {sorted(_FILTERS)}, got {interpolation!r}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"axis sizes must be positive, got {n_in} -> {n_out}")
    count = n_out - start if count is None else count
    if not (0 <= start and 1 <= count and start + count <= n_out):
        raise ValueError(f"window {start}..{start + count} outside the {n_out} outputs")
    if n_in == n_out and (start, count) != (0, n_out):
        raise ValueError("a window of an axis that is not resampled is a crop of the box")
    return count, INTERPOLATIONS[interpolation]


def reference_axis_table(n_in: int, n_out: int, interpolation: str = "bilinear",
                         start: int = 0, count: Optional[int] = None) -> bytes:
    """axis_table from the numpy transcription of torch's steps (axis_weights): the oracle
    the C builder is tested against."""
    count, _ = _check_axis_request(n_in, n_out, interpolation, start, count)
    header = np.zeros(1, AXIS_DTYPE)
    header["n_in"], header["n_out"] = n_in, count
    if n_in == n_out:  # not resampled (torch skips this pass): header only
        return header.tobytes()
    first, taps_used, w16, precision = axis_weights(n_in, n_out, interpolation)
    first, taps_used, w16 = (a[start:start + count] for a in (first, taps_used, w16))
    taps = -(-w16.shape[1] // 4) * 4
    header["taps"], header["precision"] = taps, precision
    ranges = np.stack([first, taps_used], axis=1).astype("<u4")
    weights = np.zeros((count, taps), "<i2")
    weights[:, :w16.shape[1]] = w16
    raw = weights.tobytes()
    raw += b"\0" * (-len(raw) % 8)
    return header.tobytes() + ranges.tobytes() + raw


# ---- conversion tables ----------------------------------------------------------------

def lut_from_fn(fn: Callable[[torch.Tensor], torch.Tensor], channels: int,
                dtype: torch.dtype) -> np.ndarray:
    """Lookup table of `fn` applied to every uint8 level of every channel: fn receives a
    uint8 tensor [channels, 1, 256] (a 1 x 256 image whose pixels are the levels 0..255) and
    returns a tensor of `dtype` of the same shape. Returns channels x 256 bit patterns."""
    if dtype not in OUT_DTYPES or OUT_DTYPES[dtype][1] is None:
        raise ValueError(f"lookup tables are for float16, bfloat16 and float32, not {dtype}")
    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 256).repeat(channels, 1, 1)
    values = fn(levels)
    if values.dtype != dtype or tuple(values.shape) != (channels, 1, 256):
        raise ValueError(f"fn returned {values.dtype} {tuple(values.shape)}, expected {dtype} "
                         f"{(channels, 1, 256)}")
    bits = values.contiguous().view(torch.int16 if OUT_DTYPES[dtype][0] == 2 else torch.int32)
    return np.ascontiguousarray(bits.numpy().reshape(channels, 256).view(OUT_DTYPES[dtype][1]))


def normalize_lut(channels: int, dtype: torch.dtype, mean: Optional[Sequence[float]] = None,
                  std: Optional[Sequence[float]] = None, scale: bool = True) -> np.ndarray:
    """Table for torchvision v2 `ToDtype(dtype, scale=scale)` followed, if mean and std are
    given, by `Normalize(mean, std)`, with the same torch operations
    (`to(dtype).mul_(1 / 255)`, then `sub(mean).div_(std)` in `dtype`)."""
    if (mean is None) != (std is None):
        raise ValueError("give both mean and std, or neither")
    if std is not None and not all(std):
        raise ValueError("std evaluated to zero, leading to division by zero.")

    def fn(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype)
        if scale:
            x = x.mul_(1.0 / 255)
        if mean is not None:
            m = torch.as_tensor(mean, dtype=dtype).view(-1, 1, 1)
            s = torch.as_tensor(std, dtype=dtype).view(-1, 1, 1)
            x = x.sub(m).div_(s)
        return x

    return lut_from_fn(fn, channels, dtype)
