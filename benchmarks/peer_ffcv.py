"""FFCV 1.0.2 as a benchmark contender (an optional peer; `make bench` installs it with
`pip install --no-deps ffcv==1.0.2` after its run-time needs numba, opencv-python-headless
and tqdm, and the system packages libturbojpeg0-dev, libopencv-dev and pkg-config).

FFCV reads its own file format. The dataset is written once to a `.beton` file, cached under
the benchmark's data folder and named by a key of what it stores (the dataset's files, the
writer's settings, FFCV's version), so it is written again only when one of those changes.
What the .beton stores (STORED): every image decoded by Pillow as RGB and re-encoded by FFCV
as a JPEG of quality 90 (`write_mode="jpg"`, `jpeg_quality=90`) at its own size
(`max_resolution=None`: not downscaled); labels as an IntField.

- train: `RandomResizedCropRGBImageDecoder((224, 224))` (decodes the crop box's region:
  turbojpeg's lossless crop to the box, then decode, then resize), `RandomHorizontalFlip()`,
  `NormalizeImage(ImageNet mean and std, float32)`, `ToTensor()`, `ToTorchImage()`;
- val: `CenterCropRGBImageDecoder((224, 224), ratio=224/256)` (the centre square of 224/256
  of the shorter side, resized to 224: Resize(256) + CenterCrop(224)), then the same.

NormalizeImage comes before ToTensor and ToTorchImage: with FFCV's documented order
(NormalizeImage last) its Loader can hang on a CPU-only machine (FFCV issue 396).
The batches are `batch, 3, 224, 224` float32 views of channels-last memory, and like all of
FFCV's batches they are reused a few iterations later.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torchvision

from benchmarks.calls import Call, Name
from benchmarks.pipelines import MEAN, STD
from benchmarks.progress import quiet

STORED = {"write_mode": "jpg", "jpeg_quality": 90, "max_resolution": None}
MEAN_255 = [round(255 * value, 6) for value in MEAN]  # as printed: no 57.120000000000005
STD_255 = [round(255 * value, 6) for value in STD]
NORMALIZE_THEN_TENSOR = (
    Call("NormalizeImage", mean=Call("np.array", MEAN_255), std=Call("np.array", STD_255),
         type=Name("np.float32")),
    Call("ToTensor"), Call("ToTorchImage"))
IMAGE_STEPS = {
    "train": (Call("RandomResizedCropRGBImageDecoder", (224, 224), scale=(0.08, 1.0),
                   ratio=(3 / 4, 4 / 3)),
              Call("RandomHorizontalFlip", flip_prob=0.5), *NORMALIZE_THEN_TENSOR),
    "val": (Call("CenterCropRGBImageDecoder", (224, 224), ratio=224 / 256),
            *NORMALIZE_THEN_TENSOR),
}
LABEL_STEPS = (Call("IntDecoder"), Call("ToTensor"), Call("Squeeze"))


def missing() -> str | None:
    """Why FFCV cannot run here, or None."""
    try:
        import ffcv.fields.decoders  # noqa: F401
        import ffcv.loader  # noqa: F401
        import ffcv.writer  # noqa: F401
    except Exception as error:  # an ImportError, or its native library failing to load
        return f"not installed: {type(error).__name__}: {error}"
    return None


def version() -> str:
    from importlib.metadata import version as installed
    return installed("ffcv")


# -- the .beton file, written once -----------------------------------------------------------

def dataset_identity(root: Path) -> list:
    """What names the dataset's content: the manifest's paths and SHA-256 where make_dataset
    wrote one, else every file's path, size and modification time."""
    manifest = root / "manifest.json"
    if manifest.exists():
        return [[entry["path"], entry["sha256"]]
                for entry in json.loads(manifest.read_text())["files"]]
    return sorted([str(path.relative_to(root)), path.stat().st_size, path.stat().st_mtime_ns]
                  for path in root.rglob("*") if path.is_file())


