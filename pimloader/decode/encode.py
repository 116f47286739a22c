"""JPEG encoding with the system libjpeg, with control Pillow lacks (tests, dataset makers)."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from pimloader._jpeg import ffi, lib

from .jpeg import _JCS_VALUE

__all__ = ["encode_jpeg"]


def encode_jpeg(pixels, *, quality: int = 90, colorspace: Optional[str] = None,
                sampling: Optional[Sequence[Tuple[int, int]]] = None,
                progressive: bool = False, restart_rows: int = 0,
                arithmetic: bool = False) -> bytes:
    """Encode a uint8 HWC array with the system libjpeg, with control Pillow lacks.

    pixels      (h, w), (h, w, 1): greyscale; (h, w, 3): RGB; (h, w, 4): CMYK, stored as
                given (pass Adobe-inverted values to match what Photoshop writes).
    colorspace  the JPEG's colour space: "YCbCr" (default for RGB), "RGB", "GRAY",
                "CMYK" (default for 4 channels) or "YCCK".
    sampling    per-component (h, v) sampling factors, e.g. [(2, 2), (1, 1), (1, 1)] for
                4:2:0 (libjpeg's default), [(1, 1)] * 3 for 4:4:4.
    """
    array = np.ascontiguousarray(pixels, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    height, width, comps = array.shape
    in_space = {1: "GRAY", 3: "RGB", 4: "CMYK"}.get(comps)
    if in_space is None:
        raise ValueError(f"pixels must have 1, 3 or 4 channels, not {comps}")
    if colorspace is None:
        colorspace = {"GRAY": "GRAY", "RGB": "YCbCr", "CMYK": "CMYK"}[in_space]
    if colorspace not in _JCS_VALUE or colorspace == "UNKNOWN":
        raise ValueError(f"unknown colour space {colorspace!r}")
    h_samp = v_samp = ffi.NULL
    if sampling is not None:
        h_samp = ffi.new("int32_t[]", [int(h) for h, _ in sampling] + [1] * 4)
        v_samp = ffi.new("int32_t[]", [int(v) for _, v in sampling] + [1] * 4)
    out = ffi.new("uint8_t **")
    out_size = ffi.new("size_t *")
    message = ffi.new("char[]", 256)
    rc = lib.pl_jpeg_encode(ffi.from_buffer("uint8_t[]", array), height, width, comps,
                            _JCS_VALUE[in_space], _JCS_VALUE[colorspace], int(quality),
                            h_samp, v_samp, int(bool(progressive)), int(restart_rows),
                            int(bool(arithmetic)), out, out_size, message)
    if rc != lib.PL_JPEG_OK:
        raise ValueError(f"JPEG encoding failed: {ffi.string(message).decode(errors='replace')}")
    try:
        return bytes(ffi.buffer(out[0], out_size[0]))
    finally:
        lib.pl_jpeg_free(out[0])
