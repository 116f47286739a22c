"""JPEG decoding on (emulated) DPUs, dpu_src/jpeg_decode.c: bit-identical to libjpeg-turbo.

The oracle is Pillow's decode (its own libjpeg-turbo) and pimloader's host decoder (the
system's libjpeg-turbo); the files are real photographs (scikit-image) encoded by libjpeg
with every subsampling the DPU path takes, restart intervals of 1, 3, 4 and 16 MCUs (and
none), odd sizes. Files it does not take must say why (a typed reason); corrupt ones must
raise a DecodeError naming the file, never hang, crash the emulator or differ silently.
"""
from __future__ import annotations

import functools
import io
import os
import subprocess
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image

from pimloader.backends.dpu import jpeg as DJ
from pimloader.backends.dpu.emulator import DpuFaultError
from pimloader.costmodel import proxy
from pimloader.decode import DecodeError, add_restart_markers, decode_jpeg, encode_jpeg
from pimloader.decode.baseline import REASONS, UnsupportedJpeg, parse_baseline

skimage_data = pytest.importorskip("skimage.data")

SAMPLINGS = {
    "4:4:4": [(1, 1)] * 3,
    "4:2:2": [(2, 1), (1, 1), (1, 1)],
    "4:2:0": [(2, 2), (1, 1), (1, 1)],
    "4:4:0": [(1, 2), (1, 1), (1, 1)],
}
PHOTOS = ("astronaut", "chelsea", "coffee", "camera")


def photo(index: int, height: int, width: int, top: int = 40, left: int = 60) -> np.ndarray:
    """A height x width piece of a real photograph (grey for `camera`)."""
    image = getattr(skimage_data, PHOTOS[index % len(PHOTOS)])()
    top, left = min(top, image.shape[0] - height), min(left, image.shape[1] - width)
    return np.ascontiguousarray(image[top:top + height, left:left + width])


def with_restarts(jpeg: bytes, interval: int, pixels: np.ndarray, quality: int) -> bytes:
    """`interval` MCUs per restart interval: libjpeg's own (Pillow's restart_marker_blocks)
    for 16, pimloader's lossless transcoder (make_seekable's) for the small ones."""
    if interval == 0:
        return jpeg
    if interval == 16:
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=quality, restart_marker_blocks=16)
        return buffer.getvalue()
    return add_restart_markers(jpeg, interval)


def libjpeg_turbo(jpeg: bytes) -> np.ndarray:
    """Pillow's decode, checked against pimloader's host decoder: both are libjpeg-turbo."""
    pillow = np.asarray(Image.open(io.BytesIO(jpeg)))
    host = decode_jpeg(jpeg, channels=None)
    assert np.array_equal(host.reshape(pillow.shape), pillow)
    return pillow


@pytest.fixture(scope="module")
def decoder():
    with DJ.DpuJpegDecoder(nr_dpus=3, nr_tasklets=16) as dpus:
        yield dpus


def assert_bit_identical(files, names, decoded):
    for jpeg, name, pixels in zip(files, names, decoded):
        want = libjpeg_turbo(jpeg)
        assert pixels.shape == want.shape, name
        mismatched = int((pixels != want).sum())
        assert mismatched == 0, f"{name}: {mismatched} values differ from libjpeg-turbo's"


# --------------------------------------------------------------------------------------
# Bit identity
# --------------------------------------------------------------------------------------
def test_every_subsampling_and_restart_interval_on_photographs(decoder):
    files, names = [], []
    for i, (label, sampling) in enumerate(SAMPLINGS.items()):
        for interval in (1, 3, 4, 16, 0):
            for quality, (height, width) in ((75, (37, 53)), (95, (48, 64))):  # odd and whole MCUs
                pixels = photo(i, height, width)
                plain = encode_jpeg(pixels, quality=quality, sampling=sampling)
                files.append(with_restarts(plain, interval, pixels, quality))
                names.append(f"{label} restart {interval} q{quality} {height}x{width}")
    assert_bit_identical(files, names, decoder.decode(files, names))


