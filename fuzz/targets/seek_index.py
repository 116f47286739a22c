"""Seek indexes: decode.seek_index's walk of the Huffman data and the cut of a box's rows
out of the file with it (csrc/jpeg_seek_index.c), which the loader runs on every JPEG a
RandomResizedCrop pipeline decodes twice (seek_index_bytes).

Documented outcomes: seek_index returns an index or None; a decode raises DecodeError for a
corrupt file. What is checked beyond them: a box decoded with the file's index is exactly
what the plain decode of the box gives, pixels or error; an index of other bytes (the
input with one byte changed) is never used, so the decode of those bytes is their plain
decode too."""
from __future__ import annotations

import numpy as np
from PIL import Image

from pimloader.decode import DecodeError, decode_jpeg, read_header, seek_index

CORPUS = "jpeg"
MAX_LEN = 4096
PIXEL_LIMIT = 1 << 18


def outcome(data: bytes, box, index):
    try:
        return decode_jpeg(data, box, name="fuzz.jpg", seek_index=index)
    except DecodeError as error:
        return f"{type(error).__name__}: {error}"


def same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return np.array_equal(a, b)


def boxes(data: bytes, height: int, width: int):
    """A few boxes picked by the input's last bytes: inner, touching edges, one pixel."""
    tail = data[-4:] if len(data) >= 4 else b"\0\0\0\0"
    top, left = tail[0] * height // 256, tail[1] * width // 256
    h = max(1, min(height - top, 1 + tail[2] * height // 256))
    w = max(1, min(width - left, 1 + tail[3] * width // 256))
    return [(top, left, h, w), (height - h, width - w, h, w), (0, 0, 1, 1)]


def one_input(data: bytes) -> None:
    Image.MAX_IMAGE_PIXELS = PIXEL_LIMIT
    index = seek_index(data)
    if index is None:
        return
    try:
        header = read_header(data, "fuzz.jpg")
    except DecodeError:
        return
    if header.height * header.width > PIXEL_LIMIT:
        return
    changed = bytearray(data)
    changed[len(data) // 2] ^= 0x01
    for box in boxes(data, header.height, header.width):
        plain = outcome(data, box, None)
        assert same(outcome(data, box, index), plain), f"box {box}: the index changed the decode"
        assert same(outcome(bytes(changed), box, index), outcome(bytes(changed), box, None)), \
            f"box {box}: an index of other bytes was used"