def beton_path(root: Path, cache_dir: Path) -> Path:
    key = json.dumps({"dataset": dataset_identity(root), "stored": STORED,
                      "ffcv": version()}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir / f"{root.name}-{digest}.beton"


@contextlib.contextmanager
def writer_bar(desc: str):
    """FFCV's writer draws its own tqdm bar: give it a name, and quiet it as ours are."""
    import ffcv.writer
    original = ffcv.writer.tqdm
    ffcv.writer.tqdm = functools.partial(original, desc=desc, unit="img", leave=False,
                                         disable=quiet())
    try:
        yield
    finally:
        ffcv.writer.tqdm = original


def ensure_beton(root: Path, cache_dir: Path, workers: int) -> tuple[Path, float | None]:
    """The .beton of `root` (written now if missing), and the seconds writing it took (None
    when it was already there). Written beside its final name, then renamed: an interrupted
    write never leaves a file that looks complete."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    path = beton_path(root, cache_dir)
    if path.exists():
        return path, None
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    started = time.perf_counter()
    try:
        writer = DatasetWriter(str(partial), {"image": RGBImageField(**STORED),
                                              "label": IntField()}, num_workers=workers)
        with writer_bar(f"FFCV .beton of {root.name}"):
            writer.from_indexed_dataset(torchvision.datasets.ImageFolder(root))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path, time.perf_counter() - started


# -- the loader ----------------------------------------------------------------------------

def calls(beton: Path, pipeline: str, batch_size: int, workers: int, seed: int,
          shuffle: bool = True) -> dict:
    if pipeline not in IMAGE_STEPS:
        raise ValueError(f"FFCV: unknown pipeline {pipeline!r} (known: {', '.join(IMAGE_STEPS)})")
    order = Name("OrderOption.RANDOM" if shuffle else "OrderOption.SEQUENTIAL")
    return {"image": IMAGE_STEPS[pipeline], "label": LABEL_STEPS,
            "loader": Call("Loader", str(beton), batch_size=batch_size, num_workers=workers,
                           order=order, drop_last=False, os_cache=True, batches_ahead=3,
                           seed=seed)}


def describe(plan: dict) -> str:
    image = ", ".join(step.text() for step in plan["image"])
    label = ", ".join(step.text() for step in plan["label"])
    pipelines = f"{{\n    'image': [{image}],\n    'label': [{label}]}}"
    return (f"ffcv.loader.{plan['loader'].text(pipelines=pipelines)}\n"
            f"  .beton stores {STORED} (RGB, re-encoded by FFCV from the decoded files)")


def namespace() -> dict:
    import numpy as np
    from ffcv.fields import decoders
    from ffcv.loader import Loader, OrderOption
    from ffcv import transforms

    names = {"np": np, "Loader": Loader, "OrderOption": OrderOption}
    for module in (decoders, transforms):
        names.update({name: getattr(module, name) for name in dir(module)
                      if not name.startswith("_")})
    return names


class FfcvLoader:
    """(images, labels) batches of FFCV's Loader over the .beton, one epoch per iteration.

    FFCV sets torch's thread count to its num_workers on every epoch (its Compiler does);
    the benchmark process's own count is put back after each epoch."""

    def __init__(self, beton: Path, pipeline: str, batch_size: int, workers: int, seed: int,
                 shuffle: bool = True):
        self.plan = calls(beton, pipeline, batch_size, workers, seed, shuffle)
        self.text = describe(self.plan)
        names = namespace()
        pipelines = {"image": [step.run(names) for step in self.plan["image"]],
                     "label": [step.run(names) for step in self.plan["label"]]}
        with kept_torch_threads():
            self._loader = self.plan["loader"].run(names, pipelines=pipelines)
        self.samples = len(self._loader.indices)

    def __iter__(self):
        with kept_torch_threads():
            yield from self._loader

    def close(self) -> None:
        """Drops FFCV's Loader now, and the functions it compiled with it. numba's finalizer
        of those raises a KeyError as they go (printed as "Exception ignored in: <finalize
        object ...>", from numba/core/dispatcher.py): harmless, and filtered out here."""
        self._loader = None
        with numba_finalizer_errors_ignored():
            gc.collect()


@contextlib.contextmanager
def numba_finalizer_errors_ignored():
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        frames = traceback.extract_tb(unraisable.exc_traceback)
        if not (isinstance(unraisable.exc_value, KeyError) and frames
                and frames[-1].filename.endswith(os.path.join("numba", "core", "dispatcher.py"))):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextlib.contextmanager
def kept_torch_threads():
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