def test_greyscale_photographs(decoder):
    files, names = [], []
    for interval in (1, 3, 4, 16, 0):
        for quality, (height, width) in ((50, (29, 71)), (100, (40, 40))):
            pixels = photo(3, height, width)
            files.append(with_restarts(encode_jpeg(pixels, quality=quality), interval, pixels, quality))
            names.append(f"grey restart {interval} q{quality}")
    decoded = decoder.decode(files, names)
    assert all(d.ndim == 2 for d in decoded)
    assert_bit_identical(files, names, decoded)


@pytest.mark.parametrize("nr_tasklets", [1, 11, 24])
def test_tasklet_counts(nr_tasklets):
    pixels = photo(1, 70, 90)
    files = [add_restart_markers(encode_jpeg(pixels, quality=85, sampling=s), 2) for s in SAMPLINGS.values()]
    names = list(SAMPLINGS)
    with DJ.DpuJpegDecoder(nr_dpus=2, nr_tasklets=nr_tasklets) as dpus:
        assert_bit_identical(files, names, dpus.decode(files, names))


@pytest.mark.parametrize("height, width", [(1, 1), (1, 17), (17, 1), (2, 3), (3, 2), (9, 5), (16, 16)])
def test_tiny_images_take_libjpeg_turbos_edge_paths(decoder, height, width):
    """Chroma 1 or 2 samples wide: libjpeg-turbo replicates instead of filtering."""
    pixels = photo(0, height, width)
    files = [add_restart_markers(encode_jpeg(pixels, quality=90, sampling=s), 1) for s in SAMPLINGS.values()]
    assert_bit_identical(files, list(SAMPLINGS), decoder.decode(files, list(SAMPLINGS)))


def test_less_common_sampling_factors(decoder):
    """Sampling factors libjpeg accepts beyond the four names: every component 2x1 or 1x2
    (no upsampling, bigger MCUs), chroma at half the luma's rows only inside 2x2 MCUs, grey
    with 2x2 factors (a one-component scan ignores them)."""
    colour, grey = photo(0, 45, 67), photo(3, 45, 67)
    cases = {"all 2x1": (colour, [(2, 1)] * 3), "all 1x2": (colour, [(1, 2)] * 3),
             "2x2 + 2x1 chroma": (colour, [(2, 2), (2, 1), (2, 1)]),
             "2x2 + 1x2 chroma": (colour, [(2, 2), (1, 2), (1, 2)]), "grey 2x2": (grey, [(2, 2)])}
    files = [add_restart_markers(encode_jpeg(px, quality=80, sampling=s), 2) for px, s in cases.values()]
    assert_bit_identical(files, list(cases), decoder.decode(files, list(cases)))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(height=st.integers(1, 60), width=st.integers(1, 60), sampling=st.sampled_from(sorted(SAMPLINGS)),
       interval=st.integers(1, 6), quality=st.integers(10, 100), photo_index=st.integers(0, 2))
def test_property_any_size_sampling_interval(decoder, height, width, sampling, interval, quality, photo_index):
    pixels = photo(photo_index, height, width, top=7 * height, left=5 * width)
    jpeg = add_restart_markers(encode_jpeg(pixels, quality=quality, sampling=SAMPLINGS[sampling]), interval)
    assert_bit_identical([jpeg], [sampling], decoder.decode([jpeg]))


def test_many_images_over_dpus_in_any_order(decoder):
    """Images of different sizes, samplings and colour types share DPUs; every one comes back
    in its own place."""
    samplings = list(SAMPLINGS.values())
    files = [add_restart_markers(encode_jpeg(photo(i, 20 + 7 * i, 30 + 5 * i), quality=80,
                                             sampling=None if i % 4 == 3 else samplings[i % 4]), 1 + i % 4)
             for i in range(9)]
    names = [f"file{i}" for i in range(9)]
    assert_bit_identical(files, names, decoder.decode(files, names))


