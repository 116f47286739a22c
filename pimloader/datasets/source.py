"""Sources: where a dataset's samples are, as encoded bytes and a target, whatever the task.

A source says how to get sample i's encoded bytes and target (an image folder, a list of
pairs, COCO annotations, audio class folders, a user's own); a task says what one batch
runs with them. Any source feeds any task whose fields it carries.

    source = source_of(dataset)      # None: no registered adapter takes the dataset
    len(source), source.fields       # e.g. {"image", "label"}, {"image", "coco"}, {"audio", "label"}
    source.read(i)                   # EncodedSample(data, target, name); source(i) is the same
    source.metadata(i)               # (target, name), without reading the file
    source.key(i)                    # bytes naming sample i's bytes, stable across processes
    source.prefetch([i, j, ...])     # a hint: these are read next (tar shards over HTTP)
    source.prefetches                # whether that hint does anything (skipped if not)
    source.transform                 # the dataset's own transform, which the loader takes over
    source.encoded_items             # the dataset's items are the encoded bytes (Decode first)

A source is picklable (it goes to the workers) and keeps its index in compact arrays
(`index.py`), not in per-sample Python objects.

Adapters turn datasets into sources: `register_source(DatasetType, adapter)` (or as a
decorator), one per dataset type, duplicates refused; `source_of(dataset)` tries the
adapters of the dataset's classes from the most specific (its own type's MRO) to the least,
and returns the first source one of them gives (an adapter returns None to pass).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

IMAGE_LABEL = frozenset({"image", "label"})
AUDIO_LABEL = frozenset({"audio", "label"})
IMAGE_COCO = frozenset({"image", "coco"})      # a COCO set's annotations (CocoSource)
IMAGE_BOXES = frozenset({"image", "boxes"})    # torchvision detection targets, as given


@dataclass
class EncodedSample:
    data: bytes
    target: Any
    name: str  # names the sample in error messages: a path, or "sample 17"
    index: int | None = None  # the dataset index it was read at, where a pipeline keeps
    #                           something per sample (seek indexes); None otherwise


class Source:
    """A dataset's samples as encoded bytes + target. Subclasses give `__len__`,
    `metadata(index)` and `read(index)`, and set `fields`; `key` defaults to the name."""

    fields: frozenset = frozenset()   # what a sample carries: "image", "audio", "label", "coco"
    transform: Any = None             # the dataset's own transform (None: it had none)
    # True when the dataset's own items carry the encoded bytes (tar members, Arrow cells,
    # a list of bytes): the loader's transform then starts with a Decode step, as
    # torchvision's decode_image would. False when the dataset decodes them itself (an
    # ImageFolder's PIL images, an AudioFolder's waveforms).
    encoded_items: bool = False

    def __len__(self) -> int:
        raise NotImplementedError

    def metadata(self, index: int) -> tuple:
        """(target, name) of sample `index`, without reading its bytes."""
        raise NotImplementedError

    def read(self, index: int) -> EncodedSample:
        raise NotImplementedError

    def key(self, index: int) -> bytes:
        """Bytes that name sample `index`'s encoded bytes, the same in every process and
        run over the same data (a path): what a cache of encoded samples may key on."""
        return os.fsencode(self.metadata(index)[1])

    prefetches = False   # whether prefetch does anything: callers skip the hint if not

    def prefetch(self, indices) -> None:
        """A hint that samples `indices` are read soon, by this thread: a source may fetch
        their bytes together (TarShardSource: in runs over HTTP), and then says so with
        `prefetches`. Errors are left to the reads. Nothing by default."""

    def __call__(self, index: int) -> EncodedSample:
        return self.read(index)


def prefetch(reader, indices) -> bool:
    """`reader.prefetch(indices)` where the reader prefetches (a plain callable does not):
    the hint costs nothing on the hot path of a source that would ignore it. Whether the
    reader prefetches."""
    if not getattr(reader, "prefetches", False):
        return False
    reader.prefetch(indices)
    return True


def read_file(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


Adapter = Callable[[Any], Optional[Source]]
_ADAPTERS: dict[type, Adapter] = {}


def register_source(dataset_type: type, adapter: Adapter | None = None):
    """Register `adapter(dataset) -> Source | None` for datasets of `dataset_type` (and its
    subclasses, unless one has its own). Returns the adapter, so that it works as a
    decorator too: `@register_source(MyDataset)`. A second adapter for the same type is a
    ValueError."""
    if not isinstance(dataset_type, type):
        raise TypeError(f"register_source takes a dataset type, got {dataset_type!r}")
    if adapter is None:
        return lambda function: register_source(dataset_type, function)
    if not callable(adapter):
        raise TypeError(f"register_source: the adapter must be callable, got {adapter!r}")
    present = _ADAPTERS.get(dataset_type)
    if present is not None:
        raise ValueError(f"a source adapter for {dataset_type.__qualname__} is registered "
                         f"already ({_describe(present)}); register one for a subclass "
                         f"instead")
    _ADAPTERS[dataset_type] = adapter
    return adapter


def source_of(dataset) -> Source | None:
    """The source of `dataset`: the first one given by the adapters registered for its
    classes, most specific first; None when none takes it."""
    for kind in type(dataset).__mro__:
        adapter = _ADAPTERS.get(kind)
        if adapter is not None:
            source = adapter(dataset)
            if source is not None:
                return source
    return None


def registered_sources() -> dict[type, Adapter]:
    """{dataset type: adapter} of the registered adapters (a copy)."""
    return dict(_ADAPTERS)


def _describe(adapter) -> str:
    return f"{getattr(adapter, '__module__', '?')}.{getattr(adapter, '__qualname__', adapter)}"
