"""The host side of DPU JPEG decoding in C (csrc/jpeg_layout.c): the parse of a baseline JPEG's
structure (`parse_baseline`), its Huffman lookup tables (`lookup_table`) and the packing of
a box's restart intervals into a DPU chunk (`_Image`, `_Chunk`).

Oracles: the Python implementation the C replaced, kept in tests/_baseline_reference.py and
tests/_dpu_pack_reference.py (the same layouts, the same packed bytes, the same error for
every corrupt or unsupported file: type, reason and message), and facts independent of both:
Pillow's reading of the frame and quantisation tables, the RSTn and EOI markers in the
file's own bytes, canonical Huffman codes generated here from T.81 Annex C.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

import _baseline_reference as reference
import _dpu_pack_reference as reference_pack
from pimloader.backends.dpu import jpeg as DJ
from pimloader.decode import DecodeError, add_restart_markers, encode_jpeg
from pimloader.decode.baseline import UnsupportedJpeg, lookup_table, parse_baseline

skimage_data = pytest.importorskip("skimage.data")

SAMPLINGS = {
    "4:4:4": [(1, 1)] * 3, "4:2:2": [(2, 1), (1, 1), (1, 1)], "4:2:0": [(2, 2), (1, 1), (1, 1)],
    "4:4:0": [(1, 2), (1, 1), (1, 1)], "all 2x1": [(2, 1)] * 3, "2x2 + 1x2 chroma": [(2, 2), (1, 2), (1, 2)],
    "grey": None,
}


def photo(grey: bool, height: int, width: int, top: int = 30, left: int = 50) -> np.ndarray:
    image = skimage_data.camera() if grey else skimage_data.astronaut()
    return np.ascontiguousarray(image[top:top + height, left:left + width])


def with_restarts(jpeg: bytes, interval: int, pixels: np.ndarray, quality: int) -> bytes:
    """As tests/test_dpu_jpeg.py: libjpeg's own markers for 16, the lossless transcoder else."""
    if interval == 16:
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=quality, restart_marker_blocks=16)
        return buffer.getvalue()
    return add_restart_markers(jpeg, interval) if interval else jpeg


@functools.lru_cache(maxsize=None)
def encodings() -> dict:
    """Every encoding the DPU tests generate: each sampling, restart intervals of 1, 3, 4, 16
    MCUs and none, odd and whole-MCU sizes, low and high quality."""
    files = {}
    for label, sampling in SAMPLINGS.items():
        for interval in (1, 3, 4, 16, 0):
            for quality, (height, width) in ((20, (37, 53)), (95, (48, 64))):
                pixels = photo(sampling is None, height, width)
                plain = encode_jpeg(pixels, quality=quality, sampling=sampling)
                files[f"{label} restart {interval} q{quality} {height}x{width}"] = with_restarts(
                    plain, interval, pixels, quality)
    return files


def refused() -> dict:
    """Files the DPU path refuses, each for its reason."""
    pixels, grey = photo(False, 40, 48), photo(True, 40, 48)
    sof0 = encode_jpeg(pixels)
    at = sof0.index(b"\xff\xc0")
    return {"progressive": encode_jpeg(pixels, progressive=True),
            "arithmetic": encode_jpeg(pixels, arithmetic=True),
            "CMYK": encode_jpeg(np.dstack([pixels, grey]), colorspace="CMYK"),
            "YCCK": encode_jpeg(np.dstack([pixels, grey]), colorspace="YCCK"),
            "RGB": encode_jpeg(pixels, colorspace="RGB"),
            "4:1:1": encode_jpeg(pixels, sampling=[(4, 1), (1, 1), (1, 1)]),
            "Cb, Cr unlike": encode_jpeg(pixels, sampling=[(2, 2), (1, 1), (2, 1)]),
            "12-bit": sof0[:at + 4] + b"\x0c" + sof0[at + 5:],
            "lossless": sof0[:at + 1] + b"\xc3" + sof0[at + 2:],
            "PNG": b"\x89PNG\r\n\x1a\n" + bytes(40)}


