"""A CoorDL-style (MinIO) cache of encoded samples in shared memory.

One segment per loader, with a fixed byte budget: the samples' encoded bytes, a per-index
table (offset, length) and a fill pointer. Whichever process reads a sample first copies
its bytes in, if they fit in what is left; nothing is ever evicted (CoorDL's MinIO policy:
under random access an LRU page cache thrashes, while a cache that keeps what it took
first hits on budget / dataset size of the samples every later epoch).

The segment is torch shared-memory storage, which torch's multiprocessing reductions pass
to spawned workers by file descriptor (forked workers inherit it); its /dev/shm name is
unlinked at once, so nothing outlives the processes that map it. There is no lock: the
table is updated by single atomic operations (csrc/sample_cache.c): an entry is claimed
and its space reserved, the bytes are written, and only then is its length published, so
a reader never sees a half-written sample, and a process killed at any point leaves
nothing held that another process would wait for (only that one entry is lost: never
cached, its reserved bytes unused).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from pimloader._sample_cache import ffi, lib
from pimloader.decode.jpeg import is_jpeg
from pimloader.decode.seekable import seek_info, seekable_version

from .source import EncodedSample, Source, prefetch


class SampleCache:
    """The shared segment: `budget` bytes for `size` samples. Picklable to the workers being
    started (fork or spawn), which then map the same segment."""

    def __init__(self, budget: int, size: int) -> None:
        self.budget = budget  # checked as the loader's cache_bytes (pimloader.options)
        self.size = size
        self._data = self._table = self._fill = None

    @property
    def is_open(self) -> bool:
        return self._data is not None

    def open(self, shared: bool = True) -> None:
        """Allocate the segment (in the main process, before workers start), if not yet;
        `shared=False`: in this process's own memory, for a loader without workers."""
        if self._data is not None:
            return
        if not shared:
            self._data = torch.UntypedStorage(max(self.budget, 1))
            self._table = torch.full((self.size, 2), lib.PIM_CACHE_FREE, dtype=torch.int64)
            self._fill = torch.zeros(1, dtype=torch.int64)
            return
        free = _shm_free_bytes()
        if free is not None and self.budget > free:
            # torch's shared allocator fallocates the whole segment: say why it cannot,
            # rather than let it fail
            raise ValueError(f"cache_bytes={self.budget} is more than /dev/shm has free "
                             f"({free} bytes): give a smaller budget or a larger /dev/shm")
        self._data = torch.UntypedStorage._new_shared(max(self.budget, 1))
        self._table = torch.full((self.size, 2), lib.PIM_CACHE_FREE,
                                 dtype=torch.int64).share_memory_()
        self._fill = torch.zeros(1, dtype=torch.int64).share_memory_()

    def close(self) -> None:
        """Drop this process's mapping (the memory goes once every process dropped it)."""
        self._data = self._table = self._fill = None
        self.__dict__.pop("_mapped", None)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_mapped", None)
        return state

    def _views(self):
        """(data as uint8 numpy, the table's entries, the fill pointer) in this process."""
        views = self.__dict__.get("_mapped")
        if views is None:
            if self._data is None:
                raise RuntimeError("the sample cache is closed (the loader was closed while "
                                   "a worker still read from it)")
            data = torch.tensor([], dtype=torch.uint8).set_(self._data).numpy()
            table, fill = self._table.numpy(), self._fill.numpy()
            views = self.__dict__["_mapped"] = (
                data, ffi.from_buffer("pim_cache_entry[]", table),
                ffi.from_buffer("int64_t[]", fill), table, fill)  # the arrays keep them alive
        return views[:3]

    def get(self, index: int) -> bytes | None:
        data, entries, _ = self._views()
        offset = ffi.new("int64_t *")
        length = lib.pim_cache_lookup(self._entry(entries, index), offset)
        if length < 0:
            return None
        return data[offset[0]:offset[0] + length].tobytes()

    def has(self, index: int) -> bool:
        data, entries, _ = self._views()
        return lib.pim_cache_lookup(self._entry(entries, index), ffi.new("int64_t *")) >= 0

    def put(self, index: int, value: bytes) -> bool:
        """Copy `value` in, if it fits in what is left and no one cached it yet."""
        data, entries, fill = self._views()
        length = len(value)
        entry = self._entry(entries, index)
        offset = lib.pim_cache_claim(entry, fill, length, self.budget)
        if offset < 0:
            return False
        self._write(data, offset, value)
        lib.pim_cache_publish(entry, length)
        return True

    def _entry(self, entries, index: int):
        """A pointer to `index`'s entry; an index out of range is an IndexError and a
        negative one counts from the end, as for a list."""
        return entries + range(self.size)[index]

    @staticmethod
    def _write(data: np.ndarray, offset: int, value: bytes) -> None:
        data[offset:offset + len(value)] = np.frombuffer(value, dtype=np.uint8)

    def cached(self) -> dict[int, int]:
        """{index: length} of the samples in the cache (for tests and reports)."""
        _, entries, _ = self._views()
        offset = ffi.new("int64_t *")
        lengths = (lib.pim_cache_lookup(entries + index, offset) for index in range(self.size))
        return {index: length for index, length in enumerate(lengths) if length >= 0}

    def filled_bytes(self) -> int:
        _, _, fill = self._views()
        return int(lib.pim_cache_filled(fill))

    def has_room(self, length: int) -> bool:
        """Whether `length` more bytes fit in what is left (a put may still find less, when
        another process fills the cache meanwhile)."""
        return self.filled_bytes() + length <= self.budget


