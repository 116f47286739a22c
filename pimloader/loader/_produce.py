"""Turning a batch of indices into what a consumer receives: a slot batch or a collated one."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from torch.utils.data import default_collate

from ._slots import SlotBatch, SlotWriter


@dataclass
class Produced:
    """One batch as it leaves its producer, with the time spent making it."""

    data: Any            # a SlotBatch, or the output of collate_fn
    count: int           # samples in the batch
    fetch_s: float
    write_s: float
    skipped: int = 0     # samples dropped by on_error="skip"
    decode_s: float = 0.0  # of the write time, seconds spent decoding images natively
    kernel_samples: int = 0  # in-memory images the fused kernel transformed
    direct_samples: int = 0  # of those, the ones it rendered straight into the batch slot


class BatchProducer:
    def __init__(self, fetcher, collate_fn, auto_collation: bool,
                 writer: SlotWriter | None) -> None:
        self.fetcher = fetcher
        self.collate_fn = collate_fn
        uses_default_collate = auto_collation and collate_fn is default_collate
        self.writer = writer if uses_default_collate else None

    @property
    def current(self) -> str:
        return self.fetcher.current

    def produce(self, index) -> Produced:
        start = time.perf_counter()
        samples = self.fetcher.fetch(index)
        fetched = time.perf_counter()
        data = self.written_or_collated(index, samples)
        return self.produced(data, len(samples) if self.fetcher.auto_collation else 1,
                             fetched - start, time.perf_counter() - fetched)

    def written_or_collated(self, index, samples):
        """`samples` written into a slot, or else collated by `collate_fn`."""
        data = self.writer.write(samples) if self.writer is not None else None
        if data is None:
            self.fetcher.current = f"the batch of {_describe(index, samples)} (collate_fn)"
            data = self.collate_fn(samples)
        return data

    def produced(self, data, count: int, fetch_s: float, write_s: float,
                 direct_samples: int = 0) -> Produced:
        skipped = self.fetcher.take_skipped() if hasattr(self.fetcher, "take_skipped") else 0
        kernel_samples = (self.fetcher.take_kernel_samples()
                          if hasattr(self.fetcher, "take_kernel_samples") else 0)
        return Produced(data, count, fetch_s, write_s, skipped, kernel_samples=kernel_samples,
                        direct_samples=direct_samples)


class InMemoryImageProducer(BatchProducer):
    """A BatchProducer over a TransformingFetcher whose transform runs the fused kernel
    (an `InMemoryImages`): a batch whose images all take the kernel with one output shape
    and dtype is rendered straight into the rows of a batch slot, without per-sample
    outputs; any other batch (or no free slot) takes BatchProducer's path, unchanged."""

    def produce(self, index) -> Produced:
        if self.writer is None:
            return super().produce(index)
        start = time.perf_counter()
        batch = self.fetcher.drawn(index)
        fetched = time.perf_counter()
        data = self.fetcher.written(batch, self.writer)
        direct_samples = len(batch) if data is not None else 0
        if data is None:
            data = self.written_or_collated(index, self.fetcher.finished(batch))
        return self.produced(data, len(batch), fetched - start,
                             time.perf_counter() - fetched, direct_samples)


def _describe(index, samples) -> str:
    if isinstance(index, (list, tuple)) and index and index[0] is not None:
        return f"samples {list(index)!r}"
    return f"{len(samples) if isinstance(samples, list) else 1} sample(s)"


def is_slot_batch(data: Any) -> bool:
    return isinstance(data, SlotBatch)


def make_producer(dataset, is_iterable: bool, auto_collation: bool, collate_fn,
                  drop_last: bool, writer, image_pipeline=None, sample_transform=None):
    """The producer for one iterator or worker: the native image path when the loader
    built one, else torch's fetch-then-collate semantics (with slots when possible), with
    the loader's `transform` applied to each sample if it could not be lowered."""
    from ._fetch import TransformingFetcher, create_fetcher
    if image_pipeline is None or is_iterable:
        fetcher = create_fetcher(is_iterable, dataset, auto_collation, drop_last)
        if sample_transform is not None:
            fetcher = TransformingFetcher(fetcher, sample_transform)
            if fetcher.native:
                return InMemoryImageProducer(fetcher, collate_fn, auto_collation, writer)
        return BatchProducer(fetcher, collate_fn, auto_collation, writer)
    from pimloader.pipelines.classification import DirectImageProducer, ImageFetcher
    fallback = BatchProducer(ImageFetcher(image_pipeline, auto_collation), collate_fn,
                             auto_collation, writer)
    if image_pipeline.direct and fallback.writer is not None:
        return DirectImageProducer(image_pipeline, writer, fallback)
    return fallback


def deliver(produced: Produced, pool, stats, pin_device: str | None):
    """What the user gets for a produced batch: views lent from its slot, or the collated
    data (pinned by copy when pinning is on); the batch is counted in `stats`."""
    shared = isinstance(produced.data, SlotBatch)
    stats.add_batch(produced, shared)
    if shared:
        return pool.lend(produced.data)
    if pin_device is not None:
        from ._pin import pin_collated
        return pin_collated(produced.data, pin_device)
    return produced.data
