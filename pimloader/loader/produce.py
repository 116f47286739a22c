"""Turning a batch of indices into what a consumer receives: a slot batch or a collated one."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from torch.utils.data import default_collate

from .arena import ArenaBatch
from .resources import ProcessResources
from .slots import SlotBatch, SlotWriter


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
    cache_hits: int = 0      # samples whose encoded bytes came from the sample cache
    cache_misses: int = 0    # samples read from their files (cache_bytes > 0)
    cache_hit_bytes: int = 0
    cache_miss_bytes: int = 0
    cache_seekable_copies: int = 0  # JPEGs the cache took as seekable copies (cache_seekable)
    seek_indexes_made: int = 0   # JPEGs given a seek index (seek_index_bytes)
    seek_index_decodes: int = 0  # crops decoded with one
    decode_counts: dict = field(default_factory=dict)  # "" -> decoded by the backend (DPUs),
    #                                                    a reason -> decoded on the host


class BatchProducer:
    """Makes a batch with a fetcher's samples, then a slot or `collate_fn`. Every producer
    offers what this one does: `produce(index)`, `current` (what it is making, for error
    messages) and `prefetch(index)`, a hint that batch `index` comes next, so that a
    source that fetches ahead (tar shards over HTTP) fetches it while this batch is made;
    it returns whether the hint went to such a source (False: nothing to fetch, nothing
    done)."""

    def __init__(self, fetcher, collate_fn, auto_collation: bool,
                 writer: SlotWriter | None) -> None:
        self.fetcher = fetcher
        self.collate_fn = collate_fn
        uses_default_collate = auto_collation and collate_fn is default_collate
        self.writer = writer if uses_default_collate else None

    @property
    def current(self) -> str:
        return self.fetcher.current

    def prefetch(self, index) -> bool:
        """A hint that batch `index` comes next (the worker gives it while it makes the
        batch before): passed on to the fetcher."""
        return self.fetcher.prefetch(index)

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
        return Produced(data, count, fetch_s, write_s, self.fetcher.take_skipped(),
                        kernel_samples=self.fetcher.take_kernel_samples(),
                        direct_samples=direct_samples,
                        decode_counts=self.fetcher.take_decode_counts())


def _describe(index, samples) -> str:
    if isinstance(index, (list, tuple)) and index and index[0] is not None:
        return f"samples {list(index)!r}"
    return f"{len(samples) if isinstance(samples, list) else 1} sample(s)"


class Pipeline:
    """What the loader asks of the pipeline of a task (a registered Task's build, tasks.py):
    one picklable object, built once in the main process and sent to the workers.

    `make_producer(context)` returns the producer of the loader's batches in one process (or
    None: torch's own path). `open_shared(workers)` runs in the main process before the
    workers of an epoch start (shared state such as a sample cache; `workers`: whether the
    loader has any, else it may keep that state in its own memory); `close_shared()` at
    loader.close()."""

    def make_producer(self, context: "ProducerContext"):
        raise NotImplementedError

    def kernel_backend(self) -> tuple[str, bool]:
        """What stats() reports (EpochStats.backend, .dpu_decode): the kind of backend its
        kernels run on ("cpu", "emulator", "upmem"; "" when none runs) and whether that
        backend decodes images itself."""
        return "", False

    def open_shared(self, workers: bool = True) -> None:
        pass

    def epoch_observer(self, stats):
        """None, or what follows one epoch's index batches in the main process (the epoch
        tracker calls it): `announced(index)` as each is handed to a producer (before a
        worker can see it), `delivered()` as each is delivered (in order), `ended()` when
        the sampler is exhausted, `finished()` at the epoch's end; each may raise. A
        partitioned cluster cache fetches other nodes' samples ahead of need from them
        (docs/cluster_cache.md). `stats()` is the epoch's EpochStats."""
        return None

    def close_shared(self) -> None:
        pass


@dataclass
class ProducerContext:
    """What a pipeline needs to make the producer of one iterator or worker."""

    dataset: Any
    is_iterable: bool
    auto_collation: bool
    collate_fn: Any
    drop_last: bool
    writer: SlotWriter | None   # the process's slots (None: collate only)
    resources: ProcessResources  # what the process keeps open for its producers (backends)
    on_error: str = "raise"     # the loader's: "skip" drops bad samples (bad_samples.py)
    # a worker's: call it now and then while making a batch, so that the next batch's
    # indices reach a source that fetches ahead early (loader/_worker.py); else nothing
    look_ahead: Callable[[], None] = field(default=lambda: None, repr=False)

    def plain_fetcher(self):
        """torch's fetch semantics over the dataset (uncollated samples), with the loader's
        error contract for bad samples (bad_samples.py)."""
        from .fetch import create_fetcher
        return create_fetcher(self.is_iterable, self.dataset, self.auto_collation,
                              self.drop_last, self.on_error == "skip")


def make_producer(context: ProducerContext, pipeline=None):
    """The producer for one iterator or worker: the loader's pipeline's (see
    tasks.py), else torch's fetch-then-collate semantics, with slots when
    possible."""
    producer = pipeline.make_producer(context) if pipeline is not None else None
    if producer is None:
        producer = BatchProducer(context.plain_fetcher(), context.collate_fn,
                                 context.auto_collation, context.writer)
    return producer


def deliver(produced: Produced, pool, stats, pin_device: str | None, publish=None):
    """What the user gets for a produced batch: views lent from its slot, or the collated
    data (pinned by copy when pinning is on); the batch is counted in `stats`.
    `publish(produced, pool, batch)`, if given, hands it on to the jobs of a coordinated-
    prep group (_coordinated.py)."""
    start = time.perf_counter()
    shared = isinstance(produced.data, SlotBatch)
    stats.add_batch(produced, shared)
    try:
        batch = _handed_over(produced.data, shared, pool, pin_device)
        if publish is not None:
            publish(produced, pool, batch)
        return batch
    finally:
        stats.deliver_s += time.perf_counter() - start


def _handed_over(data, shared: bool, pool, pin_device: str | None):
    if shared:
        return pool.lend(data)
    if isinstance(data, ArenaBatch):
        data = pool.arena.lend(data)
    if pin_device is not None:
        from ._pin import pin_collated
        return pin_collated(data, pin_device)
    return data
