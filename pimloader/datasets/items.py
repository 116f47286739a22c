"""Any map-style dataset whose items are (encoded bytes, target), as a source.

A list of `(bytes, label)` pairs, a user's Dataset that returns a blob from a key-value
store and its label, a dataset over a table's cells: when the loader's transform starts with
`Decode()`, the loader reads such a dataset's items as encoded samples and decodes them
natively, as it reads an image folder's files. `ItemsSource.of(dataset)` looks at the first
item to say what the items carry (`fields`):

    data    bytes, bytearray, memoryview, 1-D uint8 numpy array or tensor
            -> "audio" where it starts as a WAV or FLAC file does, else "image"
    target  a dict holding a tv_tensors.BoundingBoxes (torchvision's detection target)
            -> "boxes": the detection task's, whose joint transforms move the boxes with
            the image (`BoxedItems`); anything else -> "label", kept as given

Reading sample i is `dataset[i]`, in the process that decodes it, so a target costs a whole
item: a dataset that can give targets and stable keys without reading the bytes (TarShards,
Arrow columns) registers a source of its own instead (source.py). Items have no stable key
across runs here, so a sample is named "item 17 of <type>" in errors and `key` is that name.
"""
from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors

from pimloader.transforms.decode import encoded_bytes, is_audio

from .source import EncodedSample, Source

_BYTES_LIKE = (bytes, bytearray, memoryview)


class ItemsSource(Source):
    """The items of a map-style dataset as (encoded bytes, target) samples."""

    encoded_items = True

    def __init__(self, dataset, fields) -> None:
        self.dataset = dataset
        self.fields = frozenset(fields)

    @classmethod
    def of(cls, dataset) -> "ItemsSource | None":
        """The source of `dataset`'s items, or None when it is not a map-style dataset of
        (encoded bytes, target) items (judged by its first item)."""
        if isinstance(dataset, torch.utils.data.IterableDataset) or not _is_sized(dataset):
            return None
        if len(dataset) == 0:
            return None
        first = _first_item(dataset)
        if not _is_pair(first) or not is_encoded(first[0]):
            return None
        return cls(dataset, {_medium(first[0]), _target_field(first[1])})

    def __len__(self) -> int:
        return len(self.dataset)

    def metadata(self, index: int) -> tuple:
        sample = self.read(index)
        return sample.target, sample.name

    def read(self, index: int) -> EncodedSample:
        item = self.dataset[index]
        name = self.name(index)
        if not _is_pair(item):
            raise TypeError(f"{name} is {type(item).__name__}, not an (encoded bytes, target) "
                            f"pair like the dataset's first item")
        return EncodedSample(encoded_bytes(item[0]), item[1], name)

    def name(self, index: int) -> str:
        return f"item {index} of {type(self.dataset).__name__}"

    def key(self, index: int) -> bytes:
        return self.name(index).encode()

    def __repr__(self) -> str:
        return f"ItemsSource({len(self)} items, fields={sorted(self.fields)})"


def _first_item(dataset):
    """dataset[0], leaving the random states as they were: a dataset that draws numbers
    must draw them in the loader's order, as under torch."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            return dataset[0]
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def is_encoded(data: Any) -> bool:
    """Whether `data` is what Decode takes: bytes-like, or a 1-D uint8 array or tensor."""
    if isinstance(data, _BYTES_LIKE):
        return True
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return data.ndim == 1 and data.dtype in (np.uint8, torch.uint8)
    return False


def _medium(data) -> str:
    return "audio" if is_audio(encoded_bytes(data)[:4]) else "image"


def _target_field(target) -> str:
    if isinstance(target, dict) and any(isinstance(value, tv_tensors.BoundingBoxes)
                                        for value in target.values()):
        return "boxes"
    return "label"


class BoxedItems(Source):
    """Items (encoded bytes, torchvision detection target) as the detection task reads a
    COCO set: its (image, target) transforms, the decoded image entering them as a
    tv_tensors.Image (what Decode makes), each target as the item gives it (a copy: the
    transforms may change it), its boxes' canvas checked against the decoded image."""

    encoded_items = True
    enters_as = "image"

    def __init__(self, items: Source, transform=None) -> None:
        self.items = items
        self.fields = items.fields
        self.transform = transform

    @property
    def transforms(self):
        return self.transform

    @property
    def reader(self) -> Source:
        return self.items

    def with_transforms(self, transforms) -> "BoxedItems":
        return BoxedItems(self.items, transforms)

    def with_items(self, items: Source) -> "BoxedItems":
        """These transforms over other items (an IterableDataset's batch: BatchItems)."""
        return BoxedItems(items, self.transform)

    def __len__(self) -> int:
        return len(self.items)

    def metadata(self, index: int) -> tuple:
        return self.items.metadata(index)

    def read(self, index: int) -> EncodedSample:
        return self.items.read(index)

    def key(self, index: int) -> bytes:
        return self.items.key(index)

    def target(self, index: int, target: dict, canvas_size) -> dict:
        for value in target.values():
            if isinstance(value, tv_tensors.BoundingBoxes) and \
                    tuple(value.canvas_size) != tuple(canvas_size):
                raise ValueError(f"{self.items.metadata(index)[1]}: its boxes' canvas_size "
                                 f"{tuple(value.canvas_size)} is not the decoded image's "
                                 f"size {tuple(canvas_size)}")
        return {key: value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
                for key, value in target.items()}


