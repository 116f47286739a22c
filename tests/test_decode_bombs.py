"""Decompression bombs: small files whose headers promise huge images.

A JPEG of a few kB whose SOF claims 60000x60000 pixels would make a decoder allocate ~10 GiB
(21 GiB of coefficients if progressive) before finding out the data is not there. Like
Pillow (the oracle: Image.open on the same bytes under the same limit), pimloader warns
above MAX_IMAGE_PIXELS and refuses above twice it, from the header, before allocating, in
every entry point, naming the file.
"""
import io
import os
import struct
import subprocess
import sys
import textwrap
import warnings
import zlib

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms import v2 as T

from pimloader import PIMDataLoader, decode

pytestmark = pytest.mark.timeout(120)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(autouse=True)
def pillows_default_limit():
    """Every test starts, and leaves, Pillow's (= pimloader's) limit at its default."""
    default = Image.MAX_IMAGE_PIXELS
    yield
    Image.MAX_IMAGE_PIXELS = default


def _photo(height=48, width=64):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 4 % 256, y * 5 % 256, (x + y) * 3 % 256], axis=2).astype(np.uint8)


def _with_size(jpeg: bytes, height: int, width: int) -> bytes:
    """The JPEG with its frame header (SOF0/SOF2) claiming height x width."""
    data = bytearray(jpeg)
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = data.find(marker)
        if at >= 0:
            struct.pack_into(">HH", data, at + 5, height, width)
            return bytes(data)
    raise AssertionError("no SOF0/SOF2 marker")


def _png_with_size(png: bytes, height: int, width: int) -> bytes:
    """The PNG with its IHDR claiming width x height (CRC fixed, so Pillow reads it)."""
    data = bytearray(png)
    at = data.find(b"IHDR")
    struct.pack_into(">II", data, at + 4, width, height)
    struct.pack_into(">I", data, at + 17, zlib.crc32(bytes(data[at:at + 17])))
    return bytes(data)


def _png(pixels) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


BASELINE = decode.encode_jpeg(_photo(), quality=90)
PROGRESSIVE = decode.encode_jpeg(_photo(), quality=90, progressive=True)
BOMB = _with_size(BASELINE, 60000, 60000)                  # 3.6 G pixels, 10 GiB as RGB
PROGRESSIVE_BOMB = _with_size(PROGRESSIVE, 60000, 60000)   # + 21 GiB of coefficients
PNG_BOMB = _png_with_size(_png(_photo()), 60000, 60000)

