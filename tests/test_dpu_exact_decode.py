"""DPU JPEG decode at the IDCT's extremes: bit-identical to the host's libjpeg-turbo as it
runs by default (SIMD), on every file (issue 22, part 1; docs/dpu.md "Exact on every file it
takes").

Oracles: pimloader's host decoder and Pillow (both libjpeg-turbo with its SIMD IDCT, as users
run them), the loader on backend="cpu" for the same seeds, and libjpeg-turbo with SIMD off
(JSIMD_FORCENONE=1, in a child process) to show that the extreme files are ones whose SIMD
and C decodes differ (the kernel follows the C arithmetic). Files: Pillow JPEGs of photo
crops and synthetic images at every quality 1-100 (tables from 1 to 255), legal files whose
DQT entry was set to 255 after encoding, and files written byte by byte whose entropy data
codes huge coefficients (tests/_jpeg_extremes.py).
"""
from __future__ import annotations

import io
import platform

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from PIL import Image

from _jpeg_extremes import decode_without_simd, edge_files, extreme_files, with_dqt_entry
from pimloader import PIMDataLoader
from pimloader.backends.base import IMAGES, EncodedImage, KernelRun
from pimloader.backends.cpu import CpuBackend
from pimloader.backends.dpu import jpeg as DJ
from pimloader.backends.dpu.backend import DpuBackend
from pimloader.datasets import ImageFolder
from pimloader.decode import decode_jpeg
from pimloader.transforms.params import Geometry

skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "chelsea", "coffee", "camera")
HEIGHT, WIDTH = 48, 64
REASON = "idct range"   # the decode_fallbacks reason of a file the kernel gives back
# libjpeg-turbo's builds for these machines have SIMD IDCTs (x86 SSE2/AVX2, Arm NEON)
SIMD_HOST = platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")


def encode(pixels: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def photo_crops(rng) -> list:
    """64x48 crops of the test photographs, in colour (the camera man as RGB)."""
    crops = []
    for name in PHOTOS:
        image = getattr(skimage_data, name)()
        image = np.dstack([image] * 3) if image.ndim == 2 else image
        top, left = rng.integers(0, image.shape[0] - HEIGHT), rng.integers(0, image.shape[1] - WIDTH)
        crops.append(np.ascontiguousarray(image[top:top + HEIGHT, left:left + WIDTH]))
    return crops


def quality_sweep() -> dict:
    """Three files per Pillow quality 1-100: a photo crop (rotating over PHOTOS), noise, and
    a checkerboard of random square size, by file name."""
    rng = np.random.default_rng(22)
    files = {}
    for quality in range(1, 101):
        crop = photo_crops(rng)[quality % len(PHOTOS)]
        noise = rng.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)
        squares = (np.indices((HEIGHT, WIDTH)) // rng.integers(1, 5)).sum(0) % 2 * 255
        checker = np.dstack([squares.astype(np.uint8)] * 3)
        for kind, pixels in (("photo", crop), ("noise", noise), ("checker", checker)):
            files[f"q{quality:03d}_{kind}.jpg"] = encode(pixels, quality=quality)
    return files


def dqt_255_files() -> dict:
    """Pillow JPEGs written with all-1 tables (`qtables=`), then one DQT entry set to 255:
    legal files whose coefficients, coded for 1, are dequantised 255 times larger."""
    rng = np.random.default_rng(5)
    crop = photo_crops(rng)[0]
    noise = rng.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)
    files = {}
    for kind, pixels in (("photo", crop), ("noise", noise)):
        jpeg = encode(pixels, qtables=[[1] * 64, [1] * 64])
        for position in (0, 1, 5):
            files[f"dqt255_{kind}_{position}.jpg"] = with_dqt_entry(jpeg, position, 255)
    return files


@pytest.fixture(scope="module")
def outside():
    """Files outside the range where libjpeg-turbo's SIMD and C IDCTs agree."""
    return {**dqt_255_files(), **extreme_files()}


@pytest.fixture(scope="module")
def decoder():
    with DJ.DpuJpegDecoder(nr_dpus=3, nr_tasklets=16) as dpus:
        yield dpus


def test_the_extreme_files_decode_differently_without_simd(outside, tmp_path):
    """The test's files are what they claim: SIMD and C decodes differ on every file outside
    the range and agree at its inner edge (where SIMD runs at all)."""
    files = {**outside, **edge_files()}
    without = decode_without_simd(list(files.values()), tmp_path)
    differs = {name: not np.array_equal(np.asarray(Image.open(io.BytesIO(data))), plain)
               for (name, data), plain in zip(files.items(), without)}
    if SIMD_HOST:
        assert {name for name, d in differs.items() if d} == set(outside)
    else:
        assert not any(differs[name] for name in edge_files())


