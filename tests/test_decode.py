"""Tests of pimloader.decode: the native JPEG decoder (full, region-of-interest, DCT-scaled),
its errors, and the Pillow path for other formats.

Oracles: Pillow (`Image.open(...).convert("RGB")`, torchvision's ImageFolder loader),
`torchvision.io.decode_jpeg`, and the decoder's own full decode (`roi=False`) for the
region-of-interest exactness, which must hold bit for bit whatever the other libraries'
libjpeg versions are.

`python tests/test_decode.py` prints the timing and DCT-scaling error measurements.
"""
from __future__ import annotations

import io
import pickle
import random
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pimloader import decode as D
from pimloader.decode import jpeg as J

# --------------------------------------------------------------------------------------
# Test images: real photographs where scikit-image is installed, else gradients + noise
# --------------------------------------------------------------------------------------
_PHOTOS = None


def _photos():
    global _PHOTOS
    if _PHOTOS is None:
        photos = []
        try:
            import skimage.data as data
            for fn in ("astronaut", "coffee", "chelsea", "rocket"):
                try:
                    photos.append(np.ascontiguousarray(getattr(data, fn)()[..., :3]))
                except Exception:  # a photo that needs a download
                    pass
        except ImportError:
            pass
        if not photos:
            photos = [_synthetic(512, 512, seed) for seed in range(3)]
        _PHOTOS = photos
    return _PHOTOS


