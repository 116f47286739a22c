"""Seek indexes (pimloader.decode.seek_index): a crop decoded with its file's index is the
crop of libjpeg's whole decode (numpy slicing of decode_jpeg's full image, roi=False), for
every sampling, odd sizes, greyscale, optimised and standard Huffman tables, and boxes
anywhere; files that cannot have one give None; an index of another file is not used.

Oracle: libjpeg's own decode of the whole file (pl_jpeg_decode with roi=0: no seeking, no
region), cropped with numpy. Whether the index was used is read from the decoder's result
(seek_used), so that a test cannot pass by falling back to the plain decode."""
from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from PIL import Image

from pimloader import decode
from pimloader.decode import jpeg as jpeg_module

SAMPLINGS = {
    "4:2:0": [(2, 2), (1, 1), (1, 1)],
    "4:2:2": [(2, 1), (1, 1), (1, 1)],
    "4:4:0": [(1, 2), (1, 1), (1, 1)],
    "4:4:4": [(1, 1)] * 3,
    "4:1:1": [(4, 1), (1, 1), (1, 1)],
}


def photo_like(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth gradients with texture and a few hard edges: DC values that change across
    the image (large DC differences between distant blocks) and busy AC codes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack([128 + 100 * np.sin(x / (17 + 5 * c) + y / (23 + 3 * c) + c)
                      for c in range(3)], axis=-1)
    image += rng.normal(0, 12, image.shape)
    image[height // 3: height // 2, width // 4: width // 2] = (250, 10, 30)
    return np.clip(image, 0, 255).astype(np.uint8)


def full(data: bytes) -> np.ndarray:
    return decode.decode_jpeg(data, roi=False)


def decoded_with(data: bytes, box, index, scale: int = 8):
    """(pixels, whether the index was used); `box` in the image scaled to scale/8."""
    data, buf, size = jpeg_module._buffer(data, None)
    pixels, result = jpeg_module._jpeg_call(data, buf, size, tuple(box), scale, 3, None, True,
                                            True, None, index)
    return pixels, bool(result.seek_used)


def random_boxes(height: int, width: int, count: int, seed: int):
    rng = np.random.default_rng(seed)
    boxes = [(0, 0, height, width), (height - 1, width - 1, 1, 1), (0, width // 2, 1, width // 2)]
    for _ in range(count):
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        boxes.append((int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)),
                      h, w))
    return boxes


def assert_crops_match(data: bytes, count: int = 40, seed: int = 0) -> int:
    """Every box decoded with the index equals the whole decode's crop; returns how many
    were decoded from the index."""
    index = decode.seek_index(data)
    assert index is not None
    whole = full(data)
    height, width = whole.shape[:2]
    used = 0
    for box in random_boxes(height, width, count, seed):
        top, left, h, w = box
        pixels, seek_used = decoded_with(data, box, index)
        np.testing.assert_array_equal(pixels, whole[top:top + h, left:left + w], err_msg=str(box))
        used += seek_used
    return used


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
@pytest.mark.parametrize("size", [(240, 320), (237, 341), (61, 500)])
def test_crops_decoded_with_the_index_are_the_whole_decode_cropped(sampling, size):
    data = decode.encode_jpeg(photo_like(*size, seed=size[1]), quality=88,
                              sampling=SAMPLINGS[sampling])
    assert assert_crops_match(data) > 10


@pytest.mark.parametrize("quality", [50, 95])
def test_greyscale(quality):
    image = photo_like(203, 317, seed=3)[:, :, 0]
    data = decode.encode_jpeg(image, quality=quality)
    assert decode.read_header(data).components == 1
    index = decode.seek_index(data)
    whole = decode.decode_jpeg(data, roi=False)
    for top, left, h, w in random_boxes(203, 317, 30, seed=quality):
        pixels, _ = decoded_with(data, (top, left, h, w), index)
        np.testing.assert_array_equal(pixels, whole[top:top + h, left:left + w])


@pytest.mark.parametrize("subsampling", [0, 1, 2])
def test_optimised_tables_that_lack_dc_categories(subsampling):
    """Pillow's optimize=True fits the Huffman tables to the file: a flat image leaves DC
    categories out of them (a row read from its index point starts from the DC predictions
    recorded there, with the file's own codes)."""
    image = np.full((160, 224, 3), 118, np.uint8)
    image[40:120, 50:180] = (128, 140, 90)
    image[::7, ::5] = 250
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=90, optimize=True,
                                subsampling=subsampling)
    assert assert_crops_match(buffer.getvalue(), seed=subsampling) > 10


def test_long_codes_and_large_coefficients_are_read_as_libjpeg_reads_them():
    """Noise at quality 100: AC magnitudes of 8-10 bits, whose codes in the standard tables
    are 16 bits long (past the decoder's 10-bit lookup), most codes with their magnitude
    bits longer than the lookup, and flat columns of blocks that end right after their DC;
    then the same with tables fitted to the file (optimize=True)."""
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (96, 448, 3), dtype=np.uint8)
    image[:, 200:264] = 128
    image[40:56] = photo_like(16, 448, seed=1)
    for optimize in (False, True):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=100, optimize=optimize)
        assert assert_crops_match(buffer.getvalue(), count=30, seed=7) > 10