# --------------------------------------------------------------------------------------
# What falls back to the host decoder, and why
# --------------------------------------------------------------------------------------
def _patched(jpeg: bytes, marker: int, offset: int, value: int) -> bytes:
    """jpeg with the byte `offset` into the first `marker` segment's payload set to value."""
    at = jpeg.index(bytes([0xFF, marker])) + 4 + offset
    return jpeg[:at] + bytes([value]) + jpeg[at + 1:]


def _sof0_as(jpeg: bytes, marker: int) -> bytes:
    at = jpeg.index(b"\xff\xc0")
    return jpeg[:at + 1] + bytes([marker]) + jpeg[at + 2:]


def test_fallbacks_say_why(decoder):
    pixels = photo(0, 40, 48)
    grey = photo(3, 40, 48)
    big = photo(1, 300, 420)
    cases = {
        "progressive": encode_jpeg(pixels, progressive=True),
        "arithmetic": encode_jpeg(pixels, arithmetic=True),
        "components": encode_jpeg(np.dstack([pixels, grey]), colorspace="CMYK"),
        "colour space": encode_jpeg(pixels, colorspace="RGB"),
        "sampling": encode_jpeg(pixels, sampling=[(4, 1), (1, 1), (1, 1)]),
        "sampling ": encode_jpeg(pixels, sampling=[(2, 2), (1, 1), (2, 1)]),
        "precision": _patched(encode_jpeg(pixels), 0xC0, 0, 12),
        "lossless": _sof0_as(encode_jpeg(pixels), 0xC3),
        "no restarts": encode_jpeg(big),
        "not a JPEG": b"\x89PNG\r\n\x1a\n" + bytes(40),
    }
    ycck = encode_jpeg(np.dstack([pixels, grey]), colorspace="YCCK")
    assert decoder.fallback_reason(ycck) == "components"
    for reason, jpeg in cases.items():
        reason = reason.strip()
        assert reason in REASONS
        assert decoder.fallback_reason(jpeg, "f.jpg") == reason, reason
        with pytest.raises(UnsupportedJpeg, match="f.jpg") as caught:
            decoder.decode([jpeg], ["f.jpg"])
        assert caught.value.reason == reason and caught.value.name == "f.jpg"
    for reason in ("progressive", "arithmetic", "components", "colour space", "sampling", "no restarts"):
        decode_jpeg(cases[reason])    # the host decodes what the DPUs leave to it
    assert decoder.fallback_reason(encode_jpeg(grey)) is None   # small: one interval is fine
    assert decoder.fallback_reason(add_restart_markers(encode_jpeg(big), 4)) is None


def test_the_no_restarts_limit_is_a_setting():
    big = encode_jpeg(photo(1, 100, 100))   # 7 x 7 MCUs at 4:2:0
    assert DJ.fallback_reason(big, max_mcus_without_restarts=48) == "no restarts"
    assert DJ.fallback_reason(big, max_mcus_without_restarts=49) is None


# --------------------------------------------------------------------------------------
# Corrupt files: a clear error naming the file, never a hang, a crash or silent garbage
# --------------------------------------------------------------------------------------
def test_byte_flips_of_seekable_files(decoder):
    good = add_restart_markers(encode_jpeg(photo(1, 45, 70), quality=80), 3)
    rng = np.random.default_rng(7)
    outcomes = {"same as libjpeg-turbo": 0, "DecodeError": 0, "UnsupportedJpeg": 0}
    files, names = [], []
    for trial in range(60):
        data = bytearray(good)
        data[int(rng.integers(2, len(data)))] ^= 1 << int(rng.integers(0, 8))
        files.append(bytes(data))
        names.append(f"flipped{trial}.jpg")
    for jpeg, name in zip(files, names):
        try:
            [got] = decoder.decode_each([jpeg], [name])
        except (DecodeError, UnsupportedJpeg) as error:   # the host's reading of the headers
            assert name in str(error)
            outcomes[type(error).__name__] += 1
            continue
        if isinstance(got, DecodeError):                    # the DPU's reading of the data
            assert name in str(got) and "restart interval" in str(got)
            outcomes["DecodeError"] += 1
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.asarray(Image.open(io.BytesIO(jpeg)))
        assert np.array_equal(got, want), f"{name}: decoded, but not as libjpeg-turbo does"
        outcomes["same as libjpeg-turbo"] += 1
    assert outcomes["DecodeError"] > 0 and outcomes["same as libjpeg-turbo"] > 0, outcomes