def outcome(parse, data: bytes, name: str = "f.jpg"):
    """The layout, or the error as (type, reason, message)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return parse(data, name)
    except UnsupportedJpeg as error:
        return ("UnsupportedJpeg", error.reason, str(error))
    except DecodeError as error:
        return (type(error).__name__, error.reason, str(error))


def assert_same(got, want, label: str) -> None:
    """Two outcomes of `outcome`: the same error, or the same layout field by field."""
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert got == want, label
        return
    for key in ("width", "height", "restart_mcus", "intervals", "mcus_x", "mcus_y"):
        assert getattr(got, key) == getattr(want, key), (label, key)
    assert len(got.components) == len(want.components), label
    for mine, theirs in zip(got.components, want.components):
        assert (mine.h, mine.v, mine.dc, mine.ac) == (theirs.h, theirs.v, theirs.dc, theirs.ac), label
        assert mine.quant.dtype == theirs.quant.dtype and np.array_equal(mine.quant, theirs.quant), label
    assert list(got.huffman) == list(want.huffman), label
    for key, (bits, values) in want.huffman.items():
        assert got.huffman[key][0].dtype == bits.dtype and np.array_equal(got.huffman[key][0], bits), (label, key)
        assert got.huffman[key][1] == values, (label, key)
    assert all(type(v) is int for span in got.intervals for v in span), label


# --------------------------------------------------------------------------------------
# The parse: the reference's layouts and the file's own facts
# --------------------------------------------------------------------------------------
def test_layouts_equal_the_reference_on_every_encoding_and_fallback():
    cases = {**encodings(), **refused()}
    for label, jpeg in cases.items():
        assert_same(outcome(parse_baseline, jpeg), outcome(reference.parse_baseline, jpeg), label)
    reasons = {outcome(parse_baseline, jpeg)[1] for jpeg in refused().values()}
    assert reasons == {"progressive", "arithmetic", "components", "colour space", "sampling", "precision",
                       "lossless", "not a JPEG"}


def test_layouts_agree_with_pillow_and_the_files_markers():
    for label, jpeg in encodings().items():
        layout = parse_baseline(jpeg)
        pillow = Image.open(io.BytesIO(jpeg))
        assert (layout.width, layout.height) == pillow.size, label
        for component, (_, h, v, tq) in zip(layout.components, pillow.layer):
            assert (component.h, component.v) == ((h, v) if len(pillow.layer) > 1 else (1, 1)), label
            assert component.quant.tolist() == list(pillow.quantization[tq]), label
        # the intervals cut the scan at its RSTn markers, in turn, and the last ends at EOI
        scan = jpeg.index(b"\xff\xda")
        assert layout.intervals[0][0] == scan + 2 + int.from_bytes(jpeg[scan + 2:scan + 4], "big"), label
        for k, (start, end) in enumerate(layout.intervals):
            data = jpeg[start:end].replace(b"\xff\x00", b"")
            assert b"\xff" not in data, label
            assert jpeg[end:end + 2] == (bytes([0xFF, 0xD0 + k % 8]) if k + 1 < len(layout.intervals) else b"\xff\xd9")
            if k + 1 < len(layout.intervals):
                assert layout.intervals[k + 1][0] == end + 2, label
        mcu = 8 * max(c.h for c in layout.components), 8 * max(c.v for c in layout.components)
        mcus = -(-layout.width // mcu[0]) * -(-layout.height // mcu[1])
        assert len(layout.intervals) == (-(-mcus // layout.restart_mcus) if layout.restart_mcus else 1), label


def _with_16_bit_dqt(jpeg: bytes, scale: int = 1) -> bytes:
    """The file with each DQT table rewritten with 16-bit values (x scale)."""
    at = jpeg.index(b"\xff\xdb")
    length = int.from_bytes(jpeg[at + 2:at + 4], "big")
    payload, tables = jpeg[at + 4:at + 2 + length], b""
    while payload:
        values = np.frombuffer(payload[1:65], np.uint8).astype(">u2") * scale
        tables += bytes([0x10 | payload[0] & 15]) + values.astype(">u2").tobytes()
        payload = payload[65:]
    return jpeg[:at + 2] + (len(tables) + 2).to_bytes(2, "big") + tables + jpeg[at + 2 + length:]


def test_16_bit_quantisation_tables():
    """The same values in 16 bits give the same layout (and what Pillow reads); values over
    32767 are refused, as the DPU's 16-bit tables cannot hold them."""
    jpeg = add_restart_markers(encode_jpeg(photo(False, 32, 32), quality=10), 2)
    wide = _with_16_bit_dqt(jpeg)
    eight, sixteen = parse_baseline(jpeg), parse_baseline(wide)
    assert [c.quant.tolist() for c in sixteen.components] == [c.quant.tolist() for c in eight.components]
    pillow = Image.open(io.BytesIO(wide))
    assert sixteen.components[0].quant.tolist() == list(pillow.quantization[pillow.layer[0][3]])
    huge = _with_16_bit_dqt(jpeg, 300)    # some values over 32767
    assert_same(outcome(parse_baseline, huge), outcome(reference.parse_baseline, huge), "x300")
    assert outcome(parse_baseline, huge)[1] == "quantisation"


