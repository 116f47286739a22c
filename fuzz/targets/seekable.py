"""The seekable rewriter: add_restart_markers (libjpeg's coefficient API through
csrc/jpeg_restart.c), what `make_seekable` and `python -m pimloader.make_seekable` run on
every file of a folder (Huffman tables fitted to the file), and the encoded-sample cache on
each JPEG it takes with cache_seekable=True (the standard tables).

Documented error: DecodeError (a corrupt file, or one over the pixel limit). What is checked
beyond it: a copy it writes is seekable (seek_info finds its restart interval) and decodes
to the same pixels as the original (the copy is lossless), and a box of the copy decodes
from its restart intervals to the pixels of the whole copy cropped."""
from __future__ import annotations

import numpy as np
from PIL import Image

from pimloader.decode import DecodeError, add_restart_markers, decode_jpeg, seek_info

CORPUS = "jpeg"
MAX_LEN = 4096
PIXEL_LIMIT = 1 << 18


def one_input(data: bytes) -> None:
    Image.MAX_IMAGE_PIXELS = PIXEL_LIMIT
    max_interval = 1 + (data[-1] % 8 if data else 0)
    optimize = bool(data[-1] & 8) if data else True   # fitted tables, or the standard ones
    try:
        copy = add_restart_markers(data, max_interval, name="fuzz.jpg", optimize=optimize)
    except DecodeError:
        return
    info = seek_info(copy)
    assert info is not None and 1 <= info.interval <= max_interval, info
    pixels = decode_jpeg(copy, name="fuzz copy")
    try:
        original = decode_jpeg(data, name="fuzz.jpg")
    except DecodeError:
        original = None   # strict: a file libjpeg warns about may still have been copied
    if original is not None:
        assert np.array_equal(pixels, original), "the seekable copy decodes to other pixels"
    height, width = pixels.shape[:2]
    box = (height // 2, width // 3, max(1, height // 3), max(1, width // 2))
    crop = decode_jpeg(copy, box, name="fuzz copy")
    assert np.array_equal(crop, pixels[box[0]:box[0] + box[2], box[1]:box[1] + box[3]]), box