@functools.lru_cache(maxsize=None)
def seekable_photo() -> bytes:
    return add_restart_markers(encode_jpeg(photo(0, 40, 40), quality=80), 2)


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
       keep=st.one_of(st.none(), st.floats(0, 1)))
def test_property_corrupt_headers_raise_only_typed_errors(edits, keep):
    """Bytes of the markers before the scan set at random (and the file cut short): the host's
    parse says DecodeError or UnsupportedJpeg, naming the file, or accepts the file."""
    data = bytearray(seekable_photo())
    scan = data.index(b"\xff\xda") + 14
    for where, value in edits:
        data[int(where * scan)] = value
    if keep is not None:
        data = data[:int(keep * len(data))]
    try:
        DJ.fallback_reason(bytes(data), "h.jpg")
    except (DecodeError, UnsupportedJpeg) as error:
        assert "h.jpg" in str(error)


def test_a_corrupt_interval_fails_its_image_only(decoder):
    pixels = photo(2, 40, 56)
    good = add_restart_markers(encode_jpeg(pixels, quality=90), 2)
    layout = parse_baseline(good)
    start, end = layout.intervals[3]
    bad = good[:start] + b"\xff\x00" * ((end - start) // 2) + good[start + 2 * ((end - start) // 2):]
    results = decoder.decode_each([good, bad, good], ["a.jpg", "b.jpg", "c.jpg"])
    assert isinstance(results[1], DecodeError) and "b.jpg" in str(results[1])
    assert "restart interval 3" in str(results[1])
    assert_bit_identical([good, good], ["a.jpg", "c.jpg"], [results[0], results[2]])
    with pytest.raises(DecodeError, match="b.jpg"):
        decoder.decode([good, bad], ["a.jpg", "b.jpg"])


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_and_out_of_sequence_files_name_the_file(decoder, cut):
    good = add_restart_markers(encode_jpeg(photo(0, 40, 40)), 1)
    with pytest.raises(DecodeError, match="t.jpg"):
        decoder.decode([good[:int(len(good) * cut)]], ["t.jpg"])
    rst = good.index(b"\xff\xd1")
    swapped = good[:rst + 1] + b"\xd2" + good[rst + 2:]
    with pytest.raises(DecodeError, match="out of sequence"):
        decoder.decode([swapped], ["s.jpg"])


def test_a_dpu_fault_is_raised_and_the_decoder_recovers():
    jpeg = add_restart_markers(encode_jpeg(photo(0, 24, 24)), 1)
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=4) as dpus:
        with pytest.raises(DpuFaultError, match="halt"):
            dpus.decode([jpeg], debug=DJ.DEBUG_HALT)
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=4) as dpus:
        assert_bit_identical([jpeg], ["after"], dpus.decode([jpeg]))


