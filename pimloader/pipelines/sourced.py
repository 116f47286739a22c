"""The source/task seam: what every task that reads a source's encoded samples shares.

A task that reads encoded samples (classification, detection, audio, a user's) gets its
reader here, once: `reader_for(source, options)` is the source itself, or with `cache_bytes`
a `CachedReader` over it (datasets/cache.py: the encoded-sample cache in shared memory).
Its pipeline subclasses `SourcedPipeline`, which allocates and frees the cache's segment
(`open_shared` / `close_shared`) and makes its producers count the cache's hits and misses
(`counted`), so that no task writes the cache's wiring again.
"""
from __future__ import annotations

from pimloader.datasets.cache import CachedReader, SampleCache
from pimloader.loader.produce import Pipeline, Produced


def reader_for(source, options):
    """How a pipeline reads `source`'s samples: through the encoded-sample cache when the
    loader has `cache_bytes`, else from the source itself."""
    if not options.cache_bytes:
        return source
    return CachedReader(source, SampleCache(options.cache_bytes, len(source)))


class SourcedPipeline(Pipeline):
    """A pipeline whose samples come from a source through `reader_for`'s reader."""

    def source_reader(self):
        """The reader `reader_for` gave this pipeline."""
        raise NotImplementedError

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

    def open_shared(self) -> None:
        """Allocate the sample cache's segment (main process, before workers start)."""
        if self.cache is not None:
            self.cache.open()

    def close_shared(self) -> None:
        """Drop the main process's hold on the sample cache (loader.close())."""
        if self.cache is not None:
            self.cache.close()


class CacheCountingProducer:
    """A producer whose batches carry the sample cache's hits and misses since the last."""

    def __init__(self, producer, reader: CachedReader) -> None:
        self.producer = producer
        self.reader = reader

    @property
    def current(self) -> str:
        return self.producer.current

    def produce(self, index) -> Produced:
        produced = self.producer.produce(index)
        (produced.cache_hits, produced.cache_misses, produced.cache_hit_bytes,
         produced.cache_miss_bytes) = self.reader.take_counts()
        return produced