def _canonical_codes(bits) -> list:
    """T.81 Annex C (Figures C.1-C.3): (length, code) of each symbol, in HUFFVAL order."""
    codes, code = [], 0
    for length in range(1, 17):
        for _ in range(int(bits[length - 1])):
            codes.append((length, code))
            code += 1
        code <<= 1
    return codes


@settings(max_examples=300, deadline=None)
@given(bits=st.lists(st.integers(0, 12), min_size=16, max_size=16), data=st.data())
def test_lookup_tables_equal_the_reference_and_decode_canonical_codes(bits, data):
    count = sum(bits)
    values = bytes(data.draw(st.lists(st.integers(0, 255), min_size=min(count, 256), max_size=min(count, 256))))
    bits = np.array(bits, np.int64)
    if count > 256:
        with pytest.raises(ValueError):
            lookup_table(bits, values)
        return
    want, got = outcome(lambda b, n: reference.lookup_table(b, values, n), bits, "t.jpg"), \
        outcome(lambda b, n: lookup_table(b, values, n), bits, "t.jpg")
    if isinstance(want, tuple):
        assert got == want and "t.jpg" in got[2]
        return
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in want)
    for (length, code), symbol in zip(_canonical_codes(bits), values):   # decode each code
        if length <= 8:
            assert got["look"][code << (8 - length)] == length << 8 | symbol
        else:
            assert code <= got["maxcode"][length] and got["huffval"][code + got["valoffset"][length]] == symbol


# --------------------------------------------------------------------------------------
# Corrupt files: the reference's error (type, reason, message naming the file), no crash
# --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def seekable_photo() -> bytes:
    return add_restart_markers(encode_jpeg(photo(False, 40, 56), quality=80), 2)


FUZZED = ("4:2:0 restart 1 q20 37x53", "grey restart 3 q95 48x64", "4:4:4 restart 16 q95 48x64",
          "4:2:2 restart 0 q20 37x53")


@settings(max_examples=600, deadline=None)
@given(edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
       in_headers=st.booleans(), keep=st.one_of(st.none(), st.floats(0, 1)), base=st.sampled_from((None,) + FUZZED))
def test_property_corrupt_files_fail_as_the_reference_does(edits, in_headers, keep, base):
    """Bytes set at random (in the markers before the scan, or anywhere) and the file cut
    short, in files of several encodings: the same layout or the same error as the Python
    reference."""
    data = bytearray(seekable_photo() if base is None else encodings()[base])
    span = data.index(b"\xff\xda") + 14 if in_headers else len(data)
    for where, value in edits:
        data[int(where * span)] = value
    if keep is not None:
        data = data[:int(keep * len(data))]
    got, want = outcome(parse_baseline, bytes(data), "c.jpg"), outcome(reference.parse_baseline, bytes(data), "c.jpg")
    assert_same(got, want, "edited")
    if isinstance(got, tuple):
        assert "c.jpg" in got[2]