# --------------------------------------------------------------------------------------
# The host <-> DPU contract
# --------------------------------------------------------------------------------------
def test_numpy_layouts_match_the_c_header(tmp_path):
    """The packer's dtypes against include/pim_jpeg.h, as the C compiler lays it out."""
    include = os.path.join(os.path.dirname(DJ.KERNEL_SOURCE), "..", "include")
    probes = {"pim_jpeg_header_t": DJ.HEADER, "pim_jpeg_image_t": DJ.IMAGE,
              "pim_jpeg_component_t": DJ.COMPONENT, "pim_jpeg_interval_t": DJ.INTERVAL,
              "pim_jpeg_huff_t": DJ.HUFF, "pim_jpeg_tables_t": DJ.TABLES, "pim_jpeg_status_t": DJ.STATUS}
    lines = []
    for ctype, dtype in probes.items():
        lines.append(f'printf("{ctype} sizeof %zu\\n", sizeof({ctype}));')
        for field in dtype.names:
            if field != "pad":
                lines.append(f'printf("{ctype} {field} %zu\\n", offsetof({ctype}, {field}));')
    constants = ("PIM_JPEG_MAGIC", "PIM_JPEG_VERSION", "PIM_JPEG_STATUS_OK", "PIM_JPEG_MRAM_BUDGET",
                 "PIM_JPEG_DEBUG_HALT")
    lines += [f'printf("{c} %lu\\n", (unsigned long){c});' for c in constants]
    lines += [f'printf("arena {t} %u\\n", pim_jpeg_arena_bytes({t}, 1024));' for t in (1, 11, 16, 24)]
    lines += [f'printf("PIM_JPEG_ERR_{e} %d\\n", PIM_JPEG_ERR_{e});' for e in DJ.ERROR_NAMES]
    source = tmp_path / "probe.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"pim_jpeg.h\"\n"
                      "int main(void) {\n" + "\n".join(lines) + "\nreturn 0; }\n")
    binary = tmp_path / "probe"
    subprocess.run(["cc", "-I", include, "-o", str(binary), str(source)], check=True)
    seen = {tuple(line.split()[:-1]): int(line.split()[-1])
            for line in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines()}
    for ctype, dtype in probes.items():
        assert seen[(ctype, "sizeof")] == dtype.itemsize, ctype
        for field in dtype.names:
            if field != "pad":
                assert seen[(ctype, field)] == dtype.fields[field][1], (ctype, field)
    assert [seen[(c,)] for c in constants] == [DJ.MAGIC, DJ.VERSION, DJ.STATUS_OK, DJ.MRAM_BUDGET, DJ.DEBUG_HALT]
    for t in (1, 11, 16, 24):
        assert seen[("arena", str(t))] == DJ.arena_bytes(t, 1024)
    assert [seen[(f"PIM_JPEG_ERR_{e}",)] for e in DJ.ERROR_NAMES] == sorted(DJ.KERNEL_ERRORS)


def test_the_emulators_rules_held_and_wram_fits(decoder):
    """The kernel's globals fit the WRAM it plans with (PIM_JPEG_GLOBALS), and a decode moved
    only what the layout says: compressed bytes in, pixels out."""
    pixels = photo(0, 64, 96)
    jpeg = add_restart_markers(encode_jpeg(pixels, quality=85), 4)
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=16) as dpus:
        dpus.dpus.reset_counters()
        dpus.decode([jpeg])
        counters = dpus.dpus.counters()
    assert counters.wram_static_bytes - 16 * DJ.DEFAULT_STACK_BYTES <= DJ.GLOBALS   # globals + stacks
    assert counters.wram_static_bytes + 16 * DJ.arena_bytes(16, DJ.DEFAULT_STACK_BYTES) <= DJ.WRAM_BYTES
    layout = parse_baseline(jpeg)
    compressed = layout.intervals[-1][1] - layout.intervals[0][0]
    assert counters.host_to_dpu_bytes < compressed + 6000     # + descriptors and tables
    assert counters.dpu_to_host_bytes < 64 * 96 * 3 + 100      # + statuses