def with_point_offsets(index: bytes, offset_of) -> bytes:
    """`index` with the byte offset of every point replaced by offset_of(point number): an
    index that still matches its file (header and fingerprint kept) but points elsewhere."""
    header, point_bytes = 24, 16
    forged = bytearray(index)
    for number, at in enumerate(range(header, len(forged), point_bytes)):
        forged[at:at + 4] = int(offset_of(number)).to_bytes(4, sys.byteorder)
    return bytes(forged)


def test_an_index_that_points_past_the_data_is_an_error():
    """Rows read from past the data's end read zeros, as libjpeg does past a marker: in
    strict mode libjpeg's own error for data that ends too soon, with strict=False a
    DecodeWarning; never a read past the bytes given."""
    data = decode.encode_jpeg(photo_like(240, 320, seed=8), quality=85)
    index = with_point_offsets(decode.seek_index(data), lambda number: len(data) + 4096)
    box = (100, 120, 60, 80)
    with pytest.raises(decode.DecodeError, match="premature end of data segment"):
        decode.decode_jpeg(data, box, seek_index=index)
    with pytest.warns(decode.DecodeWarning, match="premature end of data segment"):
        pixels = decode.decode_jpeg(data, box, seek_index=index, strict=False)
    assert pixels.shape == (60, 80, 3)