def test_the_dpu_decoder_gives_files_outside_the_range_to_the_host(decoder, outside):
    """Regression (issue 22): a DQT entry of 255 and huge coded coefficients decoded on the
    DPU up to 255 levels away from the host. Now the kernel stops each such file and the host
    decodes it; files at the range's inner edge stay on the DPUs; all equal the host's."""
    files = {**outside, **edge_files()}
    names = list(files)
    assert [decoder.fallback_reason(data) for data in files.values()] == [None] * len(files)
    decoded = decoder.decode(list(files.values()), names)
    for name, data, pixels in zip(names, files.values(), decoded):
        assert np.array_equal(pixels, decode_jpeg(data, channels=None)), name
        assert np.array_equal(pixels, np.asarray(Image.open(io.BytesIO(data)))), name
    assert sorted(names[i] for i in decoder.last_host_decoded) == sorted(outside)
    boxes = [(8, 8, 20, 30)] * len(files)                     # a box of each, as the loader asks
    cropped = decoder.decode(list(files.values()), names, boxes)
    for name, data, pixels in zip(names, files.values(), cropped):
        assert np.array_equal(pixels, decode_jpeg(data, channels=None)[8:28, 8:38]), name


def test_every_quality_and_every_extreme_through_the_loader_equals_the_cpu_backend(tmp_path, outside):
    """The DPU chain (decode_on_dpu) against backend="cpu", same seeds, whole decoded images
    to float: qualities 1-100, the files outside the range and at its edge; each file outside
    is counted as a decode fallback with its reason, every other one is decoded on the DPUs."""
    folders = {"sweep": quality_sweep(), "outside": outside, "edge": edge_files()}
    for folder, files in folders.items():
        (tmp_path / folder).mkdir()
        for name, data in files.items():
            (tmp_path / folder / name).write_bytes(data)
    transform = v2.Compose([v2.CenterCrop((HEIGHT, WIDTH)), v2.ToDtype(torch.float32, scale=True)])

    def batches(**options):
        torch.manual_seed(3)
        loader = PIMDataLoader(ImageFolder(tmp_path), batch_size=32, shuffle=True, transform=transform,
                               generator=torch.Generator().manual_seed(4), **options)
        return list(loader), loader.stats()[-1]

    expected, _ = batches(backend="cpu")
    actual, stats = batches(backend="emulator", nr_dpus=3, nr_tasklets=16, decode_on_dpu=True)
    assert len(actual) == len(expected) > 0
    for (want_images, want_labels), (images, labels) in zip(expected, actual):
        assert torch.equal(labels, want_labels)
        assert torch.equal(images, want_images)
    assert stats.decode_fallbacks == {REASON: len(outside)}
    assert stats.dpu_decoded_samples == sum(len(files) for files in folders.values()) - len(outside)


def test_fallbacks_are_counted_from_worker_processes(tmp_path, outside):
    for name, data in list(outside.items())[:4] + list(edge_files().items()):
        (tmp_path / "a").mkdir(exist_ok=True)
        (tmp_path / "a" / name).write_bytes(data)
    loader = PIMDataLoader(ImageFolder(tmp_path), batch_size=3, num_workers=2, backend="emulator", nr_dpus=2,
                           decode_on_dpu=True, transform=v2.Compose([v2.RandomResizedCrop(32),
                                                                     v2.ToDtype(torch.float32, scale=True)]))
    assert len(list(loader)) == 2
    stats = loader.stats()[-1]
    assert stats.decode_fallbacks == {REASON: 4} and stats.dpu_decoded_samples == 2


def test_a_run_decodes_again_without_the_files_the_kernel_gives_back(outside):
    """One DPU run holding a file outside the range, two inside it and host pixels: the
    decode stage runs twice (the second time without that file, which the host decodes and
    marks), the transform once, and the rows equal the CPU backend's on host pixels."""
    extreme = outside["dc_climb_q1.jpg"]
    inside = list(edge_files().values())
    files = [inside[0], extreme, inside[1], inside[0]]
    boxes = [(0, 0, HEIGHT, WIDTH), (4, 6, 30, 40), (10, 0, 38, 64), (2, 2, 20, 20)]
    size = (24, 32)

    def run(sources):
        geometries = [Geometry(box, size, (0, 0, *size), source=(box[2], box[3])) for box in boxes]
        runs = [(0, 0, *box[2:]) if isinstance(s, EncodedImage) else box for s, box in zip(sources, boxes)]
        return KernelRun(sources, runs, size, torch.empty(len(sources), 3, *size, dtype=torch.uint8), geometries)

    want = run([decode_jpeg(f) for f in files])
    CpuBackend().submit(want).wait()
    backend = DpuBackend(nr_dpus=2, nr_tasklets=16, decode=True)
    try:
        encoded = [EncodedImage(f, f"f{i}.jpg", box) for i, (f, box) in enumerate(zip(files, boxes))]
        kernel = backend.kernel_for(IMAGES)
        assert [kernel.decode_refusal(image) for image in encoded[:3]] == [""] * 3
        mixed = run(encoded[:3] + [decode_jpeg(files[3])])
        loads = backend.driver.loads()
        kernel.submit(mixed).wait()
        assert torch.equal(mixed.out, want.out)
        assert [image.host_reason for image in encoded[:3]] == ["", REASON, ""]
        assert backend.driver.loads() == loads + 3           # decoder, decoder again, the kernel
    finally:
        backend.close()
