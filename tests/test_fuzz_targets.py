"""The fuzz targets of fuzz/targets/ (docs/fuzzing.md) with the ordinary build: every seed of
fuzz/corpus/ and every input a fuzz run found (fuzz/regressions/, one folder per target) goes
through its target without a finding, and the seeds reach the checks past the documented
errors (a seed that stopped at a DecodeError would fuzz nothing useful)."""
from __future__ import annotations

import glob
import importlib
import io
import os

import pytest
import soundfile

from pimloader.backends.dpu.jpeg import prepare_image
from pimloader.datasets import CocoDetection
from pimloader.decode import add_restart_markers, decode_audio, decode_jpeg, seek_index
from pimloader.decode.audio import one_well_formed_riff

FUZZ = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")
TARGETS = ("jpeg", "seekable", "seek_index", "wav", "sample_cache", "coco")


@pytest.fixture(autouse=True)
def pixel_limit_kept():
    """The targets lower Pillow's MAX_IMAGE_PIXELS for the fuzz process; the suite's other
    tests must find it as it was."""
    from PIL import Image
    saved = Image.MAX_IMAGE_PIXELS
    yield
    Image.MAX_IMAGE_PIXELS = saved


def target(name: str):
    return importlib.import_module(f"fuzz.targets.{name}")


def inputs(name: str, folder: str) -> list:
    module = target(name)
    sub = module.CORPUS if folder == "corpus" else name
    return sorted(glob.glob(os.path.join(FUZZ, folder, sub, "*")))


def read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


@pytest.mark.parametrize("name", TARGETS)
def test_every_seed_and_regression_input_passes_its_target(name):
    paths = inputs(name, "corpus") + inputs(name, "regressions")
    assert inputs(name, "corpus"), f"no seeds for {name}"
    for path in paths:
        data = read(path)
        assert len(data) <= target(name).MAX_LEN, path
        target(name).one_input(data)


def test_the_seeds_are_valid_files_of_their_kind():
    jpegs, wavs, coco = (inputs(name, "corpus") for name in ("jpeg", "wav", "coco"))
    for path in jpegs:
        decode_jpeg(read(path))
        add_restart_markers(read(path))
    assert sum(1 for path in jpegs if _baseline(read(path))) >= 3   # the DPU layout is reached
    assert sum(seek_index(read(path)) is not None for path in jpegs) >= 3   # and the cut
    for path in wavs:
        samples, rate = decode_audio(read(path))
        reference, reference_rate = soundfile.read(io.BytesIO(read(path)), dtype="float32", always_2d=True)
        assert rate == reference_rate and (samples == reference.T).all(), path
        assert one_well_formed_riff(read(path)), path   # the direct read is fuzzed
    folder = target("coco")._FOLDER.name
    for path in coco:
        dataset = CocoDetection(folder, path, target_keys="all")
        assert target("coco").torchvisions(path, "all") is not None, path
        for index in range(len(dataset)):
            dataset[index]


def test_the_seeds_are_what_make_seeds_writes(tmp_path, monkeypatch):
    make_seeds = importlib.import_module("fuzz.make_seeds")
    monkeypatch.setattr(make_seeds, "CORPUS", str(tmp_path))
    make_seeds.main()
    made = sorted(os.path.relpath(p, tmp_path) for p in glob.glob(str(tmp_path / "*" / "*")))
    committed = sorted(os.path.relpath(p, os.path.join(FUZZ, "corpus"))
                       for p in glob.glob(os.path.join(FUZZ, "corpus", "*", "*")))
    assert made == committed
    total = sum(os.path.getsize(os.path.join(FUZZ, "corpus", p)) for p in committed)
    assert total < 20_000, f"the seed corpus is {total} bytes"


def _baseline(data: bytes) -> bool:
    try:
        prepare_image(data, "seed")
    except ValueError:
        return False
    return True
