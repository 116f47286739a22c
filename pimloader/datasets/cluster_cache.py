"""CoorDL's partitioned cache across the nodes of one distributed job (cache_scope="cluster").

The dataset's samples are assigned to nodes by their stable keys (`owner_of`: a hash of
`Source.key(i)` modulo the node count, the same in every process, epoch and run). Each node
keeps one `ClusterCache`: the MinIO cache of `cache.py` (budget `cache_bytes`, filled by the
first reads, never evicted), holding only samples of its own part, in two shared segments
that every local rank of the node and their workers map. A rank's main process fetches
the samples of its coming batches that other nodes own from them, over torch.distributed
(`cluster_exchange.py`, over `cluster_link.py`), into its `Staging` segment
(`cluster_staging.py`), from which its workers read them;
a sample no node holds yet is read from storage by its owner, which caches it.

    reader = ClusterReader(source, ClusterCache(budget, source, scope))  # per loader
    reader.read(i)   # own part: the node cache, else storage (and cached); else staging

docs/cluster_cache.md argues the design (partition, staging, failure).
"""
from __future__ import annotations

import hashlib

import numpy as np

from pimloader.options import ClusterScope

from .cache import CachedReader, SampleCache, _shm_free_bytes
from .cluster_exchange import EpochExchange
from .cluster_link import ClusterLink
from .cluster_staging import Staging
from .source import EncodedSample, Source

def owner_of(key: bytes, nodes: int) -> int:
    """The node that caches the sample whose stable key is `key` (blake2b, not hash():
    the same in every process and run)."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % nodes


def owners_of(source: Source, nodes: int) -> np.ndarray:
    """The owning node of every sample of `source`."""
    return np.array([owner_of(source.key(i), nodes) for i in range(len(source))],
                    dtype=np.int32)


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

    def prefetch(self, indices) -> None:
        """Prefetch the samples of this node's part (the others come from the staging)."""
        node, owners = self.cache.scope.node, self.cache.owners
        super().prefetch([index for index in indices if owners[index] == node])

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
