"""The source/task seam: what every task that reads a source's encoded samples shares.

A task that reads encoded samples (classification, detection, audio, a user's) finds its
source here, once: `sourced(dataset, transform)` is the dataset's source and the transform
the loader runs over it (a `SourceView`), or None. Where the dataset's items are encoded
bytes (tar members, Arrow cells, a list of bytes) the transform starts with `Decode()`,
which the view takes off: the task decodes the bytes natively instead (`view.decode` keeps
its arguments). A transform of image ops given to such a dataset without `Decode()` first is
a ValueError that says so, at construction, rather than a TypeError inside torchvision.
An IterableDataset's items are not read before the loader iterates: there the steps after
Decode say what the items are (images or clips with labels, or, with a step on boxes,
images with detection targets), and each process's producer reads them a batch at a time
(`IteratedBatches`, for every task alike).

A task gets its reader here too: `reader_for(source, options)` is the source itself, or with `cache_bytes`
a `CachedReader` over it (datasets/cache.py: the encoded-sample cache in shared memory).
Its pipeline subclasses `SourcedPipeline`, which allocates and frees the cache's segment
(`open_shared` / `close_shared`) and makes its producers count the cache's hits and misses
(`counted`), so that no task writes the cache's wiring again.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

from torch.utils.data import IterableDataset

from pimloader.datasets.cache import CachedReader, SampleCache
from pimloader.datasets.cluster_cache import ClusterCache, ClusterReader
from pimloader.datasets.items import BatchItems, ItemsSource, IteratedItems
from pimloader.datasets.source import (AUDIO_LABEL, IMAGE_BOXES, IMAGE_LABEL, Source,
                                       source_of)
from pimloader.loader.produce import Pipeline, Produced
from pimloader.loader.tasks import once_per_lookup
from pimloader.options import ClusterScope
from pimloader.transforms.registry import (BOXES, COLOUR, DECODE, ELEMENTWISE, GEOMETRY,
                                           MASK, SPECTROGRAM, TO_DB, TO_IMAGE, WAVEFORM,
                                           flatten, given_once, op_of)

# the roles of ops that take decoded images: given bytes they fail inside torchvision
_IMAGE_ROLES = frozenset({TO_IMAGE, GEOMETRY, COLOUR, ELEMENTWISE})
_AUDIO_ROLES = frozenset({SPECTROGRAM, TO_DB, MASK, WAVEFORM})


@dataclass
class SourceView:
    """A dataset's source, and the transform a task runs over its samples."""

    source: Source
    transform: Any        # the dataset's or the loader's transform, its Decode step taken off
    decode: Any = None    # that Decode step (None: the dataset decodes its items itself)
    own_transform: bool = False  # the transform is the dataset's own (the loader gave none)
    given: Any = None     # the transform as given, Decode included (what runs as Python)


@once_per_lookup
def sourced(dataset, transform) -> SourceView | None:
    """The source of `dataset` and what of `transform` runs over it; None when pimloader
    cannot read the dataset's samples as encoded bytes. Raises ValueError for a transform of
    image ops over encoded items with no Decode step first."""
    steps = flatten(transform)
    if steps and _is_decode(steps[0]) and isinstance(dataset, IterableDataset):
        fields = _stream_fields(steps[1:])
        if fields is None:
            return None
        return SourceView(IteratedItems(fields), _composed(steps[1:]), steps[0],
                          given=transform)
    if steps and _is_decode(steps[0]):
        source = source_of(dataset)
        if source is None or not source.encoded_items:
            source = ItemsSource.of(dataset)
        if source is None:
            return None
        return SourceView(source, _composed(steps[1:]), steps[0], given=transform)
    source = source_of(dataset)
    if source is None and isinstance(dataset, (list, tuple)):
        source = ItemsSource.of(dataset)   # a list of (bytes, target) pairs
    if source is None:
        return None
    if source.encoded_items:
        _refuse_undecoded(source, steps)
        return None
    own = transform is None
    transform = given_once(source.transform, transform)
    return SourceView(source, transform, own_transform=own, given=transform)


def _stream_fields(steps: list) -> frozenset | None:
    """What an IterableDataset's items are, as the steps after Decode say (no item is read
    before the loader iterates): images with detection targets where a step works on boxes
    (SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat), else images or
    clips with labels; None when no step says. BatchItems holds each item to it."""
    roles = {op.role for op in map(op_of, steps) if op is not None}
    if BOXES in roles:
        return IMAGE_BOXES
    if roles & _IMAGE_ROLES:
        return IMAGE_LABEL
    if roles & _AUDIO_ROLES:
        return AUDIO_LABEL
    return None


def _is_decode(step) -> bool:
    op = op_of(step)
    return op is not None and op.role == DECODE


def _composed(steps: list):
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]
    from torchvision.transforms.v2 import Compose
    return Compose(steps)


def _refuse_undecoded(source, steps: list) -> None:
    op = op_of(steps[0]) if steps else None
    if op is not None and op.role in _IMAGE_ROLES:
        raise ValueError(
            f"the dataset's items are encoded bytes ({source!r}), and the transform starts "
            f"with {type(steps[0]).__name__}, which takes decoded images: start it with "
            f"pimloader.transforms.Decode(), as T.Compose([T.Decode(), ...])")