# --------------------------------------------------------------------------------------
# Crops: only the restart intervals a box needs travel and are decoded
# --------------------------------------------------------------------------------------
def _box_cases(height, width, mcu):
    """Boxes whose edges sit on, just before and just after MCU edges."""
    for edge in (mcu, 2 * mcu):
        for shift in (-2, -1, 0, 1, 2):
            start = edge + shift
            yield (start, start, min(mcu, height - start), min(mcu + 3, width - start))
            yield (0, 0, start, start)
            yield (start, 0, height - start, width)
    yield (height - 1, width - 1, 1, 1)


def test_mcu_edge_crops_are_bit_identical(decoder):
    files, names, boxes = [], [], []
    for i, (label, sampling) in enumerate(SAMPLINGS.items()):
        pixels = photo(i, 53, 61)
        jpeg = add_restart_markers(encode_jpeg(pixels, quality=85, sampling=sampling), 1)
        mcu = 8 * max(max(h for h, _ in sampling), max(v for _, v in sampling))
        for box in _box_cases(53, 61, mcu):
            files.append(jpeg)
            names.append(f"{label} box {box}")
            boxes.append(box)
    grey = add_restart_markers(encode_jpeg(photo(3, 53, 61), quality=85), 3)
    for box in _box_cases(53, 61, 8):
        files.append(grey)
        names.append(f"grey box {box}")
        boxes.append(box)
    decoded = decoder.decode(files, names, boxes)
    for jpeg, name, (top, left, h, w), got in zip(files, names, boxes, decoded):
        want = libjpeg_turbo(jpeg)[top:top + h, left:left + w]
        assert got.shape == want.shape and np.array_equal(got, want), name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), sampling=st.sampled_from(sorted(SAMPLINGS)), interval=st.integers(1, 5))
def test_property_boxes(decoder, data, sampling, interval):
    height, width = data.draw(st.integers(1, 70)), data.draw(st.integers(1, 70))
    top, left = data.draw(st.integers(0, height - 1)), data.draw(st.integers(0, width - 1))
    h, w = data.draw(st.integers(1, height - top)), data.draw(st.integers(1, width - left))
    jpeg = add_restart_markers(encode_jpeg(photo(2, height, width, 3 * height, 2 * width), quality=80,
                                           sampling=SAMPLINGS[sampling]), interval)
    [got] = decoder.decode([jpeg], [sampling], [(top, left, h, w)])
    assert np.array_equal(got, libjpeg_turbo(jpeg)[top:top + h, left:left + w])


def test_a_crop_sends_and_decodes_only_its_intervals():
    pixels = photo(0, 128, 128)
    jpeg = add_restart_markers(encode_jpeg(pixels, quality=85), 2)   # 8 x 8 MCUs, 32 intervals
    layout = parse_baseline(jpeg)
    box = (40, 40, 30, 20)
    chosen = DJ.needed_intervals(layout, box)
    assert 0 < len(chosen) < len(layout.intervals) // 4
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=16) as dpus:
        [whole] = dpus.decode([jpeg])
        dpus.dpus.reset_counters()
        [crop] = dpus.decode([jpeg], boxes=[box])
        counters = dpus.dpus.counters()
    assert np.array_equal(crop, whole[40:70, 40:60])
    compressed = sum(layout.intervals[i][1] - layout.intervals[i][0] for i in chosen)
    assert counters.host_to_dpu_bytes < compressed + 6000
    assert compressed < (layout.intervals[-1][1] - layout.intervals[0][0]) / 3


def test_the_upsampling_margin_is_needed(monkeypatch):
    """The control: withholding the intervals of the box's 2-pixel margin changes pixels
    (on fresh DPUs, whose planes hold nothing from an earlier decode)."""
    pixels = photo(0, 64, 64)
    jpeg = add_restart_markers(encode_jpeg(pixels, quality=85), 1)
    box = (16, 16, 16, 16)   # exactly one 4:2:0 MCU
    want = libjpeg_turbo(jpeg)[16:32, 16:32]
    layout = parse_baseline(jpeg)
    monkeypatch.setattr(DJ, "needed_intervals", lambda lay, b: [lay.mcus_x + 1])
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=4) as dpus:
        [got] = dpus.decode([jpeg], boxes=[box])
    assert layout.mcus_x == 4 and not np.array_equal(got, want)