def _synthetic(h, w, seed):
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], -1)
    for _ in range(12):  # blobs with edges, some texture
        cy, cx, r = rng.randint(0, h), rng.randint(0, w), rng.randint(5, max(6, h // 4))
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.randint(0, 256, 3)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def photo(h, w, index=0):
    """An h x w RGB photograph (resized so that the longer side fits, then cropped)."""
    src = Image.fromarray(_photos()[index % len(_photos())])
    s = max(h / src.height, w / src.width)
    im = src.resize((max(w, round(src.width * s)), max(h, round(src.height * s))),
                    Image.LANCZOS)
    return np.asarray(im)[:h, :w].copy()


def pil_jpeg(arr, quality=90, subsampling=2, progressive=False, mode=None):
    im = Image.fromarray(arr)
    if mode is not None:
        im = im.convert(mode)
    b = io.BytesIO()
    im.save(b, "JPEG", quality=quality, subsampling=subsampling, progressive=progressive)
    return b.getvalue()


def pil_rgb(data, box=None, mode="RGB"):
    with Image.open(io.BytesIO(data)) as im:
        out = np.asarray(im.convert(mode))
    if out.ndim == 2:
        out = out[:, :, None]
    if box is not None:
        t, l, h, w = box
        out = out[t:t + h, l:l + w]
    return out


def _raw(data, region, scale=8, channels=3, roi=True, strict=True):
    """The C call on a box in scaled coordinates -> (array, pl_jpeg_result)."""
    buf = J.ffi.from_buffer("uint8_t[]", data)
    return J._jpeg_call(data, buf, len(data), region, scale, channels, None, strict, roi,
                        "test")


def full_scaled(data, scale, channels=3):
    return _raw(data, None, scale, channels, roi=False)[0]


# Encodings the exactness tests run over: name -> bytes (built once, lazily)
_H, _W = 251, 333  # odd sizes, not multiples of any iMCU


def _encodings():
    img = photo(_H, _W, 0)
    big = photo(375, 500, 1)
    cmyk_inverted = 255 - np.asarray(Image.fromarray(img).convert("CMYK"))
    return {
        "420-q75": pil_jpeg(img, 75, 2),
        "420-q95": pil_jpeg(img, 95, 2),
        "422-q90": pil_jpeg(img, 90, 1),
        "444-q90": pil_jpeg(img, 90, 0),
        "420-prog": pil_jpeg(img, 85, 2, progressive=True),
        "444-prog": pil_jpeg(img, 85, 0, progressive=True),
        "422-prog": pil_jpeg(img, 85, 1, progressive=True),
        "gray": pil_jpeg(img, 90, mode="L"),
        "gray-prog": pil_jpeg(img, 90, mode="L", progressive=True),
        "440": D.encode_jpeg(img, sampling=[(1, 2), (1, 1), (1, 1)]),
        "411": D.encode_jpeg(img, sampling=[(4, 1), (1, 1), (1, 1)]),
        "4x2": D.encode_jpeg(img, sampling=[(4, 2), (1, 1), (1, 1)]),
        "2x4": D.encode_jpeg(img, sampling=[(2, 4), (1, 1), (1, 1)]),
        "420-restart": D.encode_jpeg(img, restart_rows=1),
        "420-arith": D.encode_jpeg(img, arithmetic=True),
        "420-arith-prog": D.encode_jpeg(img, arithmetic=True, progressive=True),
        "cmyk": pil_jpeg(img, 90, 0, mode="CMYK"),
        "ycck-420": D.encode_jpeg(cmyk_inverted, colorspace="YCCK",
                                  sampling=[(2, 2), (1, 1), (1, 1), (2, 2)]),
        "500x375-420": pil_jpeg(big, 90, 2),
        "500x375-420-prog": pil_jpeg(big, 90, 2, progressive=True),
    }


_ENC = None


def enc(name):
    global _ENC
    if _ENC is None:
        _ENC = _encodings()
    return _ENC[name]


ENCODING_NAMES = ["420-q75", "420-q95", "422-q90", "444-q90", "420-prog", "444-prog",
                  "422-prog", "gray", "gray-prog", "440", "411", "4x2", "2x4", "420-restart",
                  "420-arith", "420-arith-prog", "cmyk", "ycck-420", "500x375-420",
                  "500x375-420-prog"]


def edge_boxes(H, W):
    """Boxes at borders, 1-pixel boxes, iMCU boundaries, odd sizes."""
    boxes = [(0, 0, H, W), (0, 0, 1, 1), (H - 1, W - 1, 1, 1), (0, W - 1, H, 1),
             (H - 1, 0, 1, W), (0, 0, H, 1), (0, 0, 1, W), (1, 1, H - 2, W - 2),
             (0, 0, H - 1, W - 1), (1, 1, H - 1, W - 1), (H // 2, W // 2, 1, 1)]
    for b in (7, 8, 9, 15, 16, 17, 31, 32, 33):
        boxes += [(b, b, 1, 1), (b, b, 3, 5), (b - 1, b - 1, 2, 2), (0, b, H, 1), (b, 0, 1, W),
                  (b, b, H - b, W - b)]
    boxes += [(H - 3, W - 5, 3, 5), (0, W - 17, 17, 17), (H - 17, 0, 17, 17)]
    return sorted({(t, l, h, w) for t, l, h, w in boxes
                   if h >= 1 and w >= 1 and t >= 0 and l >= 0 and t + h <= H and l + w <= W})


def random_boxes(H, W, n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        h, w = rng.randint(1, H), rng.randint(1, W)
        out.append((rng.randint(0, H - h), rng.randint(0, W - w), h, w))
    return out


# --------------------------------------------------------------------------------------
# Full decodes against Pillow and torchvision
# --------------------------------------------------------------------------------------
def _close(a, b, *, exact_fraction=0.99, max_diff=2):
    """Pillow/torchvision bundle their own libjpeg-turbo: they agree bit for bit with the
    system one today (checked by test_bit_identical_to_pillow_here), the tolerance only
    keeps other versions from failing the suite."""
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    assert diff.max() <= max_diff, diff.max()
    assert (diff == 0).mean() >= exact_fraction


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_full_decode_matches_pillow(name):
    data = enc(name)
    _close(D.decode_jpeg(data), pil_rgb(data))


def test_bit_identical_to_pillow_here():
    """Pillow's JPEG decodes, whole and DCT-scaled (Image.draft at 1/2, 1/4, 1/8), equal
    pimloader's bit for bit over every encoding of the test set: both run libjpeg-turbo's
    accurate integer IDCT (and its scaled IDCTs) with fancy upsampling (here Pillow 13's
    bundled libjpeg-turbo 3.2 and Debian's 2.1.5). test_image_pipeline's reduced-DCT oracle
    relies on this. Skipped only where Pillow's codec is not libjpeg-turbo (IJG libjpeg
    upsamples and scales differently; the tolerant comparisons above still apply there)."""
    from PIL import features
    if not features.check_feature("libjpeg_turbo"):
        pytest.skip(f"Pillow's JPEG codec is libjpeg {features.version('jpg')}, "
                    "not libjpeg-turbo")
    differences = {}
    for name in ENCODING_NAMES:
        data = enc(name)
        height, width = D.read_header(data)[:2]
        for s in (1, 2, 4, 8):
            with Image.open(io.BytesIO(data)) as image:
                if s > 1:
                    image.draft("RGB", (width // s, height // s))
                pillow = np.asarray(image.convert("RGB"))
            assert pillow.shape[:2] == D.scaled_size(height, width, 8 // s), (name, s)
            ours = full_scaled(data, 8 // s)
            if not np.array_equal(ours, pillow):
                differences[name, s] = int(np.abs(ours.astype(int) - pillow).max())
    assert not differences, f"(encoding, 1/scale): largest difference {differences}"


@pytest.mark.parametrize("name", ["420-q75", "422-q90", "444-q90", "420-prog", "gray",
                                  "420-restart", "500x375-420"])
def test_full_decode_matches_torchvision(name):
    from torchvision.io import ImageReadMode, decode_jpeg
    data = enc(name)
    tv = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                     mode=ImageReadMode.RGB).permute(1, 2, 0).numpy()
    _close(D.decode_jpeg(data), tv)


def test_header():
    h = D.read_header(enc("420-q75"))
    assert h == (_H, _W, 3, "YCbCr", False)
    assert D.read_header(enc("420-prog")).progressive is True
    assert D.read_header(enc("gray")) == (_H, _W, 1, "GRAY", False)
    assert D.read_header(enc("cmyk"))[2:4] == (4, "CMYK")
    assert D.read_header(enc("ycck-420"))[2:4] == (4, "YCCK")
    height, width, components, colorspace, progressive = D.read_header(np.frombuffer(
        enc("444-q90"), np.uint8))
    assert (height, width) == (_H, _W)
    assert D.image_size(enc("420-q75")) == (_H, _W)


# --------------------------------------------------------------------------------------
# Region of interest: bit-identical to full decode + crop
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENCODING_NAMES)
@pytest.mark.parametrize("scale", [8, 4, 2, 1, 3, 6])
def test_roi_equals_full_decode_then_crop(name, scale):
    data = enc(name)
    full = full_scaled(data, scale)
    H, W = full.shape[:2]
    assert (H, W) == D.scaled_size(*D.read_header(data)[:2], scale)
    boxes = edge_boxes(H, W) + random_boxes(H, W, 40, hash((name, scale)) & 0xFFFF)
    for box in boxes:
        got, res = _raw(data, box, scale)
        t, l, h, w = box
        if not np.array_equal(got, full[t:t + h, l:l + w]):
            bad = np.argwhere(got != full[t:t + h, l:l + w])
            pytest.fail(f"{name} scale {scale}/8 box {box}: {len(bad)} values differ, "
                        f"first at {bad[0].tolist()} (decoded columns {res.decoded_left}"
                        f"+{res.decoded_width})")


@pytest.mark.parametrize("name", ["420-q75", "444-q90", "422-q90", "gray", "420-prog",
                                  "500x375-420"])
def test_roi_really_skips_and_crops(name):
    data = enc(name)
    H, W = D.read_header(data)[:2]
    box = (H // 2, W // 2, 20, 30)
    got, res = _raw(data, box)
    assert res.roi_used == 1
    assert res.rows_skipped == box[0]
    assert res.decoded_width < W
    assert res.decoded_left <= box[1] < box[1] + box[3] <= res.decoded_left + res.decoded_width
    if not D.read_header(data).progressive:
        # rows below the box are never produced (a few of context may be)
        assert res.rows_decoded < box[2] + 40


def test_roi_public_api_and_pillow_crop():
    data = enc("500x375-420")
    for box in [(0, 0, 375, 500), (10, 20, 200, 300), (374, 499, 1, 1), (37, 61, 113, 257)]:
        got = D.decode_jpeg(data, box)
        assert np.array_equal(got, D.decode_jpeg(data, box, roi=False))
        _close(got, pil_rgb(data, box))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 70), w=st.integers(1, 70), sub=st.sampled_from([0, 1, 2]),
       prog=st.booleans(), scale=st.sampled_from([8, 8, 4, 2, 1, 3]), data=st.data())
def test_roi_property(h, w, sub, prog, scale, data):
    assert_a_drawn_box_decodes_exactly(pil_jpeg(photo(h, w, 2), 85, sub, prog), scale, data)


def assert_a_drawn_box_decodes_exactly(jpeg, scale, data):
    """A box drawn by hypothesis, decoded alone, equals that box of the whole image."""
    full = full_scaled(jpeg, scale)
    H, W = full.shape[:2]
    bh, bw = data.draw(st.integers(1, H)), data.draw(st.integers(1, W))
    t, l = data.draw(st.integers(0, H - bh)), data.draw(st.integers(0, W - bw))
    got, _ = _raw(jpeg, (t, l, bh, bw), scale)
    assert np.array_equal(got, full[t:t + bh, l:l + bw])


# --------------------------------------------------------------------------------------
# decode_jpeg_into: the loader's decode into reused buffers, without the copy-out
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_decode_into_equals_full_decode_then_crop(name):
    data = enc(name)
    full = full_scaled(data, 8)
    H, W = full.shape[:2]
    buffer = np.empty(0, np.uint8)
    for box in edge_boxes(H, W) + random_boxes(H, W, 30, hash(name) & 0xFFFF):
        got, buffer = D.decode_jpeg_into(data, box, buffer, name="x.jpg")
        t, l, h, w = box
        assert got.shape == (h, w, 3)
        assert got.base is buffer  # a view of the (reused) buffer: nothing was copied out
        assert np.array_equal(got, full[t:t + h, l:l + w]), (name, box)


def test_decode_into_grows_and_reuses_its_buffer():
    data = enc("500x375-420")
    small = np.empty(10, np.uint8)
    _, grown = D.decode_jpeg_into(data, (10, 20, 100, 50), small)
    assert grown is not small and grown.nbytes >= 100 * 500 * 3
    again, same = D.decode_jpeg_into(data, (0, 300, 80, 200), grown)
    assert same is grown
    full = D.decode_jpeg(data)
    assert np.array_equal(again, full[0:80, 300:500])
    taller, same = D.decode_jpeg_into(data, (0, 0, 375, 500), grown)   # room for any box
    assert same is grown and np.array_equal(taller, full)


def test_decode_buffers_grow_to_the_largest_needed():
    """The producer's buffers: a new one has the largest size a decode has needed, and
    smaller ones given back are dropped, so that a tall box does not find a short one."""
    from pimloader.pipelines.images import DecodeBuffers
    buffers = DecodeBuffers()
    data = enc("500x375-420")
    first = buffers.take()
    assert first.nbytes == 0
    small, grown = D.decode_jpeg_into(data, (0, 0, 10, 10), first)
    buffers.lend(grown)
    old = np.empty(1000, np.uint8)
    buffers.lend(old)
    buffers.give_back([small, old[:10]])
    assert buffers.take() is grown                     # kept
    assert buffers.take().nbytes == grown.nbytes       # a new one, as large


def test_decode_into_greyscale_channels_and_errors():
    grey = enc("gray")
    full = D.decode_jpeg(grey, channels=1)
    got, _ = D.decode_jpeg_into(grey, (3, 5, 40, 60), np.empty(0, np.uint8), channels=1)
    assert np.array_equal(got, full[3:43, 5:65])
    with pytest.raises(ValueError, match="channels=1 needs a greyscale JPEG"):
        D.decode_jpeg_into(enc("420-q75"), (0, 0, 8, 8), np.empty(0, np.uint8), channels=1)
    with pytest.raises(ValueError, match="channels must be 3 or 1"):
        D.decode_jpeg_into(grey, (0, 0, 8, 8), np.empty(0, np.uint8), channels=None)
    with pytest.raises(ValueError, match="empty or negative"):
        D.decode_jpeg_into(grey, (0, 0, 0, 8), np.empty(0, np.uint8))
    with pytest.raises(ValueError, match="outside"):
        D.decode_jpeg_into(grey, (0, 0, 10_000, 8), np.empty(0, np.uint8))
    cut = enc("500x375-420")[:5000]
    with pytest.raises(D.DecodeError, match=r"photos/cut\.jpg: .*Premature end"):
        D.decode_jpeg_into(cut, (0, 0, 8, 8), np.empty(0, np.uint8), name="photos/cut.jpg")


def test_margin_rows_are_packed_at_the_decoded_width():
    data = enc("500x375-420")
    req = J.ffi.new("pl_jpeg_request *", {"scale_num": 8, "top": 0, "left": 0, "height": 8,
                                           "width": 8, "channels": 3, "strict": 1, "roi": 1,
                                           "margin": 1})
    res = J.ffi.new("pl_jpeg_result *")
    out = np.empty(8 * 500 * 3, np.uint8)
    buf = J.ffi.from_buffer("uint8_t[]", data)
    rc = J.lib.pl_jpeg_decode(buf, len(data), req, J._pointer(out), 1500, out.nbytes, res)
    assert rc == J.lib.PL_JPEG_EARG and b"out_row_stride must be 0" in J.ffi.string(res.message)
    rc = J.lib.pl_jpeg_decode(buf, len(data), req, J._pointer(out), 0, 8 * 500 * 3 - 1, res)
    assert rc == J.lib.PL_JPEG_EARG and b"too small" in J.ffi.string(res.message)


# --------------------------------------------------------------------------------------
# Restart markers: lossless copies a crop is decoded from without the rest
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENCODING_NAMES)
@pytest.mark.parametrize("max_interval,optimize", [(1, True), (3, True), (4, True),
                                                   (1, False), (4, False)])
def test_restart_copy_is_lossless_and_crops_decode_exactly(name, max_interval, optimize):
    """Huffman tables fitted to the copy (optimize=True) or the standard ones: the same
    pixels either way."""
    original = enc(name)
    copy = D.add_restart_markers(original, max_interval, name="x.jpg", optimize=optimize)
    if not optimize:  # other tables: other bytes
        assert copy != D.add_restart_markers(original, max_interval, name="x.jpg")
    full = full_scaled(original, 8)
    assert np.array_equal(full_scaled(copy, 8), full)  # same coefficients, same pixels
    info = D.seek_info(copy)
    assert info is not None and 1 <= info.interval <= max_interval
    H, W = full.shape[:2]
    assert -(-W // info.mcu_size[1]) % info.interval == 0
    boxes = edge_boxes(H, W) + random_boxes(H, W, 30, hash((name, max_interval)) & 0xFFFF)
    seeks = 0
    for box in boxes:
        got, res = _raw(copy, box)
        t, l, h, w = box
        if not np.array_equal(got, full[t:t + h, l:l + w]):
            pytest.fail(f"{name} interval {info.interval} box {box}: differs (seek "
                        f"{res.seek_used}, decoded columns {res.decoded_left}"
                        f"+{res.decoded_width})")
        seeks += res.seek_used
        into, _ = D.decode_jpeg_into(copy, box, np.empty(0, np.uint8))
        assert np.array_equal(into, got)
    assert seeks >= len(boxes) // 2


@pytest.mark.parametrize("name", ENCODING_NAMES)
@pytest.mark.parametrize("scale", [4, 2, 1, 3, 6])
def test_restart_seek_at_dct_scales(name, scale):
    """Seeking at a reduced DCT scale (reduced_dct): the same pixels as the original's
    decode at that scale, cropped."""
    original = enc(name)
    full = full_scaled(original, scale)
    H, W = full.shape[:2]
    for max_interval in (1, 4):
        copy = D.add_restart_markers(original, max_interval)
        assert np.array_equal(full_scaled(copy, scale), full)
        boxes = edge_boxes(H, W) + random_boxes(H, W, 20, hash((name, scale)) & 0xFFFF)
        for box in boxes:
            got, res = _raw(copy, box, scale)
            t, l, h, w = box
            assert np.array_equal(got, full[t:t + h, l:l + w]), (
                name, scale, max_interval, box, res.seek_used)
            assert (res.scaled_height, res.scaled_width) == (H, W)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 90), w=st.integers(1, 90), sub=st.sampled_from([0, 1, 2]),
       interval=st.integers(1, 5), scale=st.sampled_from([8, 8, 4, 2, 1, 3]), data=st.data())
def test_restart_seek_property(h, w, sub, interval, scale, data):
    jpeg = D.add_restart_markers(pil_jpeg(photo(h, w, 3), 85, sub), interval)
    assert_a_drawn_box_decodes_exactly(jpeg, scale, data)


def test_seek_decodes_only_the_intervals_around_the_box():
    copy = D.add_restart_markers(enc("500x375-420"), 4)
    got, res = _raw(copy, (300, 400, 20, 30))
    assert res.seek_used == 1
    assert res.decoded_left >= 400 - 64 and res.decoded_width <= 30 + 2 * 64 + 16
    assert res.rows_skipped < 32  # rows above the box inside its first intervals only
    assert (res.scaled_height, res.scaled_width) == (375, 500)
    plain, res = _raw(enc("500x375-420"), (300, 400, 20, 30))
    assert res.seek_used == 0 and res.rows_skipped == 300
    assert np.array_equal(got, plain)
    # a box that needs nearly every interval a plain decode reads is decoded plainly
    almost_all, res = _raw(copy, (16, 20, 340, 460))
    assert res.seek_used == 0
    assert np.array_equal(almost_all, D.decode_jpeg(copy)[16:356, 20:480])


def test_files_the_decoder_cannot_seek_in():
    assert D.seek_info(enc("500x375-420")) is None  # no restart markers
    assert D.seek_info(enc("420-prog")) is None  # progressive
    copy = D.add_restart_markers(enc("500x375-420"), 4)
    cut = copy[:len(copy) // 2]
    assert D.seek_info(cut) is None  # intervals missing: the plain decoder reports it
    with pytest.raises(D.DecodeError, match=r"cut\.jpg: .*Premature end"):
        D.decode_jpeg(cut, (0, 0, 8, 8), name="cut.jpg")
    # 420-restart has a marker every MCU row (restart_in_rows=1): seekable by rows
    info = D.seek_info(enc("420-restart"))
    assert info is not None and info.interval == -(-_W // 16)


def test_damaged_seekable_files_raise_or_decode_never_crash():
    """Bytes of a seekable copy flipped anywhere (headers, markers, entropy data): each box
    decodes, raises DecodeError naming the file, or (strict=False) warns; no crash, no
    read outside the data (the suite runs this under the normal allocator; the C code
    bounds every read by the data's size)."""
    copy = D.add_restart_markers(enc("500x375-420"), 2)
    rng = random.Random(5)
    boxes = [(0, 0, 8, 8), (300, 400, 20, 30), (100, 100, 200, 200), (0, 0, 375, 500)]
    for trial in range(300):
        data = bytearray(copy)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if trial % 10 == 0:
            data = data[:rng.randrange(len(data))]
        for box in boxes:
            try:
                got = D.decode_jpeg(bytes(data), box, name="damaged.jpg")
                assert got.shape == (box[2], box[3], 3)
            except D.DecodeError as error:
                assert error.name == "damaged.jpg"
            except ValueError as error:  # a damaged header can shrink the image below the box
                assert "damaged.jpg" in str(error)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", D.DecodeWarning)
                try:
                    D.decode_jpeg(bytes(data), box, strict=False, name="damaged.jpg")
                except (D.DecodeError, ValueError):
                    pass


def test_add_restart_markers_errors():
    with pytest.raises(ValueError, match="max_interval"):
        D.add_restart_markers(enc("gray"), 0)
    with pytest.raises(D.DecodeError, match="a.png: not a JPEG"):
        D.add_restart_markers(b"\x89PNG\r\n\x1a\n" + bytes(30), name="a.png")
    with pytest.raises(D.DecodeError, match="half.jpg"):
        data = enc("500x375-420")
        D.add_restart_markers(data[:len(data) // 2], name="half.jpg")


def test_coefficients_a_baseline_encoder_cannot_write_are_refused_not_miscopied():
    """Fuzz finding 7: a decoder reads AC coefficients of 11 bits without a warning, but
    libjpeg's encoder writes them as other data: the copy decoded to other pixels."""
    path = Path(__file__).parent.parent / "fuzz/regressions/seekable"
    data = (path / "ac_coefficients_beyond_baseline_10_bits.jpg").read_bytes()
    Image.open(io.BytesIO(data)).load()   # Pillow reads it
    with pytest.raises(D.DecodeError, match="big.jpg: a DCT coefficient is larger"):
        D.add_restart_markers(data, 5, name="big.jpg", optimize=False)
    assert D.seekable_version(data, 5) == ("unreadable", data)
    extreme = np.tile(np.array([[0, 255], [255, 0]], np.uint8), (32, 32))  # largest ACs
    original = pil_jpeg(np.repeat(extreme[..., None], 3, axis=2), 100, 0)
    copy = D.add_restart_markers(original, 2, optimize=False)
    assert np.array_equal(D.decode_jpeg(copy), D.decode_jpeg(original))


# --------------------------------------------------------------------------------------
# DCT scaling
# --------------------------------------------------------------------------------------
def test_scaled_sizes_match_libjpeg():
    for h, w in [(1, 1), (7, 9), (17, 31), (64, 48), (251, 333)]:
        data = pil_jpeg(photo(h, w), 90, 2)
        for m in range(1, 9):
            assert full_scaled(data, m).shape[:2] == D.scaled_size(h, w, m)


def test_pick_scale():
    assert D.pick_scale(448, 448, 224, 224) == 4
    assert D.pick_scale(447, 448, 224, 224) == 8  # under 2x in one direction
    assert D.pick_scale(896, 1000, 224, 224) == 2
    assert D.pick_scale(1792, 1792, 224, 224) == 1
    assert D.pick_scale(900, 900, 224, 224, scales=range(1, 9)) == 2
    assert D.pick_scale(700, 700, 224, 224, scales=range(1, 9)) == 3
    assert D.pick_scale(300, 300, 224, 224, min_ratio=1.0, scales=range(1, 9)) == 6
    assert D.pick_scale(300, 300, 224, 224, min_ratio=1.0) == 8
    for ch, cw, oh, ow in [(500, 375, 112, 112), (375, 375, 64, 128), (120, 90, 40, 30)]:
        m = D.pick_scale(ch, cw, oh, ow, min_ratio=1.0, scales=range(1, 9))
        assert ch * m / 8 >= oh and cw * m / 8 >= ow
        if m > 1:
            assert ch * (m - 1) / 8 < oh or cw * (m - 1) / 8 < ow


def test_scaled_region_mapping():
    rng = random.Random(1)
    for _ in range(500):
        H, W = rng.randint(1, 600), rng.randint(1, 600)
        h, w = rng.randint(1, H), rng.randint(1, W)
        box = (rng.randint(0, H - h), rng.randint(0, W - w), h, w)
        m = rng.randint(1, 8)
        (rt, rl, rh, rw), (ft, fl, fh, fw) = D.scaled_region(box, m, H, W)
        sh, sw = D.scaled_size(H, W, m)
        assert 0 <= rt and rt + rh <= sh and 0 <= rl and rl + rw <= sw and rh >= 1 and rw >= 1
        assert 0 <= ft < 1 and 0 <= fl < 1  # the box starts inside the region's first pixel
        assert ft + fh <= rh + 1e-9 and fl + fw <= rw + 1e-9
        assert abs((rt + ft) * 8 / m - box[0]) < 1e-9 and abs(fh * 8 / m - h) < 1e-9


@pytest.mark.parametrize("name", ["500x375-420", "420-prog", "444-q90", "gray"])
def test_scaled_decode_of_box_equals_scaled_full_crop(name):
    data = enc(name)
    H, W = D.read_header(data)[:2]
    for m in (1, 2, 4, 8):
        full = full_scaled(data, m)
        for box in random_boxes(H, W, 15, m) + [(0, 0, H, W), (H - 1, W - 1, 1, 1)]:
            s = D.decode_jpeg_scaled(data, box, scale=m)
            (rt, rl, rh, rw), frac = D.scaled_region(box, m, H, W)
            assert s.scale == m and s.box == frac
            assert np.array_equal(s.image, full[rt:rt + rh, rl:rl + rw])


def test_scaled_path_error_is_small():
    """DCT-scaled decode + resample from the fractional box vs exact decode + resample."""
    data = enc("500x375-420")
    errors = []
    for box in [(0, 0, 375, 500), (20, 30, 300, 400), (50, 100, 260, 250)]:
        s = D.decode_jpeg_scaled(data, box, size=(112, 112))
        assert s.scale in (2, 4)
        exact = D.decode_jpeg(data, box)
        a = np.asarray(Image.fromarray(exact).resize((112, 112), Image.BILINEAR)).astype(int)
        t, l, h, w = s.box
        b = np.asarray(Image.fromarray(s.image).resize((112, 112), Image.BILINEAR,
                                                       box=(l, t, l + w, t + h))).astype(int)
        errors.append(np.abs(a - b))
    err = np.concatenate([e.ravel() for e in errors])
    assert err.mean() < 2.0 and np.percentile(err, 99) < 20
    # size where the crop is under 2x the output: exact decode
    s = D.decode_jpeg_scaled(data, (0, 0, 300, 300), size=(224, 224))
    assert s.scale == 8 and np.array_equal(s.image, D.decode_jpeg(data, (0, 0, 300, 300)))
    assert s.int_box() == (0, 0, 300, 300)


# --------------------------------------------------------------------------------------
# Colour spaces
# --------------------------------------------------------------------------------------
def test_greyscale_channels():
    data = enc("gray")
    assert np.array_equal(D.decode_jpeg(data), pil_rgb(data))  # expanded to RGB
    native = D.decode_jpeg(data, channels=None)
    assert native.shape == (_H, _W, 1)
    assert np.array_equal(native, pil_rgb(data, mode="L"))
    assert np.array_equal(D.decode_jpeg(data, (3, 4, 5, 6), channels=1), native[3:8, 4:10])
    assert D.decode_jpeg(enc("420-q75"), channels=None).shape == (_H, _W, 3)
    with pytest.raises(ValueError, match="greyscale"):
        D.decode_jpeg(enc("420-q75"), channels=1)


@pytest.mark.parametrize("name", ["cmyk", "ycck-420"])
def test_cmyk_like_pillow(name):
    data = enc(name)
    ours = D.decode_jpeg(data)
    assert np.array_equal(ours, pil_rgb(data))  # the conversion is Pillow's, exactly
    box = (10, 20, 100, 150)
    assert np.array_equal(D.decode_jpeg(data, box), ours[10:110, 20:170])
    # and it is the photo, not its inverse
    assert np.abs(ours.astype(int) - photo(_H, _W, 0)).mean() < 8


# --------------------------------------------------------------------------------------
# Other formats through Pillow
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "I;16"])
def test_png_and_friends(mode):
    img = Image.fromarray(photo(61, 87, 3))
    img = img.convert(mode) if mode != "I;16" else Image.fromarray(
        (np.asarray(img.convert("L")).astype(np.uint16) * 257))
    b = io.BytesIO()
    img.save(b, "PNG")
    data = b.getvalue()
    assert not D.is_jpeg(data)
    expect = pil_rgb(data)
    assert np.array_equal(D.decode_image(data), expect)
    assert np.array_equal(D.decode_image(data, (5, 7, 20, 30)), expect[5:25, 7:37])
    assert D.image_size(data) == (61, 87)
    s = D.decode_image_scaled(data, (5, 7, 20, 30), size=(4, 4))
    assert s.scale == 8 and np.array_equal(s.image, expect[5:25, 7:37])
    if mode in ("L", "I;16"):
        assert D.decode_image(data, channels=None).shape == (61, 87, 1)


def test_decode_image_dispatches_jpeg():
    data = enc("420-q75")
    assert D.is_jpeg(data)
    assert np.array_equal(D.decode_image(data, (1, 2, 3, 4)), D.decode_jpeg(data)[1:4, 2:6])
    b = io.BytesIO()
    Image.fromarray(photo(40, 50)).save(b, "WEBP")
    _close(D.decode_image(b.getvalue()), pil_rgb(b.getvalue()), exact_fraction=1.0, max_diff=0)


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["500x375-420", "420-prog", "444-q90", "gray",
                                  "420-restart"])
@pytest.mark.parametrize("keep", [0.05, 0.3, 0.7, 0.97])
def test_truncated_raises_naming_the_file(name, keep):
    data = enc(name)
    cut = data[:int(len(data) * keep)]
    for box in (None, (0, 0, 8, 8)):  # even a box at the top sees the truncation
        with pytest.raises(D.DecodeError, match=r"photos/cut\.jpg: .*Premature end") as ei:
            D.decode_jpeg(cut, box, name="photos/cut.jpg")
        assert ei.value.name == "photos/cut.jpg"
        with pytest.raises(D.DecodeError, match="photos/cut.jpg"):
            D.decode_image(cut, box, name="photos/cut.jpg")


def test_truncated_non_strict_warns_and_fills():
    data = enc("500x375-420")
    cut = data[:len(data) // 2]
    with pytest.warns(D.DecodeWarning, match="half.jpg"):
        img = D.decode_jpeg(cut, strict=False, name="half.jpg")
    full = D.decode_jpeg(data)
    assert img.shape == full.shape
    assert np.array_equal(img[:50], full[:50])  # the top is there
    assert np.abs(img[-8:].astype(int) - 128).max() <= 2  # the bottom is grey


def test_missing_eoi_only_is_fine():
    data = enc("500x375-420")
    assert data[-2:] == b"\xff\xd9"
    full = D.decode_jpeg(data)
    assert np.array_equal(D.decode_jpeg(data[:-2]), full)
    assert np.array_equal(D.decode_jpeg(data[:-1]), full)
    assert np.array_equal(D.decode_jpeg(data[:-2], (300, 400, 10, 10)), full[300:310, 400:410])
    prog = enc("500x375-420-prog")
    assert np.array_equal(D.decode_jpeg(prog[:-2]), D.decode_jpeg(prog))


def test_trailing_data_and_eoi_lookalikes():
    data = enc("500x375-420")
    full = D.decode_jpeg(data)
    box = (300, 400, 10, 10)
    trailer = data + bytes(range(256)) * 40  # e.g. an appended preview: ROI still used
    got, res = _raw(trailer, box)
    assert res.roi_used == 1 and np.array_equal(got, full[300:310, 400:410])
    # An FF D9 in a header segment (a comment here, an EXIF thumbnail in the wild) does
    # not make a cut file look complete.
    comment = b"\xff\xfe\x00\x06x\xff\xd9y"
    with_comment = data[:2] + comment + data[2:]
    assert np.array_equal(D.decode_jpeg(with_comment), full)
    cut = with_comment[:len(with_comment) * 2 // 3]
    with pytest.raises(D.DecodeError, match="c.jpg: Premature end"):
        D.decode_jpeg(cut, (0, 0, 8, 8), name="c.jpg")


def test_progressive_cut_between_scans():
    data = enc("500x375-420-prog")
    sos = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]
    assert len(sos) > 3
    cut = data[:sos[3]]  # the first three scans only
    with pytest.raises(D.DecodeError, match="scans missing"):
        D.decode_jpeg(cut, name="p.jpg")
    with pytest.warns(D.DecodeWarning):
        D.decode_jpeg(cut, strict=False)


def test_corrupt_entropy_data():
    """Damage libjpeg can see inside a complete file.  (Arbitrary bit flips often decode to
    wrong pixels without any sign: no libjpeg-based decoder can catch those.)"""
    data = bytearray(enc("500x375-420"))
    sos = data.index(b"\xff\xda")
    mid = sos + (len(data) - sos) // 2
    data[mid:mid + 200] = b"\xff" * 200  # a run of fill bytes inside the entropy data
    with pytest.raises(D.DecodeError, match="bad.jpg: .*Corrupt JPEG data"):
        D.decode_jpeg(bytes(data), name="bad.jpg")
    with pytest.warns(D.DecodeWarning):
        D.decode_jpeg(bytes(data), strict=False)
    # a restart marker with the wrong number: libjpeg resynchronises and loses blocks
    data = bytearray(enc("420-restart"))
    sos = data.index(b"\xff\xda")
    rst = [i for i in range(sos, len(data) - 1)
           if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
    assert len(rst) > 5
    i = rst[len(rst) // 2]
    data[i + 1] = 0xD0 + (data[i + 1] - 0xD0 + 3) % 8
    with pytest.raises(D.DecodeError, match="rst.jpg: Corrupt JPEG data: found marker"):
        D.decode_jpeg(bytes(data), name="rst.jpg")


@pytest.mark.parametrize("junk", [b"", b"\x00", b"hello world", b"\xff\xd8\xff",
                                  b"\xff\xd8\xff\xe0" + b"\x00" * 40])
def test_garbage(junk):
    with pytest.raises(D.DecodeError, match="sample 17"):
        D.decode_image(junk, name="sample 17")
    with pytest.raises(D.DecodeError):
        D.decode_jpeg(junk)


def test_bad_header_values():
    data = bytearray(enc("444-q90"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = b"\x00\x00\x00\x00"  # height = width = 0
    with pytest.raises(D.DecodeError, match="zero.jpg"):
        D.decode_jpeg(bytes(data), name="zero.jpg")
    with pytest.raises(D.DecodeError, match="zero.jpg"):
        D.read_header(bytes(data), name="zero.jpg")


def test_truncated_png():
    b = io.BytesIO()
    Image.fromarray(photo(64, 64)).save(b, "PNG")
    with pytest.raises(D.DecodeError, match="x.png"):
        D.decode_image(b.getvalue()[:200], name="x.png")


def test_decode_error_travels():
    err = D.DecodeError("cannot decode a.jpg: boom", "a.jpg", "boom")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, ValueError) and str(again) == str(err) and again.name == "a.jpg"
    assert str(D.DecodeError(str(err))) == str(err)  # rebuilt from its text alone


def test_bad_arguments():
    data = enc("420-q75")
    with pytest.raises(ValueError, match="inside|outside"):
        D.decode_jpeg(data, (0, 0, _H + 1, 10))
    with pytest.raises(ValueError):
        D.decode_jpeg(data, (0, 0, 0, 10))
    with pytest.raises(ValueError):
        D.decode_jpeg_scaled(data, scale=9)
    with pytest.raises(ValueError):
        D.decode_jpeg_scaled(data)
    with pytest.raises(ValueError, match="inside"):
        D.decode_image(pil_png(), (0, 0, 100, 100))


def pil_png():
    b = io.BytesIO()
    Image.fromarray(photo(10, 10)).save(b, "PNG")
    return b.getvalue()


# --------------------------------------------------------------------------------------
# Output buffers, inputs, threads
# --------------------------------------------------------------------------------------
def test_out_buffers():
    data = enc("500x375-420")
    box = (10, 20, 100, 150)
    expect = D.decode_jpeg(data, box)
    staging = np.zeros((128, 256, 3), np.uint8)  # a slot bigger than the image: strided rows
    view = staging[3:103, 5:155]
    assert D.decode_jpeg(data, box, out=view) is view
    assert np.array_equal(view, expect) and staging[:3].max() == 0 and staging[103:].max() == 0
    assert staging[3:103, :5].max() == 0 and staging[3:103, 155:].max() == 0
    tensor = torch.zeros(100, 150, 3, dtype=torch.uint8)
    assert D.decode_jpeg(data, box, out=tensor) is tensor
    assert np.array_equal(tensor.numpy(), expect)
    s = D.decode_jpeg_scaled(data, box, scale=4)
    out = np.empty_like(s.image)
    assert np.array_equal(D.decode_jpeg_scaled(data, box, scale=4, out=out).image, s.image)
    grey = np.empty((_H, _W), np.uint8)  # 2-D out for one channel
    D.decode_jpeg(enc("gray"), channels=1, out=grey)
    assert np.array_equal(grey, D.decode_jpeg(enc("gray"), channels=1)[:, :, 0])
    png_out = np.empty((10, 10, 3), np.uint8)
    assert D.decode_image(pil_png(), out=png_out) is png_out
    with pytest.raises(ValueError, match="shape"):
        D.decode_jpeg(data, box, out=np.empty((100, 151, 3), np.uint8))
    with pytest.raises(ValueError, match="packed"):
        D.decode_jpeg(data, box, out=np.empty((100, 150, 6), np.uint8)[:, :, ::2])
    with pytest.raises(ValueError, match="uint8"):
        D.decode_jpeg(data, box, out=np.empty((100, 150, 3), np.float32))


def test_inputs():
    data = enc("420-q75")
    expect = D.decode_jpeg(data)
    for form in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                 torch.frombuffer(bytearray(data), dtype=torch.uint8)):
        assert np.array_equal(D.decode_jpeg(form), expect)
        assert D.is_jpeg(form)


def test_threads_decode_concurrently():
    """The C call runs without the GIL (cffi API mode) and owns its libjpeg state."""
    data = enc("500x375-420")
    boxes = random_boxes(375, 500, 40, 5)
    expect = [D.decode_jpeg(data, b) for b in boxes]
    failures = []

    def work(k):
        for i, b in enumerate(boxes):
            if not np.array_equal(D.decode_jpeg(data, b), expect[i]):
                failures.append((k, i))
        try:
            D.decode_jpeg(data[:1000], name=f"thread {k}")
        except D.DecodeError as exc:
            if f"thread {k}" not in str(exc):
                failures.append((k, "message"))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures


def test_gil_released_during_decode():
    """Another Python thread runs while one thread is inside a long decode call."""
    data = D.encode_jpeg(np.tile(photo(512, 512), (4, 4, 1)), quality=95)  # 2048 x 2048
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        for _ in range(5):  # a loaded machine may not schedule the other thread at once
            stamps, stop = [], threading.Event()

            def spin():
                while not stop.is_set():
                    stamps.append(time.perf_counter())

            thread = threading.Thread(target=spin)
            thread.start()
            time.sleep(0.005)
            t0 = time.perf_counter()
            D.decode_jpeg(data)
            t1 = time.perf_counter()
            stop.set()
            thread.join(timeout=10)
            if any(t0 + 0.003 < s < t1 - 0.0005 for s in stamps):
                return
        pytest.fail("no other thread ran during the decode calls: is the GIL held?")
    finally:
        sys.setswitchinterval(old)


def test_encode_jpeg_roundtrip():
    img = photo(40, 56)
    data = D.encode_jpeg(img, quality=95, sampling=[(1, 1)] * 3)
    assert np.abs(D.decode_jpeg(data).astype(int) - img).mean() < 3
    assert D.read_header(D.encode_jpeg(img, colorspace="RGB")).colorspace == "RGB"
    with pytest.raises(ValueError):
        D.encode_jpeg(np.zeros((4, 4, 2), np.uint8))


# --------------------------------------------------------------------------------------
# Measurements (not run by pytest): python tests/test_decode.py
# --------------------------------------------------------------------------------------
def _median_ms(fn, repeats=300):
    for _ in range(20):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure():
    import torchvision.transforms.v2 as v2
    import torchvision.transforms.v2.functional as F
    from torchvision.io import decode_jpeg as tv_decode_jpeg
    torch.set_num_threads(1)
    torch.manual_seed(0)

    data = pil_jpeg(photo(375, 500, 1), 90, 2)
    box = (60, 90, 250, 310)  # a typical RandomResizedCrop box (41% of the area)
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    print(f"500x375 JPEG, quality 90, 4:2:0, {len(data)} bytes; box (t, l, h, w) = {box}; "
          "median ms of 300, one thread")
    rows = [
        ("Pillow open+convert (full)", lambda: np.asarray(Image.open(io.BytesIO(data))
                                                          .convert("RGB"))),
        ("torchvision.io.decode_jpeg (full)", lambda: tv_decode_jpeg(tensor)),
        ("pimloader full decode", lambda: D.decode_jpeg(data)),
        ("pimloader full decode + crop (roi=False)", lambda: D.decode_jpeg(data, box, roi=False)),
        ("pimloader ROI decode", lambda: D.decode_jpeg(data, box)),
    ]
    for m in (4, 2, 1, 3, 6):
        rows.append((f"pimloader ROI + DCT scale {m}/8",
                     lambda m=m: D.decode_jpeg_scaled(data, box, scale=m)))
        rows.append((f"pimloader full + DCT scale {m}/8",
                     lambda m=m: D.decode_jpeg_scaled(data, scale=m)))
    prog = pil_jpeg(photo(375, 500, 1), 90, 2, progressive=True)
    prog_seekable = D.add_restart_markers(prog)
    rows += [
        ("progressive: pimloader full decode", lambda: D.decode_jpeg(prog)),
        ("progressive: pimloader ROI decode", lambda: D.decode_jpeg(prog, box)),
        ("progressive: ROI + DCT scale 4/8", lambda: D.decode_jpeg_scaled(prog, box, scale=4)),
        ("progressive: its seekable copy, ROI decode",
         lambda: D.decode_jpeg(prog_seekable, box)),
    ]
    seekable = D.add_restart_markers(data)
    rows += [
        ("seekable copy: pimloader ROI decode", lambda: D.decode_jpeg(seekable, box)),
        ("seekable copy: ROI + DCT scale 4/8",
         lambda: D.decode_jpeg_scaled(seekable, box, scale=4)),
    ]
    big = pil_jpeg(photo(1536, 2048, 1), 90, 2)
    big_box = (300, 500, 900, 1100)  # a RandomResizedCrop box of a 3-megapixel photo
    big_seekable = D.add_restart_markers(big)
    rows += [
        ("2048x1536: pimloader ROI decode", lambda: D.decode_jpeg(big, big_box)),
        ("2048x1536: seekable copy, ROI decode", lambda: D.decode_jpeg(big_seekable, big_box)),
        ("2048x1536: ROI + DCT scale 2/8", lambda: D.decode_jpeg_scaled(big, big_box, scale=2)),
        ("2048x1536: seekable, ROI + DCT scale 2/8",
         lambda: D.decode_jpeg_scaled(big_seekable, big_box, scale=2)),
    ]
    for label, fn in rows:
        print(f"  {label:45s} {_median_ms(fn):7.3f}")

    # threads: two decoding threads on this machine's cores
    def loop(n=400):
        for _ in range(n):
            D.decode_jpeg(data)
    t0 = time.perf_counter()
    loop(800)
    one = time.perf_counter() - t0
    threads = [threading.Thread(target=loop) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    two = time.perf_counter() - t0
    print(f"  800 full decodes: 1 thread {one:.3f} s, 2 threads {two:.3f} s "
          f"(speed-up {one / two:.2f}x; meaningful only on an idle machine)")

    # error of the DCT-scaled path vs the exact path, both resized (antialiased bilinear)
    photos = [pil_jpeg(photo(375, 500, i), 90, 2) for i in range(len(_photos()))]
    rrc = v2.RandomResizedCrop(224)

    def tv_resize(a, crop, size):
        t = torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)
        if crop is not None:
            t = F.crop(t, *crop)
        return F.resize(t, [size, size], antialias=True).permute(1, 2, 0).numpy().astype(int)

    def pil_resize(a, frac, size):
        im = Image.fromarray(a)
        if frac is None:
            return np.asarray(im.resize((size, size), Image.BILINEAR)).astype(int)
        t, l, h, w = frac
        return np.asarray(im.resize((size, size), Image.BILINEAR,
                                    box=(l, t, l + w, t + h))).astype(int)

    print("DCT-scaled decode + resize vs exact decode + resize, RandomResizedCrop boxes "
          f"on {len(photos)} photos (500x375, q90, 4:2:0), 60 boxes each:")
    configs = [(224, 2.0, (1, 2, 4, 8)), (224, 1.0, (1, 2, 4, 8)),
               (224, 1.0, tuple(range(1, 9))), (112, 2.0, (1, 2, 4, 8)),
               (64, 2.0, (1, 2, 4, 8))]
    for size, min_ratio, scales in configs:
        e_tv, e_pil, used = [], [], {}
        t_exact, t_scaled = [], []
        for data_i in photos:
            H, W = D.read_header(data_i)[:2]
            shape_probe = torch.zeros(3, H, W)
            for _ in range(60):
                p = rrc.make_params([shape_probe])
                crop = (p["top"], p["left"], p["height"], p["width"])
                m = D.pick_scale(crop[2], crop[3], size, size, min_ratio=min_ratio,
                                 scales=scales)
                used[m] = used.get(m, 0) + 1
                if m == 8:
                    continue
                t0 = time.perf_counter()
                exact = D.decode_jpeg(data_i, crop)
                t1 = time.perf_counter()
                s = D.decode_jpeg_scaled(data_i, crop, scale=m)
                t2 = time.perf_counter()
                t_exact.append(t1 - t0)
                t_scaled.append(t2 - t1)
                e_tv.append(np.abs(tv_resize(exact, None, size)
                                   - tv_resize(s.image, s.int_box(), size)).ravel())
                e_pil.append(np.abs(pil_resize(exact, None, size)
                                    - pil_resize(s.image, s.box, size)).ravel())
        head = f"  out {size}, min_ratio {min_ratio}, scales {scales}: scales used {used}"
        if not e_tv:
            print(head + " -> never reduced (crops are under the ratio)")
            continue
        a, b = np.concatenate(e_tv), np.concatenate(e_pil)
        print(head)
        print(f"    decode ms (median): exact ROI {statistics.median(t_exact) * 1e3:.3f}, "
              f"scaled ROI {statistics.median(t_scaled) * 1e3:.3f}")
        print(f"    torchvision resize of the rounded box: mean abs {a.mean():.2f}, "
              f"p99 {np.percentile(a, 99):.0f}, max {a.max()}, within 1: {(a <= 1).mean():.3f}")
        print(f"    Pillow resize of the fractional box:  mean abs {b.mean():.2f}, "
              f"p99 {np.percentile(b, 99):.0f}, max {b.max()}, within 1: {(b <= 1).mean():.3f}")


if __name__ == "__main__":
    if "--measure" in sys.argv or len(sys.argv) == 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measure()
