"""CoorDL's partitioned cache across the nodes of one distributed job (cache_scope="cluster").

The dataset's samples are assigned to nodes by their stable keys (`owner_of`: a hash of
`Source.key(i)` modulo the node count, the same in every process, epoch and run). Each node
keeps one `ClusterCache`: the MinIO cache of `cache.py` (budget `cache_bytes`, filled by the
first reads, never evicted), holding only samples of its own part, in two shared segments
that every local rank of the node and their workers map. A rank's main process fetches
the samples of its coming batches that other nodes own from them, over torch.distributed
(`cluster_exchange.py`), into its `Staging` segment, from which its workers read them;
a sample no node holds yet is read from storage by its owner, which caches it.

    reader = ClusterReader(source, ClusterCache(budget, source, scope))  # per loader
    reader.read(i)   # own part: the node cache, else storage (and cached); else staging

docs/cluster_cache.md argues the design (partition, staging, failure).
"""
from __future__ import annotations

import hashlib
import time

import numpy as np
import torch

from pimloader._sample_cache import ffi, lib
from pimloader.errors import ClusterCacheError
from pimloader.options import ClusterScope

from .cache import CachedReader, SampleCache, _shm_free_bytes
from .cluster_exchange import EpochExchange
from .cluster_link import ClusterLink
from .source import EncodedSample, Source

UNSERVED = -3          # a staging entry whose owner could not read it: read it yourself
POLL_S = 0.0002        # how soon a worker looks again at a staging entry not yet there
MAX_POLL_S = 0.005     # (doubling up to this)
NOTE_BYTES = 2048      # the failure flag, the heartbeat, the failure's text


def owner_of(key: bytes, nodes: int) -> int:
    """The node that caches the sample whose stable key is `key` (blake2b, not hash():
    the same in every process and run)."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % nodes


def owners_of(source: Source, nodes: int) -> np.ndarray:
    """The owning node of every sample of `source`."""
    return np.array([owner_of(source.key(i), nodes) for i in range(len(source))],
                    dtype=np.int32)


class Staging:
    """One rank's shared buffer of samples fetched from other nodes: a table of (offset,
    length) per dataset index, `capacity` bytes written as a ring by the rank's exchange
    (the only writer), a failure note and the exchange's heartbeat, which its readers check
    while they wait (so that none waits for an exchange that is gone). Picklable to the
    rank's workers, like SampleCache's segment (torch shared memory, passed by fd)."""

    def __init__(self, size: int, capacity: int) -> None:
        self.size, self.capacity = size, capacity
        self._data = self._table = self._note = None

    def open(self) -> None:
        if self._data is not None:
            return
        self._data = torch.UntypedStorage._new_shared(self.capacity)
        self._table = torch.full((self.size, 2), lib.PIM_CACHE_FREE,
                                 dtype=torch.int64).share_memory_()
        self._note = torch.zeros(NOTE_BYTES, dtype=torch.uint8).share_memory_()

    def close(self) -> None:
        self._data = self._table = self._note = None
        self.__dict__.pop("_mapped", None)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_mapped", None)
        return state

    def _views(self):
        views = self.__dict__.get("_mapped")
        if views is None:
            if self._data is None:
                raise RuntimeError("the cluster cache's staging is closed")
            data = torch.tensor([], dtype=torch.uint8).set_(self._data).numpy()
            table = self._table.numpy()
            views = self.__dict__["_mapped"] = (
                data, table, ffi.from_buffer("pim_cache_entry[]", table), self._note.numpy())
        return views

    # the exchange's side (the rank's main process)
    def place(self, index: int, offset: int, value) -> None:
        """Stage `value` (bytes-like) for `index` at `offset` of the ring."""
        data, table, entries, _ = self._views()
        data[offset:offset + len(value)] = np.frombuffer(value, dtype=np.uint8)
        table[index, 0] = offset
        lib.pim_cache_publish(entries + index, len(value))  # release: bytes, then length

    def unserved(self, index: int) -> None:
        _, _, entries, _ = self._views()
        lib.pim_cache_publish(entries + index, UNSERVED)

    def forget(self, index: int) -> None:
        """Free `index`'s entry (its batch was delivered: no reader is left)."""
        _, table, _, _ = self._views()
        table[index, 1] = lib.PIM_CACHE_FREE

    def forget_all(self) -> None:
        _, table, _, _ = self._views()
        table[:, 1] = lib.PIM_CACHE_FREE

    def fail(self, message: str) -> None:
        """Make every reader waiting on this staging raise ClusterCacheError(message)."""
        _, _, _, note = self._views()
        text = message.encode()[:NOTE_BYTES - 17]
        note[16:16 + len(text)] = np.frombuffer(text, dtype=np.uint8)
        note[0] = 1

    def failure(self) -> str | None:
        _, _, _, note = self._views()
        if not note[0]:
            return None
        return bytes(note[16:]).rstrip(b"\0").decode(errors="replace")

    def beat(self) -> None:
        """The exchange is alive (its readers wait as long as it says so)."""
        _, _, _, note = self._views()
        note[8:16] = np.frombuffer(time.monotonic_ns().to_bytes(8, "little"), dtype=np.uint8)

    def _silent_s(self) -> float:
        _, _, _, note = self._views()
        return (time.monotonic_ns() - int.from_bytes(bytes(note[8:16]), "little")) / 1e9

    # a reader's side (a worker, or the main process with num_workers=0)
    def take(self, index: int, name: str, timeout_s: float) -> bytes | None:
        """The staged bytes of `index` (None: its owner could not read it), waiting for them
        while the exchange beats at least every `timeout_s`; a failure of the exchange is
        a ClusterCacheError at once."""
        data, _, entries, _ = self._views()
        offset = ffi.new("int64_t *")
        pause = POLL_S
        while True:
            length = lib.pim_cache_lookup(entries + index, offset)
            if length >= 0:
                return data[offset[0]:offset[0] + length].tobytes()
            if length == UNSERVED:
                return None
            failure = self.failure()
            if failure is not None:
                raise ClusterCacheError(f"while waiting for {name}: {failure}")
            if self._silent_s() > timeout_s:
                raise ClusterCacheError(
                    f"{name} (sample {index}), which another node caches, was not fetched: "
                    f"this rank's exchange has been silent for {timeout_s} s (stuck or gone)")
            time.sleep(pause)
            pause = min(2 * pause, MAX_POLL_S)


