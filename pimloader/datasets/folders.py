"""Image folders and lists of (path, target) pairs as sources of encoded bytes.

`ImageFolder` is torchvision's (same arguments, `classes`, `class_to_idx`, `samples`, and
the same `(PIL image, target)` items when indexed directly). PIMDataLoader reads encoded
bytes from it and from torchvision's own ImageFolder and DatasetFolder (through their
`samples` list, when they use the default image loader), and from plain lists or tuples of
`(path, target)` pairs: each becomes a `FileSource`, whose paths and targets sit in compact
arrays (index.py) built once, in the process that makes the loader.
"""
from __future__ import annotations

import os
from typing import Callable

import torchvision.datasets as tv_datasets
from torchvision.datasets.folder import default_loader, pil_loader

from .index import PathIndex
from .source import IMAGE_LABEL, EncodedSample, Source, read_file, register_source


class ImageFolder(tv_datasets.ImageFolder):
    """torchvision.datasets.ImageFolder under pimloader's name (same arguments and items)."""


class FileSource(Source):
    """Samples that are whole files: a PathIndex (paths, targets), what the files hold
    (`fields`), the dataset's transform and its target_transform (applied as a sample's
    target is read, as torchvision's DatasetFolder does)."""

    def __init__(self, index: PathIndex, fields=IMAGE_LABEL, transform=None,
                 target_transform: Callable | None = None) -> None:
        self.index = index
        self.fields = frozenset(fields)
        self.transform = transform
        self.target_transform = target_transform

    @classmethod
    def from_pairs(cls, pairs, **kwargs) -> "FileSource":
        """The source of a sequence of (path, target) pairs (kwargs: as the constructor's)."""
        return cls(PathIndex.from_pairs(pairs), **kwargs)

    def __len__(self) -> int:
        return len(self.index)

    def metadata(self, index: int) -> tuple:
        target = self.index.target(index)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return target, self.index.name(index)

    def read(self, index: int) -> EncodedSample:
        target, name = self.metadata(index)
        return EncodedSample(read_file(name), target, name)

    def key(self, index: int) -> bytes:
        return self.index.path(index)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} files, fields={sorted(self.fields)}, "
                f"index {self.index.nbytes} bytes)")


@register_source(tv_datasets.DatasetFolder)
def folder_source(dataset) -> FileSource | None:
    """torchvision's ImageFolder / DatasetFolder that loads images with PIL's default
    loader (another loader reads its files its own way: torch's path)."""
    if dataset.loader not in (default_loader, pil_loader):
        return None
    return FileSource(PathIndex.from_pairs(dataset.samples), IMAGE_LABEL, dataset.transform,
                      dataset.target_transform)


def pairs_source(pairs) -> FileSource | None:
    """A list or tuple of (path, target) pairs (judged by its first item)."""
    if not pairs or not _is_path_pair(pairs[0]):
        return None
    for position, item in enumerate(pairs):
        if not _is_path_pair(item):
            raise ValueError(f"item {position} of the dataset, {item!r}, is not a (path, "
                             f"target) pair like the first one")
    return FileSource.from_pairs(pairs)


register_source(list, pairs_source)
register_source(tuple, pairs_source)


def _is_path_pair(item) -> bool:
    return (isinstance(item, (tuple, list)) and len(item) == 2
            and isinstance(item[0], (str, os.PathLike)))
