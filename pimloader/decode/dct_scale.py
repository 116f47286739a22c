"""DCT scales: a JPEG decoded at M/8 of its size (libjpeg's scale_num / 8), the size that
gives, and the scale a crop can be decoded at for its output size."""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np


def scaled_size(height: int, width: int, scale: int) -> Tuple[int, int]:
    """Size of an image decoded at scale/8 (libjpeg rounds up)."""
    _check_scale(scale)
    return -(-height * scale // 8), -(-width * scale // 8)


def pick_scale(crop_height: int, crop_width: int, out_height: int, out_width: int, *,
               min_ratio: float = 2.0, scales: Sequence[int] = (1, 2, 4, 8)) -> int:
    """The DCT scale M (of 8) with the largest reduction that keeps the scaled crop at least
    the output size in both directions; 8 (no reduction) unless the crop is at least
    `min_ratio` times the output size in both directions.

    `scales` defaults to 1/8, 1/4, 1/2: libjpeg-turbo's SIMD code covers those reductions,
    while 3/8, 5/8, 6/8 and 7/8 use plain C IDCTs that are barely faster than a full
    decode (see the timings in the design notes).
    """
    if crop_height < min_ratio * out_height or crop_width < min_ratio * out_width:
        return 8
    for m in sorted(scales):
        _check_scale(m)
        if crop_height * m >= 8 * out_height and crop_width * m >= 8 * out_width:
            return m
    return 8


def _check_scale(scale) -> None:
    if not (isinstance(scale, (int, np.integer)) and 1 <= scale <= 8):
        raise ValueError(f"scale must be an integer M in 1..8 (decode at M/8), not {scale!r}")