class ClusterCache(SampleCache):
    """This node's part of the cluster cache (SampleCache's get/put, over segments every
    local rank maps), this rank's staging, and, in the main process only, its link to the
    other ranks and the exchange of the current epoch."""

    def __init__(self, budget: int, source: Source, scope: ClusterScope) -> None:
        super().__init__(budget, len(source))
        self.scope = scope
        self.source = source
        self.owners = owners_of(source, scope.nodes)
        self.staging = Staging(len(source), scope.staging_bytes)
        self._link = self._exchange = None
        self._epochs = 0

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_link"] = state["_exchange"] = None  # the main process's alone
        return state

    def open(self) -> None:
        """Join the cluster (collective: every rank's first iter() of this loader), map
        this node's segments, allocate the staging."""
        if self._data is not None:
            return
        free = _shm_free_bytes()
        if free is not None and self.budget + self.scope.staging_bytes > free:
            raise ValueError(f"cache_bytes={self.budget} and staging_bytes="
                             f"{self.scope.staging_bytes} are more than /dev/shm has free "
                             f"({free} bytes): give smaller ones or a larger /dev/shm")
        link = ClusterLink(self.scope)
        try:
            self._check_partition(link)
            self._data, self._table, self._fill = link.node_segments(self.budget, self.size)
            self.staging.open()
        except BaseException:
            link.close()
            raise
        self._link = link
        self._epochs = 0

    def _check_partition(self, link: ClusterLink) -> None:
        """Every rank must assign the samples alike (same keys: same dataset, same paths)."""
        digest = hashlib.blake2b(self.owners.tobytes(), digest_size=8).hexdigest()
        digests = link.all_gather(digest)
        differ = [rank for rank, theirs in enumerate(digests) if theirs != digests[0]]
        if differ:
            raise ValueError(
                f"cache_scope='cluster': ranks {differ} assign the dataset's {self.size} samples "
                f"to nodes differently from rank 0: their samples' keys differ (a folder's "
                f"keys are its paths: mount the dataset at the same path on every node)")

    def close(self) -> None:
        exchange, self._exchange = self._exchange, None
        if exchange is not None:
            exchange.close("its loader was closed")
        link, self._link = self._link, None
        if link is not None:
            link.close()
        self.staging.close()
        super().close()

    def epoch_observer(self, stats):
        """A new epoch's exchange (the previous one, if still running, is ended)."""
        if self._exchange is not None:
            self._exchange.finish()   # its peers may still be fetching from this node
            self._exchange.close("it started a new epoch")
        self._epochs += 1
        self._exchange = EpochExchange(self, self._link, stats, self._epochs)
        return self._exchange


class ClusterReader(CachedReader):
    """A source read through the cluster cache: samples of this node's part through its
    node cache (CachedReader: hits, misses and their bytes counted), the others from the
    staging its main process fills (counted there, as the epoch's cluster_received)."""

    def read(self, index: int) -> EncodedSample:
        cache = self.cache
        if cache.owners[index] == cache.scope.node:
            return super().read(index)
        target, name = self.reader.metadata(index)
        data = cache.staging.take(index, name, cache.scope.timeout_s + 1.0)
        if data is None:                 # its owner could not read it: the error is ours
            sample = self.reader(index)
            self._counts[1] += 1
            self._counts[3] += len(sample.data)
            return sample
        return EncodedSample(data, target, name)

    def epoch_observer(self, stats):
        return self.cache.epoch_observer(stats)