ENTRY_POINTS = {
    "image_size": lambda data, name: decode.image_size(data, name=name),
    "decode_jpeg": lambda data, name: decode.decode_jpeg(data, name=name),
    "decode_jpeg box": lambda data, name: decode.decode_jpeg(data, (100, 200, 32, 32),
                                                             name=name),
    "decode_jpeg grey box": lambda data, name: decode.decode_jpeg(
        data, (100, 200, 32, 32), channels=None, name=name),
    "decode_jpeg_into": lambda data, name: decode.decode_jpeg_into(
        data, (100, 200, 32, 32), np.empty(1 << 16, np.uint8), name=name),
    "decode_jpeg_scaled": lambda data, name: decode.decode_jpeg_scaled(
        data, (0, 0, 30000, 30000), size=(224, 224), name=name),
    "decode_image": lambda data, name: decode.decode_image(data, name=name),
    "decode_image box": lambda data, name: decode.decode_image(data, (5, 5, 8, 8), name=name),
    "add_restart_markers": lambda data, name: decode.add_restart_markers(data, name=name),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("bomb", ["baseline", "progressive"])
def test_every_entry_point_refuses_a_jpeg_bomb_naming_the_file(entry, bomb):
    data = BOMB if bomb == "baseline" else PROGRESSIVE_BOMB
    assert len(data) < 40_000
    with pytest.raises(decode.DecompressionBombError) as caught:
        ENTRY_POINTS[entry](data, "/data/train/bomb.jpg")
    error = caught.value
    assert isinstance(error, decode.DecodeError)           # on_error="skip" counts it
    assert isinstance(error, Image.DecompressionBombError)  # Pillow's except catches it
    message = str(error)
    assert "/data/train/bomb.jpg" in message and error.name == "/data/train/bomb.jpg"
    assert "3,600,000,000 pixels (60000x60000)" in message, message
    assert "89,478,485" in message, message
    assert "MAX_IMAGE_PIXELS" in message and "None" in message, message


@pytest.mark.parametrize("entry", ["image_size", "decode_image", "decode_image box"])
def test_a_png_bomb_is_refused_through_pillows_check(entry):
    with pytest.raises(Image.DecompressionBombError):  # the oracle: Pillow alone
        Image.open(io.BytesIO(PNG_BOMB))
    with pytest.raises(decode.DecompressionBombError) as caught:
        ENTRY_POINTS[entry](PNG_BOMB, "/data/train/bomb.png")
    message = str(caught.value)
    assert "/data/train/bomb.png" in message and "MAX_IMAGE_PIXELS" in message, message
    assert "3600000000 pixels" in message, message  # Pillow's own words


def _pillow_verdict(data: bytes) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.load()
        except Image.DecompressionBombError:
            return "error"
    return "warning" if any(issubclass(w.category, Image.DecompressionBombWarning)
                            for w in caught) else "ok"


def _pimloader_verdict(call) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
        except decode.DecompressionBombError:
            return "error"
    kinds = [w.category for w in caught]
    assert all(issubclass(kind, decode.DecompressionBombWarning) for kind in kinds), kinds
    return "warning" if kinds else "ok"


@pytest.mark.parametrize("entry", [name for name in ENTRY_POINTS
                                   if name not in ("decode_jpeg box", "decode_jpeg grey box",
                                                   "decode_jpeg_into", "decode_jpeg_scaled")])
def test_the_limit_decides_as_pillows_does(entry):
    """A real 64x48 photo (3,072 pixels) under limits around it: ok at or above 3,072,
    a warning from 1,536 to 3,071, an error below; as Image.open decides."""
    verdicts = []
    for limit in (None, 10_000, 3072, 3071, 2000, 1536, 1535, 1000, 1):
        decode.MAX_IMAGE_PIXELS = limit
        assert Image.MAX_IMAGE_PIXELS == limit  # one setting, under both names
        want = _pillow_verdict(BASELINE)
        got = _pimloader_verdict(lambda: ENTRY_POINTS[entry](BASELINE, "photo.jpg"))
        verdicts.append((limit, got, want))
    assert all(got == want for _, got, want in verdicts), verdicts
    assert [got for _, got, _ in verdicts] == ["ok"] * 3 + ["warning"] * 3 + ["error"] * 3


@pytest.mark.parametrize("entry", ["decode_jpeg box", "decode_jpeg_into", "decode_jpeg_scaled"])
def test_box_decoders_decide_as_pillow_does_too(entry):
    # these take a box inside the image: a 32x32 one fits a 48x64 photo
    calls = {
        "decode_jpeg box": lambda: decode.decode_jpeg(BASELINE, (4, 4, 32, 32)),
        "decode_jpeg_into": lambda: decode.decode_jpeg_into(BASELINE, (4, 4, 32, 32),
                                                            np.empty(1 << 16, np.uint8)),
        "decode_jpeg_scaled": lambda: decode.decode_jpeg_scaled(BASELINE, scale=4),
    }
    for limit in (None, 3072, 3071, 1536, 1535):
        decode.MAX_IMAGE_PIXELS = limit
        assert _pimloader_verdict(calls[entry]) == _pillow_verdict(BASELINE), limit


def test_the_error_is_exported_with_pimloaders_others():
    import pimloader
    assert pimloader.DecompressionBombError is decode.DecompressionBombError
    assert "DecompressionBombError" in pimloader.__all__


def test_the_limit_takes_positive_ints_or_none():
    for bad in (0, -5, 1.5, "100", True):
        with pytest.raises(ValueError, match="MAX_IMAGE_PIXELS"):
            decode.MAX_IMAGE_PIXELS = bad
    decode.MAX_IMAGE_PIXELS = np.int64(5000)
    assert Image.MAX_IMAGE_PIXELS == 5000 and type(Image.MAX_IMAGE_PIXELS) is int
    Image.MAX_IMAGE_PIXELS = 1234  # set through Pillow: pimloader sees it
    assert decode.MAX_IMAGE_PIXELS == 1234


def test_with_no_limit_a_bomb_is_just_bad_data():
    decode.MAX_IMAGE_PIXELS = None
    with pytest.raises(decode.DecodeError) as caught:
        decode.decode_jpeg(BOMB, (100, 200, 32, 32), name="bomb.jpg")
    assert not isinstance(caught.value, decode.DecompressionBombError), caught.value


MEASURE = textwrap.dedent('''
    import resource, sys
    sys.path.insert(0, sys.argv[1])
    from pimloader import decode
    sys.path.insert(0, sys.argv[2])
    import test_decode_bombs as t
    data = {"baseline": t.BOMB, "progressive": t.PROGRESSIVE_BOMB}[sys.argv[3]]
    decode.MAX_IMAGE_PIXELS = None if sys.argv[4] == "none" else int(sys.argv[4])
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    # an address-space cap 1 GiB above what the process has mapped: any allocation for
    # the promised image (several GiB) fails, even one whose pages are never touched
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
    def rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    before = rss()
    outcomes = []
    for name, call in t.ENTRY_POINTS.items():
        try:
            call(data, "f.jpg")
            outcomes.append("ok")
        except decode.DecompressionBombError:
            outcomes.append("bomb")
        except MemoryError:
            outcomes.append("memory")
        except decode.DecodeError as error:
            outcomes.append("memory" if "Insufficient memory" in str(error) else "bad-data")
    print(rss() - before, *outcomes)
''')


def _measure(*args):
    out = subprocess.run([sys.executable, "-c", MEASURE, ROOT, HERE, *args], check=True,
                         capture_output=True, text=True, timeout=100).stdout.split()
    return int(out[0]), dict(zip(ENTRY_POINTS, out[1:]))


@pytest.mark.parametrize("bomb", ["baseline", "progressive"])
def test_a_bomb_is_refused_without_allocating_for_it(bomb):
    """Every entry point on the 60000x60000 bomb, in a fresh process whose address space
    is capped 1 GiB above what it has mapped: each refuses it as a bomb, and peak memory
    (max RSS) hardly moves. The control, with the limit lifted, shows the cap biting: the
    whole-image decodes (and, for the progressive file, every decode: libjpeg allocates all
    its coefficients first) fail to allocate, as they would have tried to on any machine."""
    grown, outcomes = _measure(bomb, "89478485")
    assert set(outcomes.values()) == {"bomb"}, outcomes
    assert grown < 64 << 20, f"max RSS grew by {grown >> 20} MiB"
    _, control = _measure(bomb, "none")
    assert control["decode_jpeg"] == control["decode_image"] == "memory", control
    if bomb == "progressive":
        assert control["decode_jpeg box"] == control["add_restart_markers"] == "memory", control
    assert "bomb" not in control.values(), control


# --------------------------------------------------------------------------------------
# In the loader
# --------------------------------------------------------------------------------------
@pytest.fixture
def folder_with_a_bomb(tmp_path):
    root = tmp_path / "set"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.roll(_photo(), 7 * i, axis=1)).save(root / cls / f"{i}.jpg",
                                                                   quality=90)
    (root / "b" / "1.jpg").write_bytes(BOMB)
    (root / "a" / "2.png").write_bytes(PNG_BOMB)
    return root