def _is_pair(item) -> bool:
    return isinstance(item, (tuple, list)) and len(item) == 2


def _is_sized(dataset) -> bool:
    return hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")


class IteratedItems(Source):
    """The items of an IterableDataset of (encoded bytes, target) (webdataset's
    `.to_tuple("jpg;png", "cls")`, a stream of blobs): no index, no length. Each process
    iterates its own copy of the dataset, as under torch; a producer pulls one batch of
    items at a time and reads them through a `BatchItems` (`fields`: what the transform
    after Decode says they are, since no item is read before the loader iterates: images
    or clips with labels, or images with detection targets, whose items BoxedItems reads
    as for a map-style dataset)."""

    encoded_items = True
    iterated = True

    def __init__(self, fields) -> None:
        self.fields = frozenset(fields)

    def __len__(self) -> int:
        raise TypeError("an IterableDataset's items have no index: they are read a batch "
                        "at a time (BatchItems)")

    def __repr__(self) -> str:
        return f"IteratedItems(fields={sorted(self.fields)})"


class BatchItems(Source):
    """One batch of items pulled from an iterator, as a source of that many samples:
    sample i is the batch's i-th item, named by its place in the iterator's stream. An item
    whose target is not what `fields` says (a detection target where the transform has no
    step on boxes, or the other way round) is a TypeError naming it: the task was chosen
    by the transform, and the other task's output would be wrong, not just slow."""

    encoded_items = True

    def __init__(self, fields=frozenset()) -> None:
        self.fields = frozenset(fields)
        self.items: list = []
        self.first = 0   # how many items the iterator gave before this batch

    def hold(self, items: list, first: int) -> None:
        self.items, self.first = items, first

    def __len__(self) -> int:
        return len(self.items)

    def name(self, index: int) -> str:
        return f"sample {self.first + index} of this process's iterator (IterableDataset)"

    def metadata(self, index: int) -> tuple:
        return self.items[index][1], self.name(index)

    def read(self, index: int) -> EncodedSample:
        item = self.items[index]
        if not _is_pair(item) or not is_encoded(item[0]):
            raise TypeError(f"{self.name(index)} is {_describe(item)}, not an (encoded bytes, "
                            f"target) pair, as the transform's Decode step needs")
        if _target_field(item[1]) not in self.fields:
            raise TypeError(f"{self.name(index)}: {_TARGET_MISMATCH[_target_field(item[1])]}")
        return EncodedSample(encoded_bytes(item[0]), item[1], self.name(index))

    def key(self, index: int) -> bytes:
        return self.name(index).encode()


_TARGET_MISMATCH = {
    "boxes": "its target holds tv_tensors.BoundingBoxes, but the transform has no step on "
             "boxes, which is how the loader tells an IterableDataset of detection samples: "
             "add one (T.SanitizeBoundingBoxes(), or T.ClampBoundingBoxes() where no box may "
             "be dropped) for the detection pipeline, whose transforms move the boxes",
    "label": "its target holds no tv_tensors.BoundingBoxes, but the transform has a step on "
             "boxes (a detection pipeline): give each item a torchvision detection target "
             "(a dict with a BoundingBoxes)",
}


def _describe(item) -> str:
    if _is_pair(item):
        return f"a pair whose first element is a {type(item[0]).__name__}"
    return f"a {type(item).__name__}"