def _without_app(jpeg: bytes) -> bytes:
    """The file without its APPn segments (JFIF, Adobe): libjpeg then guesses the colour
    space from the component ids."""
    out, at = jpeg[:2], 2
    while jpeg[at + 1] != 0xDA:
        end = at + 2 + int.from_bytes(jpeg[at + 2:at + 4], "big")
        if not 0xE0 <= jpeg[at + 1] <= 0xEF:
            out += jpeg[at:end]
        at = end
    return out + jpeg[at:]


def _overflowing(bits: bytes) -> bytes:
    """BITS with two codes moved to length 1 (as many symbols): more codes than fit."""
    counts = list(bits)
    longer = next(i for i, n in enumerate(counts) if i > 0 and n >= 2)
    counts[0], counts[longer] = counts[0] + 2, counts[longer] - 2
    return bytes(counts)


def test_every_error_of_the_reference_is_reached():
    """Targeted corruptions: each message of the parse, the same as the reference's."""
    good = seekable_photo()
    sof, dht, dqt, sos = (good.index(bytes([0xFF, m])) for m in (0xC0, 0xC4, 0xDB, 0xDA))
    data_start = sos + 2 + int.from_bytes(good[sos + 2:sos + 4], "big")

    def put(at: int, value: bytes) -> bytes:
        return good[:at] + value + good[at + len(value):]

    first_rst1, first_rst0 = good.index(b"\xff\xd1", data_start), good.index(b"\xff\xd0", data_start)
    rgb_ids = put(sof + 10, b"R")[:sof + 13] + b"G" + good[sof + 14:sof + 16] + b"B" + good[sof + 17:]
    cases = {"no SOS": good[:sos], "not a marker": put(2, b"\x00"), "RST before the data": put(2, b"\xff\xd0"),
             "segment past the end": good[:sof + 6], "two SOF": good[:sof] + good[sof:sof + 19] + good[sof:],
             "short SOF": put(sof + 2, b"\x00\x05"), "zero height": put(sof + 5, b"\x00\x00"),
             "bad sampling": put(sof + 11, b"\x50"), "bad DQT": put(dqt + 4, b"\x24"),
             "bad DHT": put(dht + 4, b"\x24"), "DC over 15": put(dht + 4 + 17, b"\x10"),
             "overflowing DHT": put(dht + 5, _overflowing(good[dht + 5:dht + 21])),
             "SOS first": good[:sof] + good[sos:], "short DRI": put(good.index(b"\xff\xdd") + 2, b"\x00\x02"),
             "bad SOS": put(sos + 4, b"\x09"), "progressive scan": put(sos + 2 + 2 * 3 + 4, b"\x01"),
             "undefined table": put(sos + 6, b"\x33"), "out of sequence": put(first_rst1, b"\xff\xd3"),
             "no EOI": good[:-2], "a second scan": good[:-2] + b"\xff\xda\x00\x02" + good[-2:],
             "one interval short": good[:first_rst0] + b"\xff\xd9", "arithmetic DAC": put(2, b"\xff\xcc"),
             "RGB ids": _without_app(rgb_ids)}
    messages = set()
    for label, data in cases.items():
        got, want = outcome(parse_baseline, data, "e.jpg"), outcome(reference.parse_baseline, data, "e.jpg")
        assert_same(got, want, label)
        assert isinstance(got, tuple) and "e.jpg" in got[2], label
        messages.add(got[2])
    assert len(messages) >= len(cases) - 3   # (a few corruptions meet the same check)


def test_the_bomb_rule_comes_between_the_headers_and_the_scan(monkeypatch):
    """A frame over twice MAX_IMAGE_PIXELS is refused before the scan is looked at, as in the
    reference: a DecompressionBombError even if the scan is corrupt too."""
    from PIL import Image as PILImage
    from pimloader.decode.errors import DecompressionBombError
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 500)
    corrupt_scan = seekable_photo()[:-2]
    for parse in (parse_baseline, reference.parse_baseline):
        with pytest.raises(DecompressionBombError, match="b.jpg"):
            parse(corrupt_scan, "b.jpg")