VAL = T.Compose([T.Resize(32), T.CenterCrop(32), T.ToDtype(torch.float32, scale=True)])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_loader_refuses_a_bomb_as_torchvision_does(folder_with_a_bomb, num_workers):
    control = torchvision.datasets.ImageFolder(folder_with_a_bomb, transform=T.Compose(
        [T.PILToTensor(), VAL]))
    with pytest.raises(Image.DecompressionBombError):
        list(DataLoader(control, batch_size=4, num_workers=0))
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(folder_with_a_bomb),
                           batch_size=4, num_workers=num_workers, transform=VAL)
    with pytest.raises(decode.DecompressionBombError) as caught:
        list(loader)
    message = str(caught.value)
    assert str(folder_with_a_bomb / "a" / "2.png") in message, message  # the first, in order
    assert "MAX_IMAGE_PIXELS" in message


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skipping_counts_bombs(folder_with_a_bomb, num_workers):
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(folder_with_a_bomb),
                           batch_size=4, num_workers=num_workers, transform=VAL,
                           on_error="skip")
    batches = list(loader)
    assert sum(len(labels) for _, labels in batches) == 5  # 7 files, 2 bombs
    assert loader.stats()[-1].skipped_samples == 2, loader.stats()[-1]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_use_the_limit_set_in_the_main_process(folder_with_a_bomb, context):
    """A limit set in the main process before the epoch reaches the workers, under spawn
    too (a spawned worker imports Pillow afresh, at its default): at 1,000 pixels the real
    64x48 photos are refused as well."""
    decode.MAX_IMAGE_PIXELS = 1000
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(folder_with_a_bomb),
                           batch_size=4, num_workers=1, transform=VAL, on_error="skip",
                           multiprocessing_context=context)
    with pytest.raises(decode.DecodeError, match="every sample of the batch"):
        list(loader)
    decode.MAX_IMAGE_PIXELS = 3071  # a warning for the photos, an error for the bombs
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(folder_with_a_bomb),
                           batch_size=4, num_workers=1, transform=VAL, on_error="skip",
                           multiprocessing_context=context)
    assert sum(len(labels) for _, labels in loader) == 5
    assert loader.stats()[-1].skipped_samples == 2
