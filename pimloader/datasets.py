"""Datasets whose samples pimloader can read as encoded bytes.

`ImageFolder` is torchvision's (same arguments, `classes`, `class_to_idx`, `samples`, and
the same `(PIL image, target)` items when indexed directly). PIMDataLoader reads encoded
bytes from it and from torchvision's own ImageFolder and DatasetFolder (through their
`samples` list, when they use the default image loader), from plain lists of
`(path, target)` pairs.

`make_seekable` copies an image folder with its JPEGs rewritten losslessly with restart
markers, from which pimloader decodes a crop without entropy-decoding the rest of the image.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import torchvision.datasets as tv_datasets
from torchvision.datasets.folder import default_loader, pil_loader

from . import decode


class ImageFolder(tv_datasets.ImageFolder):
    """torchvision.datasets.ImageFolder under pimloader's name (same arguments and items)."""


@dataclass
class EncodedSample:
    data: bytes
    target: Any
    name: str  # names the sample in error messages: a path, or "sample 17"


class EncodedSource:
    """How to read a dataset's samples as encoded bytes, and the transform it carried."""

    def __init__(self, read: Callable[[int], EncodedSample], transform=None) -> None:
        self.read = read            # picklable: it travels to worker processes
        self.transform = transform  # the dataset's own transform, which the loader takes over

    @classmethod
    def detect(cls, dataset) -> "EncodedSource | None":
        if isinstance(dataset, tv_datasets.DatasetFolder) and dataset.loader in (
                default_loader, pil_loader):
            return cls(FolderReader(dataset), dataset.transform)
        if isinstance(dataset, (list, tuple)) and dataset and _is_path_pair(dataset[0]):
            return cls(PairReader(dataset))
        return None


class FolderReader:
    """Bytes and (target-transformed) target of a torchvision DatasetFolder's sample."""

    def __init__(self, dataset) -> None:
        self.samples = dataset.samples
        self.target_transform = dataset.target_transform

    def __call__(self, index: int) -> EncodedSample:
        path, target = self.samples[index]
        if self.target_transform is not None:
            target = self.target_transform(target)
        return EncodedSample(_read_file(path), target, str(path))


class PairReader:
    """Bytes and target of a `(path, target)` pair in a list."""

    def __init__(self, pairs) -> None:
        self.pairs = pairs

    def __call__(self, index: int) -> EncodedSample:
        path, target = self.pairs[index]
        return EncodedSample(_read_file(path), target, str(path))


def _is_path_pair(item) -> bool:
    return (isinstance(item, (tuple, list)) and len(item) == 2
            and isinstance(item[0], (str, os.PathLike)))


def _read_file(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


@dataclass
class SeekableCopy:
    """What make_seekable wrote."""
    transcoded: int         # JPEGs rewritten with restart markers
    copied: int             # other files, copied as they are
    unreadable: list        # JPEGs libjpeg could not read whole: copied as they are
    bytes_before: int       # of the transcoded JPEGs
    bytes_after: int


def make_seekable(source, destination, *, max_interval: int = 4, overwrite: bool = False,
                  threads: int | None = None) -> SeekableCopy:
    """Copy an image folder (any tree of files: an ImageFolder, a DatasetFolder) with every
    JPEG rewritten by `pimloader.decode.add_restart_markers`: the same pixels for every
    decoder, but pimloader then decodes a crop from the restart intervals around it instead
    of entropy-decoding the image from its start. Paths, names and everything else stay as
    they are, so `ImageFolder(destination)` has the same classes, samples and targets.

    A JPEG that libjpeg cannot read whole is copied unchanged (the loader will then raise,
    or skip it with on_error="skip", as for the original) and listed in `unreadable`.
    `destination` must not exist, unless `overwrite=True`. Files are rewritten on `threads`
    threads (default: one per CPU; libjpeg runs without the GIL), about 3 ms per
    ImageNet-sized photo on one core."""
    source, destination = os.fspath(source), os.fspath(destination)
    if not os.path.isdir(source):
        raise NotADirectoryError(f"make_seekable: {source!r} is not a directory")
    if os.path.exists(destination) and not overwrite:
        raise FileExistsError(f"make_seekable: {destination!r} exists (pass overwrite=True)")
    jobs = []
    for folder, _, files in os.walk(source):
        target_folder = os.path.join(destination, os.path.relpath(folder, source))
        os.makedirs(target_folder, exist_ok=True)
        jobs += [(os.path.join(folder, name), os.path.join(target_folder, name))
                 for name in sorted(files)]
    report = SeekableCopy(0, 0, [], 0, 0)
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        for outcome in pool.map(lambda job: _copy_seekable(*job, max_interval), jobs):
            _count(report, *outcome)
    return report


def _count(report: SeekableCopy, kind: str, path: str, before: int, after: int) -> None:
    if kind == "transcoded":
        report.transcoded += 1
        report.bytes_before += before
        report.bytes_after += after
    elif kind == "copied":
        report.copied += 1
    else:
        report.unreadable.append(path)


def _copy_seekable(path: str, target: str, max_interval: int) -> tuple:
    """(what was done, path, bytes before, bytes after) for one file."""
    data = _read_file(path)
    if not decode.is_jpeg(data):
        shutil.copyfile(path, target)
        return "copied", path, 0, 0
    try:
        rewritten = decode.add_restart_markers(data, max_interval, name=path)
    except decode.DecodeError:
        shutil.copyfile(path, target)
        return "unreadable", path, 0, 0
    with open(target, "wb") as file:
        file.write(rewritten)
    return "transcoded", path, len(data), len(rewritten)
