"""JPEG headers and restart layout: libjpeg-turbo's header read (csrc/jpeg_decode.c), the
host's own baseline parse and restart-interval scan (csrc/jpeg_layout.c) and the DPU chunk's
table and interval packing, then a decode of the whole image and of a box (the region and
restart-interval seeking paths of csrc/jpeg_decode.c and csrc/jpeg_restart.c).

Documented errors: DecodeError (corrupt, truncated, or over the pixel limit) and, from the
layout, UnsupportedJpeg. What is checked beyond them: every restart interval is a byte
range of the file, in order; a box decodes to the same pixels as the whole image cropped
(jpeg.decode_jpeg's promise), through the seeking path and without it."""
from __future__ import annotations

import numpy as np
from PIL import Image

from pimloader.backends.dpu.jpeg import prepare_image
from pimloader.decode import DecodeError, decode_jpeg, read_header
from pimloader.decode.baseline import UnsupportedJpeg, parse_baseline

CORPUS = "jpeg"
MAX_LEN = 4096
# images stay small: the decodes of a mutated size are cheap to refuse, not to run
PIXEL_LIMIT = 1 << 18


def one_input(data: bytes) -> None:
    Image.MAX_IMAGE_PIXELS = PIXEL_LIMIT
    try:
        header = read_header(data, "fuzz.jpg")
    except DecodeError:
        return
    check_layout(data, header)
    check_box(data, header)


def check_layout(data: bytes, header) -> None:
    try:
        layout = parse_baseline(data, "fuzz.jpg")
    except (DecodeError, UnsupportedJpeg):
        return
    spans = np.asarray(layout.intervals, np.int64).reshape(-1, 2)
    assert (spans[:, 0] <= spans[:, 1]).all() and (spans[:, 1] <= len(data)).all(), spans
    assert (spans[1:, 0] >= spans[:-1, 1]).all(), f"intervals overlap: {spans}"
    assert (layout.height, layout.width) == header[:2], (layout, header)
    try:
        image = prepare_image(data, "fuzz.jpg")
    except (DecodeError, UnsupportedJpeg):
        return
    image.tables()
    image.intervals(0)
    assert len(image.interval_bytes()) == image.data_bytes


def check_box(data: bytes, header) -> None:
    try:
        whole = decode_jpeg(data, name="fuzz.jpg")
    except DecodeError:
        return
    height, width = whole.shape[:2]
    box = (height // 3, width // 4, max(1, height // 2), max(1, width // 2))
    expected = whole[box[0]:box[0] + box[2], box[1]:box[1] + box[3]]
    for roi in (True, False):
        crop = decode_jpeg(data, box, roi=roi, name="fuzz.jpg")
        assert np.array_equal(crop, expected), f"box {box} (roi={roi}) differs from the whole image's"