def test_an_index_that_points_at_no_code_is_libjpegs_bad_code_error():
    """Rows read from a comment of 0xFF 0x00 pairs (stuffed 0xFF bytes: bits that are all
    ones, which no Huffman code is): libjpeg's bad-code error in strict mode, a
    DecodeWarning with strict=False."""
    image = decode.encode_jpeg(photo_like(160, 200, seed=10), quality=85)
    comment = b"\xff\x00" * 64
    data = image[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + image[2:]
    index = with_point_offsets(decode.seek_index(data), lambda number: 6)
    box = (60, 70, 50, 60)
    with pytest.raises(decode.DecodeError, match="bad Huffman code"):
        decode.decode_jpeg(data, box, seek_index=index)
    with pytest.warns(decode.DecodeWarning, match="bad Huffman code"):
        decode.decode_jpeg(data, box, seek_index=index, strict=False)


def test_an_index_that_points_anywhere_in_the_data_decodes_or_raises():
    """Points moved to random bytes of the file: whatever the bits there decode to (other
    pixels, or a DecodeError for a bit string that is no code or a run past the data),
    never a crash or a read outside the data; the file decodes as before without it."""
    data = decode.encode_jpeg(photo_like(240, 320, seed=9), quality=90)
    index = decode.seek_index(data)
    rng = np.random.default_rng(9)
    errors = 0
    for trial in range(12):
        offsets = rng.integers(0, len(data), 1 << 12)
        forged = with_point_offsets(index, lambda number: offsets[number % len(offsets)])
        for box in random_boxes(240, 320, 4, seed=trial):
            try:
                pixels = decode.decode_jpeg(data, box, seek_index=forged)
            except decode.DecodeError:
                errors += 1
            else:
                assert pixels.shape == (box[2], box[3], 3)
    assert errors > 0   # some bit strings are no code: the check runs
    np.testing.assert_array_equal(decode.decode_jpeg(data, (10, 20, 30, 40)),
                                  full(data)[10:40, 20:60])


def test_pillow_photos_standard_and_optimised():
    for optimize in (False, True):
        buffer = io.BytesIO()
        Image.fromarray(photo_like(300, 400, seed=9)).save(buffer, "JPEG", quality=75,
                                                            optimize=optimize)
        assert assert_crops_match(buffer.getvalue(), seed=int(optimize)) > 10


@pytest.mark.parametrize("scale", [1, 2, 4, 5, 7])
@pytest.mark.parametrize("sampling", ["4:2:0", "4:2:2", "4:4:4"])
def test_reduced_dct_decodes_take_the_index(sampling, scale):
    """At a DCT scale M/8 (reduced_dct's decodes of large crops) a region decoded with the
    index is the region of libjpeg's whole decode at that scale; decode_jpeg_scaled passes
    the index on."""
    height, width = 237, 341
    data = decode.encode_jpeg(photo_like(height, width, seed=scale), quality=85,
                              sampling=SAMPLINGS[sampling])
    index = decode.seek_index(data)
    buffered, buf, size = jpeg_module._buffer(data, None)
    whole = jpeg_module._jpeg_call(buffered, buf, size, None, scale, 3, None, True, False,
                                   None)[0]
    used = 0
    for box in random_boxes(height, width, 30, seed=scale):
        (top, left, h, w), _ = jpeg_module.scaled_region(box, scale, height, width)
        pixels, seek_used = decoded_with(data, (top, left, h, w), index, scale)
        np.testing.assert_array_equal(pixels, whole[top:top + h, left:left + w], err_msg=str(box))
        used += seek_used
        np.testing.assert_array_equal(
            decode.decode_jpeg_scaled(data, box, scale=scale, seek_index=index).image, pixels)
    assert used > 5


def test_decode_jpeg_into_takes_the_index():
    data = decode.encode_jpeg(photo_like(256, 384, seed=1), quality=90)
    index, whole = decode.seek_index(data), full(data)
    buffer = np.empty(0, np.uint8)
    for top, left, h, w in random_boxes(256, 384, 20, seed=5):
        pixels, buffer = decode.decode_jpeg_into(data, (top, left, h, w), buffer,
                                                 seek_index=index)
        np.testing.assert_array_equal(pixels, whole[top:top + h, left:left + w])


def test_files_without_an_index():
    image = photo_like(64, 96, seed=2)
    assert decode.seek_index(decode.encode_jpeg(image, progressive=True)) is None
    assert decode.seek_index(decode.encode_jpeg(image, restart_rows=1)) is None
    assert decode.seek_index(decode.encode_jpeg(image, arithmetic=True)) is None
    cmyk = np.concatenate([image, image[:, :, :1]], axis=2)
    assert decode.seek_index(decode.encode_jpeg(cmyk)) is None
    png = io.BytesIO()
    Image.fromarray(image).save(png, "PNG")
    assert decode.seek_index(png.getvalue()) is None
    assert decode.seek_index(b"") is None
    data = decode.encode_jpeg(image)
    assert decode.seek_index(data[: len(data) // 2]) is None   # truncated: no last MCU


def test_an_index_of_another_file_is_not_used():
    first = decode.encode_jpeg(photo_like(128, 160, seed=4), quality=90)
    second = decode.encode_jpeg(photo_like(128, 160, seed=5), quality=90)
    box = (70, 90, 40, 50)
    pixels, used = decoded_with(second, box, decode.seek_index(first))
    assert not used
    np.testing.assert_array_equal(pixels, full(second)[70:110, 90:140])
    pixels, used = decoded_with(second, box, decode.seek_index(second))
    assert used
    with pytest.raises(TypeError, match="seek_index"):
        decode.decode_jpeg(second, box, seek_index="index")


def outcome(data: bytes, box, index):
    try:
        return decoded_with(data, box, index)
    except decode.DecodeError as error:
        return type(error), str(error)


def test_an_index_is_not_used_on_other_bytes_of_the_same_size():
    """Bytes changed inside the entropy-coded data (same size, same headers): the index
    made before is not used, so the decode raises or decodes as it does without one."""
    original = decode.encode_jpeg(photo_like(200, 200, seed=6), quality=90)
    index = decode.seek_index(original)
    for flip_at in (len(original) // 2, len(original) - 40):
        corrupt = bytearray(original)
        corrupt[flip_at] ^= 0x5A
        corrupt = bytes(corrupt)
        for box in [(150, 150, 40, 40), (0, 0, 200, 200), (90, 10, 30, 30)]:
            with_index, without = outcome(corrupt, box, index), outcome(corrupt, box, None)
            if isinstance(without[0], np.ndarray):
                np.testing.assert_array_equal(with_index[0], without[0])
                assert not with_index[1]
            else:
                assert with_index == without