def reader_for(source, options):
    """How a pipeline reads `source`'s samples: through the encoded-sample cache when the
    loader has `cache_bytes`, else from the source itself."""
    if getattr(source, "iterated", False) and not options.batched:
        raise ValueError(
            "batch_size=None over an IterableDataset of encoded items under T.Decode(): "
            "pimloader transforms such items a batch at a time; give batch_size=N, or map "
            "the transform over the dataset yourself (e.g. webdataset's .map_tuple) and "
            "pass no transform")
    if not options.cache_bytes:
        return source
    if getattr(source, "iterated", False):
        warnings.warn("cache_bytes does not apply to an IterableDataset's items (they have "
                      "no index to cache them by); this loader reads them without a cache",
                      stacklevel=5)
        return source
    if isinstance(options.cache_scope, ClusterScope):
        return ClusterReader(source, ClusterCache(options.cache_bytes, source, options.cache_scope),
                             seekable=options.cache_seekable)
    return CachedReader(source, SampleCache(options.cache_bytes, len(source)),
                        seekable=options.cache_seekable)


class SourcedPipeline(Pipeline):
    """A pipeline whose samples come from a source through `reader_for`'s reader."""

    def source_reader(self):
        """The reader `reader_for` gave this pipeline."""
        raise NotImplementedError

    def iterated_batches(self, context, make: Callable[[BatchItems], Any]):
        """The producer of a loader over an IterableDataset: IteratedBatches, `make(items)`
        being the task's map-style producer over a BatchItems of its reader's fields; None
        (torch's path) when the reader is not an IterableDataset's items (IteratedItems).
        (An unbatched loader over such items is refused when it is made: reader_for.)"""
        reader = self.source_reader()
        if not getattr(reader, "iterated", False):
            return None
        return IteratedBatches.over(context, reader.fields, make)

    @property
    def cache(self) -> SampleCache | None:
        """The encoded-sample cache the reader goes through (cache_bytes > 0), or None."""
        reader = self.source_reader()
        return reader.cache if isinstance(reader, CachedReader) else None

    def counted(self, producer):
        """`producer`, whose batches carry the cache's counts when there is a cache."""
        reader = self.source_reader()
        return CacheCountingProducer(producer, reader) if isinstance(reader, CachedReader) \
            else producer

    def open_shared(self, workers: bool = True) -> None:
        """Allocate the sample cache's segment (main process, before workers start)."""
        if self.cache is not None:
            self.cache.open()

    def close_shared(self) -> None:
        """Drop the main process's hold on the sample cache (loader.close())."""
        if self.cache is not None:
            self.cache.close()

    def epoch_observer(self, stats):
        """A cluster cache's exchange for the epoch (Pipeline.epoch_observer), or None."""
        reader = self.source_reader()
        return reader.epoch_observer(stats) if isinstance(reader, ClusterReader) else None


class CacheCountingProducer:
    """A producer whose batches carry the sample cache's hits and misses since the last."""

    def __init__(self, producer, reader: CachedReader) -> None:
        self.producer = producer
        self.reader = reader

    @property
    def current(self) -> str:
        return self.producer.current

    def prefetch(self, index) -> bool:
        return self.producer.prefetch(index)

    def produce(self, index) -> Produced:
        produced = self.producer.produce(index)
        (produced.cache_hits, produced.cache_misses, produced.cache_hit_bytes,
         produced.cache_miss_bytes, produced.cache_seekable_copies) = self.reader.take_counts()
        return produced


class IteratedBatches:
    """The producer of a task over an IterableDataset of encoded items: it pulls one batch
    of items from the process's iterator (torch's IterableFetcher: its end and drop_last),
    holds them in a `BatchItems`, and has the task's map-style producer, made once over
    that source, make the batch from samples 0..n-1 (classification's, detection's or
    audio's alike: `SourcedPipeline.iterated_batches`). The iterator stays the fetcher's, so
    resume snapshots and replays it as for any IterableDataset."""

    def __init__(self, fetcher, items: BatchItems, producer) -> None:
        self.fetcher = fetcher      # loader.fetch.IterableFetcher
        self.items = items
        self.producer = producer

    @classmethod
    def over(cls, context, fields, make: Callable[[BatchItems], Any]) -> "IteratedBatches | None":
        """For a batched loader (None with batch_size=None: torch's path): `make(items)` is
        the task's producer over a BatchItems."""
        if not context.auto_collation:
            return None
        items = BatchItems(fields)
        return cls(context.plain_fetcher(), items, make(items))

    @property
    def current(self) -> str:
        return self.producer.current if self.items.items else self.fetcher.current

    def prefetch(self, index) -> bool:
        """Nothing: a batch's items are known only once the iterator gives them."""
        return False

    def produce(self, index) -> Produced:
        self.items.hold([], self.fetcher.fetched)
        samples = self.fetcher.fetch(index)       # StopIteration ends the worker's stream
        self.items.hold(samples, self.fetcher.fetched - len(samples))
        return self.producer.produce(list(range(len(samples))))