def test_the_kernel_counts_its_work(decoder):
    """MCUs, blocks and bytes as the file's structure says; AC coefficients grow with quality."""
    pixels = photo(0, 48, 64)
    files = [add_restart_markers(encode_jpeg(pixels, quality=q), 4) for q in (30, 95)]
    decoder.decode(files + [files[0]], boxes=[None, None, (20, 20, 5, 5)])
    for work, jpeg in zip(decoder.last_work, files):
        layout = parse_baseline(jpeg)
        assert work["mcus"] == layout.total_mcus == 3 * 4
        assert work["blocks"] == 6 * layout.total_mcus
        assert work["entropy_bytes"] == sum(end - start for start, end in layout.intervals)
        assert work["pixels"] == 48 * 64
    low, high, crop = decoder.last_work
    assert 0 < low["ac_coefficients"] < high["ac_coefficients"] < 63 * high["blocks"]
    assert crop["mcus"] == 4 * len(DJ.needed_intervals(parse_baseline(files[0]), (20, 20, 5, 5)))


def test_contract_breaks_are_kernel_errors_naming_the_dpu(monkeypatch):
    """A chunk built for other tasklets, or a descriptor the kernel refuses, is the host's or
    the kernel's fault, not the file's: DpuKernelError naming the DPU and the images."""
    from pimloader.errors import DpuKernelError
    jpeg = add_restart_markers(encode_jpeg(photo(0, 24, 24)), 1)
    with DJ.DpuJpegDecoder(nr_dpus=2, nr_tasklets=4) as dpus:
        dpus.nr_tasklets = 8
        with pytest.raises(DpuKernelError, match="DPU 0 .*k.jpg.*NR_TASKLETS") as caught:
            dpus.decode([jpeg, jpeg], ["k.jpg", "l.jpg"])
        assert caught.value.dpu == 0
        dpus.nr_tasklets = 4
        describe = DJ._Image.descriptor
        monkeypatch.setattr(DJ._Image, "descriptor", lambda self, *a: _with(describe(self, *a), out_pitch=1))
        with pytest.raises(DpuKernelError, match="DPU 0 .*c.jpg.*descriptor"):
            dpus.decode([jpeg, jpeg], ["c.jpg", "d.jpg"])
        monkeypatch.undo()
        assert_bit_identical([jpeg], ["afterwards"], dpus.decode([jpeg]))


def _with(descriptor, **fields):
    for key, value in fields.items():
        descriptor[key] = value
    return descriptor


@pytest.mark.skipif(proxy.find_cross_compiler() is None, reason=f"{proxy.CROSS_COMPILER} is not installed")
def test_the_kernel_computes_the_same_on_a_32_bit_isa(tmp_path, monkeypatch):
    """The emulator runs the kernel as 64-bit host code; a DPU is 32-bit. Replayed on the
    RV32IM proxy (pimloader.costmodel.proxy), the decode of a colour and a grey photo, one of
    them a crop, leaves MRAM byte for byte as the emulator left it."""
    monkeypatch.setenv("DPUEMU_TRACE_DIR", str(tmp_path))
    files = [add_restart_markers(encode_jpeg(photo(0, 37, 45), quality=85), 3),
             add_restart_markers(encode_jpeg(photo(3, 30, 41), quality=60), 2)]
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=4) as dpus:
        dpus.decode(files, boxes=[None, (5, 7, 20, 30)])
    [launch] = proxy.traced_launches(str(tmp_path))
    replay = proxy.replay(proxy.build_kernel(DJ.KERNEL_SOURCE, nr_tasklets=4), launch)  # ProxyMismatch if not
    assert replay.total > 0