# --------------------------------------------------------------------------------------
# Packing: the reference's bytes
# --------------------------------------------------------------------------------------
def _packed(module, files, names, boxes, nr_tasklets: int = 16) -> np.ndarray:
    chunk = module._Chunk([module._Image(f, n, 256, b) for f, n, b in zip(files, names, boxes)], nr_tasklets, 1024)
    return chunk.pack(DJ._round8(chunk.in_bytes), DJ._round8(chunk.out_bytes), 7, 0)


def test_packed_chunks_equal_the_reference():
    files = [jpeg for label, jpeg in encodings().items() if "restart 0" not in label or "37x53" in label]
    rng = np.random.default_rng(5)
    boxes = []
    for jpeg in files:
        layout = parse_baseline(jpeg)
        top, left = int(rng.integers(0, layout.height)), int(rng.integers(0, layout.width))
        height, width = int(rng.integers(1, layout.height - top + 1)), int(rng.integers(1, layout.width - left + 1))
        boxes.append(None if len(boxes) % 3 == 0 else (top, left, height, width))
    names = [f"p{i}.jpg" for i in range(len(files))]
    for i in range(0, len(files), 5):   # chunks of 5 images
        got = _packed(DJ, files[i:i + 5], names[i:i + 5], boxes[i:i + 5])
        assert np.array_equal(got, _packed(reference_pack, files[i:i + 5], names[i:i + 5], boxes[i:i + 5])), names[i]
    for jpeg, name, box in zip(files, names, boxes):   # each piece, as the packer's callers see it
        mine, theirs = DJ._Image(jpeg, name, 256, box), reference_pack._Image(jpeg, name, 256, box)
        assert mine.chosen == theirs.chosen and mine.data_bytes == theirs.data_bytes
        assert mine.intervals(4096).tobytes() == theirs.intervals(4096).tobytes()
        assert mine.interval_bytes().tobytes() == theirs.interval_bytes().tobytes()
        assert mine.tables().tobytes() == theirs.tables().tobytes()
        assert mine.descriptor(2, 3, 4, [8, 16, 24]).tobytes() == theirs.descriptor(2, 3, 4, [8, 16, 24]).tobytes()


def test_layouts_made_by_hand_pack_the_same(monkeypatch):
    """A BaselineJpeg without the C parse's spans and headers (made by hand, or replaced)
    packs from its Python fields alone, to the same bytes."""
    jpeg = encodings()["4:2:0 restart 3 q95 48x64"]
    plain = dataclasses.replace(parse_baseline(jpeg), spans=None, headers=None)
    monkeypatch.setattr(DJ, "parse_baseline", lambda data, name=None: plain)
    got = _packed(DJ, [jpeg], ["h.jpg"], [(5, 7, 30, 40)])
    assert np.array_equal(got, _packed(reference_pack, [jpeg], ["h.jpg"], [(5, 7, 30, 40)]))


def test_what_the_c_packer_would_read_out_of_bounds_is_refused(monkeypatch):
    """Intervals chosen outside the file, or a layout whose native headers are cut short:
    an error naming the file, not a read past a buffer."""
    jpeg = encodings()["4:2:0 restart 3 q95 48x64"]
    layout = parse_baseline(jpeg)
    for chosen in ([len(layout.intervals)], [-1]):
        monkeypatch.setattr(DJ, "needed_intervals", lambda lay, box: chosen)
        with pytest.raises(IndexError, match="x.jpg"):
            DJ._Image(jpeg, "x.jpg", 256)
    monkeypatch.undo()
    monkeypatch.setattr(DJ, "parse_baseline", lambda data, name=None: layout)   # another file's layout
    with pytest.raises(ValueError, match="z.jpg"):
        DJ._Image(jpeg[:layout.intervals[-1][1] - 1], "z.jpg", 256)
    monkeypatch.undo()
    cut = dataclasses.replace(layout, headers=layout.headers[:100])
    monkeypatch.setattr(DJ, "parse_baseline", lambda data, name=None: cut)
    with pytest.raises(ValueError, match="y.jpg"):
        DJ._Image(jpeg, "y.jpg", 256).tables()
