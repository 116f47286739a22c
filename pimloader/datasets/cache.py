"""A CoorDL-style (MinIO) cache of encoded samples in shared memory.

One segment per loader, with a fixed byte budget: the samples' encoded bytes, a per-index
table (offset, length) and a fill pointer. Whichever process reads a sample first copies
its bytes in, if they fit in what is left; nothing is ever evicted (CoorDL's MinIO policy:
under random access an LRU page cache thrashes, while a cache that keeps what it took
first hits on budget / dataset size of the samples every later epoch).

The segment is torch shared-memory storage, which torch's multiprocessing reductions pass
to spawned workers by file descriptor (forked workers inherit it); its /dev/shm name is
unlinked at once, so nothing outlives the processes that map it. A multiprocessing lock
serialises the table: space is reserved under it, the bytes are written outside it, and
the entry is published under it only once they are all written, so a reader never sees a
half-written sample.
"""
from __future__ import annotations

import multiprocessing
import os

import numpy as np
import torch

from .folders import EncodedSample

_FREE, _BEING_WRITTEN = -1, -2   # table lengths that mean "no bytes here (yet)"


class SampleCache:
    """The shared segment: `budget` bytes for `size` samples. Picklable only to processes
    being started (fork or spawn workers), as its lock is."""

    def __init__(self, budget: int, size: int) -> None:
        self.budget = budget  # checked as the loader's cache_bytes (pipelines.select)
        self.size = size
        self._lock = multiprocessing.get_context("spawn").Lock()
        self._data = self._table = self._fill = None

    @property
    def is_open(self) -> bool:
        return self._data is not None

    def open(self) -> None:
        """Allocate the segment (in the main process, before workers start), if not yet."""
        if self._data is not None:
            return
        free = _shm_free_bytes()
        if free is not None and self.budget > free:
            # the segment is sparse: writing past what /dev/shm can hold would kill the
            # writing worker with SIGBUS, epochs later
            raise ValueError(f"cache_bytes={self.budget} is more than /dev/shm has free "
                             f"({free} bytes): give a smaller budget or a larger /dev/shm")
        self._data = torch.UntypedStorage._new_shared(max(self.budget, 1))
        self._table = torch.full((self.size, 2), _FREE, dtype=torch.int64).share_memory_()
        self._fill = torch.zeros(1, dtype=torch.int64).share_memory_()

    def close(self) -> None:
        """Drop this process's mapping (the memory goes once every process dropped it)."""
        self._data = self._table = self._fill = None
        self.__dict__.pop("_views", None)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_views", None)
        return state

    def _arrays(self):
        views = self.__dict__.get("_views")
        if views is None:
            if self._data is None:
                raise RuntimeError("the sample cache is closed (the loader was closed while "
                                   "a worker still read from it)")
            data = torch.tensor([], dtype=torch.uint8).set_(self._data).numpy()
            views = self.__dict__["_views"] = (data, self._table.numpy(), self._fill.numpy())
        return views

    def get(self, index: int) -> bytes | None:
        data, table, _ = self._arrays()
        with self._lock:
            offset, length = table[index]
        if length < 0:
            return None
        return data[offset:offset + length].tobytes()

    def put(self, index: int, value: bytes) -> bool:
        """Copy `value` in, if it fits in what is left and no one cached it yet."""
        data, table, fill = self._arrays()
        length = len(value)
        with self._lock:
            if table[index, 1] != _FREE or fill[0] + length > self.budget:
                return False
            offset = int(fill[0])
            fill[0] += length
            table[index] = (offset, _BEING_WRITTEN)
        data[offset:offset + length] = np.frombuffer(value, dtype=np.uint8)
        with self._lock:
            table[index, 1] = length  # published only now that every byte is written
        return True

    def cached(self) -> dict[int, int]:
        """{index: length} of the samples in the cache (for tests and reports)."""
        _, table, _ = self._arrays()
        with self._lock:
            lengths = table[:, 1].copy()
        return {int(i): int(lengths[i]) for i in np.flatnonzero(lengths >= 0)}

    def filled_bytes(self) -> int:
        _, _, fill = self._arrays()
        return int(fill[0])


def _shm_free_bytes() -> int | None:
    try:
        info = os.statvfs("/dev/shm")
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


class CachedReader:
    """A reader (index -> EncodedSample) whose bytes come from a SampleCache when they are
    there, and go into it when they fit. Counts hits and misses (and their bytes) in this
    process until `take_counts()`."""

    def __init__(self, reader, cache: SampleCache) -> None:
        self.reader = reader
        self.cache = cache
        self._counts = [0, 0, 0, 0]  # hits, misses, hit bytes, miss bytes

    def __call__(self, index: int) -> EncodedSample:
        data = self.cache.get(index)
        if data is not None:
            target, name = self.reader.metadata(index)
            self._counts[0] += 1
            self._counts[2] += len(data)
            return EncodedSample(data, target, name)
        sample = self.reader(index)
        self._counts[1] += 1
        self._counts[3] += len(sample.data)
        self.cache.put(index, sample.data)
        return sample

    def take_counts(self) -> tuple[int, int, int, int]:
        counts, self._counts = tuple(self._counts), [0, 0, 0, 0]
        return counts
