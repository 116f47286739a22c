"""A rank's staging: the samples its main process fetched from other nodes, until its
workers have read them (cache_scope="cluster", docs/cluster_cache.md).

A table of (offset, length) per dataset index and `capacity` bytes that the rank's exchange
(`cluster_exchange.py`, the only writer) fills as a ring, publishing each entry as the node
cache does (csrc/sample_cache.c: bytes, then the length with a release store); a failure
note and the exchange's heartbeat, which a reader checks while it waits, so that no worker
waits for an exchange that failed or is gone.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from pimloader._sample_cache import ffi, lib
from pimloader.errors import ClusterCacheError

UNSERVED = -3          # a staging entry whose owner could not read it: read it yourself
POLL_S = 0.0002        # how soon a worker looks again at a staging entry not yet there
MAX_POLL_S = 0.005     # (doubling up to this)
NOTE_BYTES = 2048      # the failure flag, the heartbeat, the failure's text


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
