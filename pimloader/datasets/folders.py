"""Datasets whose samples pimloader can read as encoded bytes.

`ImageFolder` is torchvision's (same arguments, `classes`, `class_to_idx`, `samples`, and
the same `(PIL image, target)` items when indexed directly). PIMDataLoader reads encoded
bytes from it and from torchvision's own ImageFolder and DatasetFolder (through their
`samples` list, when they use the default image loader), from plain lists of
`(path, target)` pairs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import torchvision.datasets as tv_datasets
from torchvision.datasets.folder import default_loader, pil_loader



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

    def __len__(self) -> int:
        return len(self.samples)

    def metadata(self, index: int) -> tuple:
        """(target, name) of a sample, without reading its file."""
        path, target = self.samples[index]
        if self.target_transform is not None:
            target = self.target_transform(target)
        return target, str(path)

    def __call__(self, index: int) -> EncodedSample:
        target, name = self.metadata(index)
        return EncodedSample(_read_file(self.samples[index][0]), target, name)


class PairReader:
    """Bytes and target of a `(path, target)` pair in a list."""

    def __init__(self, pairs) -> None:
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def metadata(self, index: int) -> tuple:
        """(target, name) of a sample, without reading its file."""
        path, target = self.pairs[index]
        return target, str(path)

    def __call__(self, index: int) -> EncodedSample:
        path, target = self.pairs[index]
        return EncodedSample(_read_file(path), target, str(path))


def _is_path_pair(item) -> bool:
    return (isinstance(item, (tuple, list)) and len(item) == 2
            and isinstance(item[0], (str, os.PathLike)))


def _read_file(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()
