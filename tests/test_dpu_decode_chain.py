"""JPEG decode and transform on the same (emulated) DPUs, in the loader: decode_on_dpu=.

Oracle: the same loader on backend="cpu" (bit-identical to torchvision, test_image_pipeline.py)
for the same seeds; where each file was decoded, from `fallback_reason` and Pillow's reading
of the file, computed here apart from the loader. Folders: a small ImageNet-like set
(benchmarks/make_dataset.py: JPEGs of real photographs, greyscale ones, a progressive JPEG, a
PNG) and its seekable copy (make_seekable).
"""
from __future__ import annotations

import inspect
import io
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from PIL import Image

from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader.backends.base import IMAGES, EncodedImage, KernelRun
from pimloader.backends.cpu import CpuBackend
from pimloader.backends.dpu import jpeg as DJ
from pimloader.backends.dpu.backend import DpuBackend
from pimloader.backends.dpu.chain import CHANNELS, NOT_JPEG
from pimloader.backends.dpu.driver import MramSource
from pimloader.datasets import ImageFolder
from pimloader.decode import DecodeError, decode_jpeg, make_seekable
from pimloader.decode.baseline import parse_baseline
from pimloader.errors import DpuFaultError
from pimloader.transforms.params import Geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = {
    "train": v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "val": v2.Compose([v2.Resize(256), v2.CenterCrop(224),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    # small crops of large photos: reduced-DCT draft decodes (host fallbacks), uint8, NHWC
    "train_small": v2.Compose([v2.RandomResizedCrop(128), v2.RandomVerticalFlip()]),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    plain = make_imagenet_like(tmp_path_factory.mktemp("chain") / "set", count=20, classes=3)
    seekable = plain.with_name("seekable")
    make_seekable(plain, seekable)
    return {"plain": plain, "seekable": seekable}


def batches(root, transform, num_workers, **options):
    torch.manual_seed(7)
    loader = PIMDataLoader(ImageFolder(root), batch_size=8, shuffle=True, num_workers=num_workers,
                           transform=transform, generator=torch.Generator().manual_seed(1), **options)
    return list(loader), loader


def expected_refusal(path) -> str:
    """Where the loader must decode this file, from Pillow and fallback_reason alone."""
    data = Path(path).read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        if image.format != "JPEG":
            return NOT_JPEG
        grey = image.mode == "L"
    reason = DJ.fallback_reason(data, str(path))
    return reason or (CHANNELS if grey else "")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("folder", ["seekable", "plain"])
@pytest.mark.parametrize("name", ["train", "val"])
def test_batches_equal_the_cpu_backends_and_stats_say_where_each_file_was_decoded(
        folders, folder, name, num_workers):
    """reduced_dct=False: which file goes where then depends on the file alone (draft decodes
    are the next test's)."""
    root = folders[folder]
    expected, _ = batches(root, PIPELINES[name], num_workers, backend="cpu", reduced_dct=False)
    actual, loader = batches(root, PIPELINES[name], num_workers, backend="emulator", nr_dpus=3,
                             nr_tasklets=11, decode_on_dpu=True, reduced_dct=False)
    assert len(actual) == len(expected) > 0
    for (want_images, want_labels), (images, labels) in zip(expected, actual):
        assert torch.equal(images, want_images)
        assert torch.equal(labels, want_labels)
    reasons = Counter(expected_refusal(path) for path, _ in ImageFolder(root).samples)
    stats = loader.stats()[-1]
    assert stats.dpu_decoded_samples == reasons.pop("", 0)
    assert stats.decode_fallbacks == dict(reasons)
    if folder == "seekable":
        assert stats.dpu_decoded_samples >= len(ImageFolder(root)) - 3   # all but grey and PNG
    else:
        assert stats.decode_fallbacks.get("no restarts", 0) > 0


def test_draft_decodes_and_nhwc_uint8_outputs(folders):
    root = folders["seekable"]
    options = dict(reduced_dct=True, memory_format=torch.channels_last)
    expected, _ = batches(root, PIPELINES["train_small"], 0, backend="cpu", **options)
    actual, loader = batches(root, PIPELINES["train_small"], 0, backend="emulator", nr_dpus=2,
                             nr_tasklets=16, **options)   # decode_on_dpu="auto": on
    for (want_images, _), (images, _) in zip(expected, actual, strict=True):
        assert torch.equal(images, want_images)
    stats = loader.stats()[-1]
    assert stats.decode_fallbacks.get("reduced_dct", 0) > 0 and stats.dpu_decoded_samples > 0


def test_off_and_cpu_count_nothing(folders):
    root = folders["seekable"]
    for options in (dict(backend="cpu"), dict(backend="emulator", nr_dpus=2, decode_on_dpu=False)):
        _, loader = batches(root, PIPELINES["val"], 0, **options)
        stats = loader.stats()[-1]
        assert stats.dpu_decoded_samples == 0 and stats.decode_fallbacks == {}, options


def test_arguments_are_checked(folders):
    dataset = ImageFolder(folders["seekable"])
    with pytest.raises(ValueError, match="decode_on_dpu must be 'auto', True or False"):
        PIMDataLoader(dataset, transform=PIPELINES["val"], backend="emulator", decode_on_dpu="yes")
    with pytest.raises(ValueError, match="decode_on_dpu must be"):
        PIMDataLoader(dataset, transform=PIPELINES["val"], backend="emulator", decode_on_dpu=1)
    with pytest.raises(ValueError, match="needs a DPU backend"):
        PIMDataLoader(dataset, transform=PIPELINES["val"], backend="cpu", decode_on_dpu=True)
    parameter = inspect.signature(PIMDataLoader.__init__).parameters["decode_on_dpu"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default == "auto"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_corrupt_interval_raises_naming_the_file(folders, tmp_path, num_workers):
    """A seekable file whose central restart interval is garbage (its headers intact): the DPU
    decoder finds it, the loader raises DecodeError naming the file and the DPU."""
    source = sorted(folders["seekable"].rglob("*.JPEG"))
    root = tmp_path / "corrupt" / "a"
    root.mkdir(parents=True)
    chosen = [path for path in source if expected_refusal(path) == ""][:3]
    for path in chosen:
        (root / path.name).write_bytes(path.read_bytes())
    victim = root / chosen[1].name
    good = victim.read_bytes()
    start, end = parse_baseline(good).intervals[len(parse_baseline(good).intervals) // 2]
    victim.write_bytes(good[:start] + b"\xff\x00" * ((end - start) // 2) + good[start + 2 * ((end - start) // 2):])
    loader = PIMDataLoader(ImageFolder(root.parent), batch_size=3, num_workers=num_workers,
                           transform=PIPELINES["val"], backend="emulator", nr_dpus=2, decode_on_dpu=True)
    with pytest.raises(DecodeError, match=f"{victim.name}.*DPU decoder.*restart interval.*DPU"):
        list(loader)
    loader.close()


@pytest.fixture(scope="module")
def seekable_files(folders):
    paths = [path for path in sorted(folders["seekable"].rglob("*.JPEG")) if expected_refusal(path) == ""]
    return [path.read_bytes() for path in paths[:4]]


def _run(sources, boxes, size=(48, 40), out=None):
    geometries = [Geometry(box, size, (0, 0, *size), source=(box[2], box[3])) for box in boxes]
    out = torch.empty(len(sources), 3, *size, dtype=torch.uint8) if out is None else out
    runs = [(0, 0, *box[2:]) if isinstance(s, EncodedImage) else box for s, box in zip(sources, boxes)]
    return KernelRun(sources, runs, size, out, geometries)


def test_one_dpu_load_per_stage_and_run_and_mixed_runs(seekable_files):
    files = seekable_files
    boxes = [(5, 7, 100, 120), (0, 0, 64, 200), (30, 3, 150, 90), (11, 12, 33, 44)]
    pixels = [decode_jpeg(f) for f in files]
    want = _run(pixels, boxes)
    CpuBackend().submit(want).wait()
    backend = DpuBackend(nr_dpus=3, nr_tasklets=16, decode=True)
    try:
        assert backend.driver.loads() == 1
        encoded = [EncodedImage(f, f"f{i}.jpg", box) for i, (f, box) in enumerate(zip(files, boxes))]
        assert [backend.kernel_for(IMAGES).decode_refusal(image) for image in encoded] == [""] * 4
        mixed = [encoded[0], pixels[1], encoded[2], encoded[3]]   # a host-decoded sample rides along
        for expected_loads in (3, 5):
            run = _run(mixed, boxes)
            backend.submit(run).wait()
            assert torch.equal(run.out, want.out)
            assert backend.driver.loads() == expected_loads        # decoder, then the kernel
        plain = _run(pixels, boxes)
        backend.submit(plain).wait()
        assert torch.equal(plain.out, want.out) and backend.driver.loads() == 5
    finally:
        backend.close()


def test_a_fault_in_the_decode_stage_names_the_dpu_and_the_backend_recovers(seekable_files):
    backend = DpuBackend(nr_dpus=2, nr_tasklets=8, decode=True)
    try:
        image = DJ.prepare_image(seekable_files[0], "x.jpg")
        chunk = DJ._Chunk([image], 8, backend.driver.stack_bytes)
        keep = (chunk.in_bytes + 7) & ~7
        packed = chunk.pack(keep, (chunk.out_bytes + 7) & ~7, 1, DJ.DEBUG_HALT)
        table = np.zeros((2, (packed.nbytes + 7) & ~7), np.uint8)
        table[0, :packed.nbytes] = packed
        table[1, :packed.nbytes] = packed
        with pytest.raises(DpuFaultError, match="DPU 0 faulted"):
            backend.driver.run_stage(backend.decoder.binary, table, keep, 64)
        box = (0, 0, 50, 60)
        run = _run([EncodedImage(seekable_files[0], "x.jpg", box)], [box])
        backend.submit(run).wait()
        want = _run([decode_jpeg(seekable_files[0])], [box])
        CpuBackend().submit(want).wait()
        assert torch.equal(run.out, want.out)
    finally:
        backend.close()


def test_sources_in_mram_must_leave_the_chunk_room(seekable_files):
    backend = DpuBackend(nr_dpus=1, nr_tasklets=16)
    try:
        run = _run([MramSource(64, 50, 60, 3, 184)], [(0, 0, 50, 60)])
        with pytest.raises(ValueError, match="leave them room"):
            backend.driver.submit(run.sources, run.boxes, run.size, run.out, keep=(64, 64 + 50 * 184))
        with pytest.raises(ValueError, match="keep="):
            backend.driver.submit(run.sources, run.boxes, run.size, run.out)
    finally:
        backend.close()


def test_the_benchmark_runs_quick(tmp_path):
    from benchmarks import dpu_decode_chain
    results = dpu_decode_chain.main(["--quick", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "r.json")])
    assert all(row["identical"] and row["decoded_on_dpus"] > 0 for row in results["whole_loader"].values())
    assert results["transfers"]["decode on the DPUs"]["dpu_loads"] == 2