def _shm_free_bytes() -> int | None:
    try:
        info = os.statvfs("/dev/shm")
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


class CachedReader(Source):
    """A source read through a SampleCache: a sample's bytes come from the cache when they
    are there, and go into it when they fit; everything else is the wrapped source's
    (`reader`: its fields, transform, metadata, keys). Counts hits and misses (and their
    bytes) in this process until `take_counts()`.

    With `seekable`, a JPEG goes into the cache as its seekable copy (restart markers added
    losslessly: decode.seekable), which the read that took it decodes too: the same
    pixels, and every later crop is decoded from the restart intervals around it. A JPEG
    is transcoded only when the cache has room for it; one that is seekable already, or
    that libjpeg cannot read whole, goes in as it is (the decode of the latter then fails
    as the original's would)."""

    # the cost of a copy: half that of one fitted to the file, about 3% larger
    OPTIMIZE_SEEKABLE = False

    def __init__(self, reader, cache: SampleCache, seekable: bool = False) -> None:
        self.reader = reader
        self.cache = cache
        self.seekable = seekable
        # hits, misses, hit bytes, miss bytes, seekable copies made
        self._counts = [0, 0, 0, 0, 0]

    @property
    def fields(self) -> frozenset:
        return getattr(self.reader, "fields", frozenset())

    @property
    def transform(self):
        return getattr(self.reader, "transform", None)

    def __len__(self) -> int:
        return len(self.reader)

    def metadata(self, index: int) -> tuple:
        return self.reader.metadata(index)

    def key(self, index: int) -> bytes:
        return self.reader.key(index)

    @property
    def prefetches(self) -> bool:
        return getattr(self.reader, "prefetches", False)

    def prefetch(self, indices) -> None:
        """The wrapped source's prefetch of the samples the cache does not hold."""
        prefetch(self.reader, [index for index in indices if not self.cache.has(index)])

    def read(self, index: int) -> EncodedSample:
        data = self.cache.get(index)
        if data is not None:
            target, name = self.reader.metadata(index)
            self._counts[0] += 1
            self._counts[2] += len(data)
            return EncodedSample(data, target, name)
        sample = self.reader(index)
        self._counts[1] += 1
        self._counts[3] += len(sample.data)
        sample = self._kept(sample)
        self.cache.put(index, sample.data)
        return sample

    def _kept(self, sample: EncodedSample) -> EncodedSample:
        """The sample as the cache keeps it: its seekable copy (when `seekable`, a JPEG
        libjpeg reads whole and cannot seek in yet, and room for it), else the sample."""
        data = sample.data
        if (not self.seekable or not is_jpeg(data) or seek_info(data) is not None
                or not self.cache.has_room(len(data))):
            return sample
        kind, data = seekable_version(data, name=sample.name, optimize=self.OPTIMIZE_SEEKABLE)
        if kind != "transcoded":
            return sample
        self._counts[4] += 1
        return EncodedSample(data, sample.target, sample.name)

    def take_counts(self) -> tuple[int, int, int, int, int]:
        counts, self._counts = tuple(self._counts), [0, 0, 0, 0, 0]
        return counts
