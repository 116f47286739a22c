"""The CPU kernel's last step, emitting finished rows (csrc/cpu_emit_avx2.c at SIMD level 2,
pim_resample.h's pim_emit_row below it), against numpy indexing as the oracle.

With a crop box the size of the output the kernel resamples nothing and only emits: output
row y is the crop's row y, flipped, each value looked up in its channel's table (float
outputs) or copied (uint8), laid out NCHW or NHWC. numpy computes the same by indexing. The
tables are random bit patterns, so a value taken from the wrong channel, pixel or table
entry shows. Widths 1-225 give rows shorter than the emitter's 8-pixel groups, partial last
groups and unaligned first ones; outputs at an odd element offset and with padded rows
leave no aligned vector at all (plain stores instead of streaming ones).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pimloader.backends import kernels as K

WIDTHS = [1, 7, 8, 9, 31, 224, 225]
DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32]
BITS = {1: (torch.uint8, np.uint8), 2: (torch.int16, np.uint16), 4: (torch.int32, np.uint32)}
PLACEMENTS = ["contiguous", "odd offset", "padded rows"]
BEST_SIMD = K.lib.pim_cpu_simd(-1)
SIMD_LEVELS = list(range(1, BEST_SIMD + 1)) or [0]  # 2: the AVX2 emitter, 3: + VBMI
HEIGHT = 3


def random_lut(dtype, channels: int, rng) -> np.ndarray | None:
    """Random output bit patterns for each channel's 256 values (None for uint8 outputs)."""
    if dtype == torch.uint8:
        return None
    bits = BITS[dtype.itemsize][1]
    return rng.integers(0, np.iinfo(bits).max, (channels, 256), dtype=bits, endpoint=True)


def expected(img, box, hflip: bool, layout: str, lut) -> np.ndarray:
    top, left, h, w = box
    crop = img[top:top + h, left:left + w]
    if hflip:
        crop = crop[:, ::-1]
    if lut is not None:
        crop = lut[np.arange(img.shape[2]), crop]  # lut[c, crop[y, x, c]]
    return crop.transpose(2, 0, 1) if layout == "NCHW" else crop


def placed_out(n: int, channels: int, width: int, dtype, layout: str, placement: str):
    shape = (n, channels, HEIGHT, width) if layout == "NCHW" else (n, HEIGHT, width, channels)
    if placement == "contiguous":
        return torch.empty(shape, dtype=dtype)
    if placement == "odd offset":
        storage = torch.empty(int(np.prod(shape)) + 1, dtype=dtype)
        return storage[1:].view(shape)
    if layout == "NCHW":
        return torch.empty(n, channels, HEIGHT + 1, width + 3, dtype=dtype)[:, :, :HEIGHT, :width]
    return torch.empty(n, HEIGHT + 1, width + 3, channels, dtype=dtype)[:, :HEIGHT, :width]


def emitted(images, boxes, size, hflip, layout, lut, out, level: int) -> np.ndarray:
    """The kernel's output at SIMD `level` as bit patterns, every element first poisoned."""
    out.fill_(7)
    K.lib.pim_cpu_simd(level)
    try:
        K.resized_crop_batch(images, boxes, size, out, hflip=hflip, layout=layout, lut=lut)
    finally:
        K.lib.pim_cpu_simd(-1)
    return out.contiguous().view(BITS[out.element_size()][0]).numpy().view(
        BITS[out.element_size()][1]).copy()


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", WIDTHS)
def test_emitted_rows_equal_numpy_indexing(width, dtype, layout, placement):
    rng = np.random.default_rng(width)
    img = rng.integers(0, 256, (HEIGHT + 4, width + 11, 3), dtype=np.uint8)
    boxes = [(0, 0, HEIGHT, width), (3, 10, HEIGHT, width), (2, 5, HEIGHT, width)]
    hflip = [False, True, True]
    lut = random_lut(dtype, 3, rng)
    want = np.stack([expected(img, b, f, layout, lut) for b, f in zip(boxes, hflip)])
    for level in SIMD_LEVELS:
        out = placed_out(len(boxes), 3, width, dtype, layout, placement)
        got = emitted([img] * 3, boxes, (HEIGHT, width), hflip, layout, lut, out, level)
        np.testing.assert_array_equal(got, want, err_msg=f"SIMD level {level}")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_resampled_rows_emit_alike_at_every_simd_level(dtype, layout):
    """After a resize (the rows come from the vertical pass): the AVX2 emitter writes what
    pim_emit_row writes."""
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (40, 300, 3), dtype=np.uint8)
    boxes = [(0, 0, 40, 300), (5, 17, 30, 250)]
    lut = random_lut(dtype, 3, rng)
    results = []
    for level in SIMD_LEVELS:
        out = placed_out(2, 3, 225, dtype, layout, "contiguous")
        results.append(emitted([img] * 2, boxes, (HEIGHT, 225), [True, False], layout, lut,
                               out, level))
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])


@pytest.mark.parametrize("hflip", [False, True])
def test_one_channel_rows_take_the_portable_emitter(hflip):
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (HEIGHT + 2, 40, 1), dtype=np.uint8)
    lut = random_lut(torch.float32, 1, rng)
    want = expected(img, (1, 3, HEIGHT, 31), hflip, "NCHW", lut)[None]
    for level in SIMD_LEVELS:
        out = placed_out(1, 1, 31, torch.float32, "NCHW", "contiguous")
        got = emitted([img], [(1, 3, HEIGHT, 31)], (HEIGHT, 31), [hflip], "NCHW", lut, out,
                      level)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_coloured_images_emit_alike_at_every_simd_level(layout):
    """Colour ops after the resize: the kernel emits the coloured image (emit_image) through
    the same emitters."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (120, 300, 3), dtype=np.uint8)
    lut = random_lut(torch.float32, 3, rng)
    colours = [[("brightness", 1.3), ("saturation", 0.7)]] * 2
    results = []
    for level in SIMD_LEVELS:
        out = placed_out(2, 3, 225, torch.float32, layout, "contiguous")
        out.fill_(7)
        K.lib.pim_cpu_simd(level)
        try:
            K.resized_crop_batch([img] * 2, [(0, 0, 120, 300), (10, 20, HEIGHT, 225)],
                                 (HEIGHT, 225), out, hflip=[True, False], layout=layout,
                                 lut=lut, colours=colours)
        finally:
            K.lib.pim_cpu_simd(-1)
        results.append(out.view(torch.int32).clone())
    for got in results[1:]:
        assert torch.equal(got, results[0])
