"""One epoch's exchange of a cluster cache: a thread in each rank's main process that
fetches, from the nodes that own them, the samples of the rank's coming batches.

The loader tells it each index batch as it is handed to a worker (`announced`: the
loader's prefetch, prefetch_factor x num_workers batches ahead of the one being consumed),
each batch delivered, in order (`delivered`), the sampler's end (`ended`) and the
epoch's (`finished`: it waits for every rank's end of fetching and raises a failure). The thread
runs rounds, the same on every rank (lockstep collectives on the link's group):

  1. all_gather of each rank's requests ({serving rank: [indices]}) and whether it is done;
     every rank done and nothing asked: the epoch's exchange ends;
  2. each rank serves what it is asked from its node's cache, or reads it from storage
     and offers it to that cache (it is the owner), and says the lengths (all_gather);
  3. all_to_all_single of the bytes; each rank places what it got in its staging ring.

A round with nothing new to ask still runs, every TICK_S: so a rank that is busy training
never lets its peers' collectives time out, and a rank that is gone is noticed within the
link's timeout. A staging region is reused once every batch that reads it has been
delivered (in-order delivery: the loader refuses in_order=False).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from pimloader.errors import ClusterCacheError

TICK_S = 0.01


@dataclass
class _Region:
    start: int
    end: int
    indices: list = field(default_factory=list)


class EpochExchange:
    def __init__(self, cache, link, stats, number: int) -> None:
        self.cache, self.link, self.stats_of = cache, link, stats
        self.number = number   # this loader's epochs on this rank: the same on every rank
        self.epoch_stats = None  # the EpochStats of the epoch, once it starts
        self.node = cache.scope.node
        self.lock = threading.Condition()
        self.announced_count = 0
        self.delivered_count = 0
        self.last_use: dict[int, int] = {}      # staged or asked index -> last batch using it
        self.asking: dict[int, list] = {}       # serving rank -> indices not yet asked
        self.regions: deque[_Region] = deque()
        self.ended_sampling = False
        self.stopping = None                    # why close() stopped it
        self.error: ClusterCacheError | None = None
        self.started = False
        self.thread = threading.Thread(target=self._run, name="pimloader-cluster-exchange",
                                       daemon=True)

    # -- the loader's events (main thread) ------------------------------------------------
    def announced(self, index) -> None:
        self._raise_if_failed()
        indices = index if isinstance(index, (list, tuple)) else [index]
        with self.lock:
            self._start()
            batch = self.announced_count
            self.announced_count += 1
            for i in map(int, indices):
                owner = int(self.cache.owners[i])
                if owner == self.node:
                    continue
                if i not in self.last_use:
                    self.asking.setdefault(self.link.server_for(owner), []).append(i)
                self.last_use[i] = batch
            self.lock.notify_all()

    def delivered(self) -> None:
        with self.lock:
            self.delivered_count += 1
            self.lock.notify_all()

    def ended(self) -> None:
        with self.lock:
            self._start()
            self.ended_sampling = True
            self.lock.notify_all()

    def finished(self) -> None:
        """The epoch's last batch was delivered: wait until every rank has ended the epoch's
        fetching (this rank serves them till then), and raise the exchange's failure."""
        self.finish()
        self._raise_if_failed()

    def finish(self, wait_s: float | None = None) -> bool:
        """This rank asks for nothing more this epoch; its thread goes on serving until
        every rank has said so (waited for up to `wait_s`, None: as long as it takes: a
        peer that is gone fails it within the link's timeout). Whether it has ended."""
        with self.lock:
            self.ended_sampling = True
            self.lock.notify_all()
        if self.started:
            self.thread.join(timeout=wait_s)
        return not self.thread.is_alive()

    def close(self, why: str) -> None:
        """Finish (up to the link's timeout), then stop this rank's part of the exchange:
        peers still in the epoch then fail, naming this rank."""
        if self.finish(self.link.timeout_s):
            return
        with self.lock:
            self.stopping = why
            self.lock.notify_all()
        self.thread.join(timeout=self.link.timeout_s + 1.0)

    def _start(self) -> None:
        if not self.started:      # lazily: a persistent iterator's workers are idle by now
            self.started = True
            self.epoch_stats = self.stats_of()
            self.cache.staging.forget_all()
            self.cache.staging.beat()
            self.thread.start()

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise ClusterCacheError(str(self.error))

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.link.rendezvous(f"epoch {self.number}", self.cache.staging.beat)
            while self._round():
                pass
        except ClusterCacheError as error:
            self._fail(error)
        except Exception as error:  # a bug or a broken link: no reader may wait for ever
            self._fail(ClusterCacheError(f"the cluster cache's exchange failed: {error!r}"))

    def _fail(self, error: ClusterCacheError) -> None:
        self.error = error
        self.cache.staging.fail(str(error))

    def _round(self) -> bool:
        self.cache.staging.beat()
        asking, done = self._take_requests()
        if self.stopping is not None:
            return False
        gathered = self.link.all_gather((done, asking))
        if all(d and not a for d, a in gathered):
            return False
        me = self.link.rank
        asked = [requests.get(me, []) for _, requests in gathered]
        if not any(requests for _, requests in gathered):
            return True
        payload, lengths = self._serve(asked)
        lengths_of = self.link.all_gather(lengths)
        from_each = [lengths_of[server][me] for server in range(self.link.world)]
        received = self.link.exchange(payload, [sum(max(n, 0) for n in ls) for ls in lengths],
                                      [sum(max(n, 0) for n in ls) for ls in from_each])
        self._stage(asking, from_each, received)
        return True

    def _take_requests(self) -> tuple[dict, bool]:
        with self.lock:
            if not self.asking and not self.ended_sampling and self.stopping is None:
                self.lock.wait(TICK_S)
            asking, self.asking = self.asking, {}
            return asking, self.ended_sampling and not asking

    def _serve(self, asked: list) -> tuple[torch.Tensor, list]:
        """The bytes asked of this rank, by requester, and their lengths (-1: unreadable)."""
        stats = self.epoch_stats
        chunks, lengths = [], []
        for indices in asked:
            lengths.append([])
            for index in indices:
                data = self._held_or_read(index, stats)
                lengths[-1].append(-1 if data is None else len(data))
                if data:
                    chunks.append(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                    stats.cluster_served += 1
                    stats.cluster_served_bytes += len(data)
        payload = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
        return payload, lengths

    def _held_or_read(self, index: int, stats) -> bytes | None:
        self.cache.staging.beat()  # a slow store must not look like a dead exchange
        data = self.cache.get(index)
        if data is not None:
            return data
        try:
            data = self.cache.source.read(index).data
        except Exception:
            return None            # its requester reads it, and raises the error naming it
        stats.cluster_storage_reads += 1
        stats.cluster_storage_bytes += len(data)
        self.cache.put(index, data)
        return data

    def _stage(self, asking: dict, from_each: list, received: torch.Tensor) -> None:
        """Place what each server sent (in the order this rank asked) in the staging."""
        staging, stats = self.cache.staging, self.epoch_stats
        region = self._region(received.numel())
        position = 0
        for server, lengths in enumerate(from_each):
            for index, length in zip(asking.get(server, []), lengths):
                if length < 0 or region is None:
                    staging.unserved(index)
                    position += max(length, 0)
                    continue
                chunk = received[position:position + length].numpy()
                staging.place(index, region.start + position, chunk)
                region.indices.append(index)
                position += length
                stats.cluster_received += 1
                stats.cluster_received_bytes += length

    def _region(self, nbytes: int) -> _Region | None:
        """Room for `nbytes` in the staging ring, once the batches reading the oldest
        regions are delivered; None if it can never fit (the samples are then unserved:
        read from storage by the worker)."""
        capacity = self.cache.staging.capacity
        if nbytes == 0 or nbytes > capacity:
            return None
        deadline = time.monotonic() + self.link.timeout_s
        with self.lock:
            while True:
                self._reclaim()
                start = self._free_start(nbytes, capacity)
                if start is not None:
                    region = _Region(start, start + nbytes)
                    self.regions.append(region)
                    return region
                if self.stopping is not None:
                    raise ClusterCacheError(f"stopped: {self.stopping}")
                if time.monotonic() > deadline:
                    raise ClusterCacheError(
                        f"the staging ({capacity} bytes) stayed full for {self.link.timeout_s} "
                        f"s: the batches that read it were not delivered")
                self.cache.staging.beat()
                self.lock.wait(TICK_S)

    def _reclaim(self) -> None:
        while self.regions:
            region = self.regions[0]
            if any(self.last_use.get(i, -1) >= self.delivered_count for i in region.indices):
                return
            for index in region.indices:
                if self.last_use.get(index, -1) < self.delivered_count:
                    self.last_use.pop(index, None)
                    self.cache.staging.forget(index)
            self.regions.popleft()

    def _free_start(self, nbytes: int, capacity: int) -> int | None:
        if not self.regions:
            return 0
        tail, head = self.regions[0].start, self.regions[-1].end
        if head > tail:
            if capacity - head >= nbytes:
                return head
            return 0 if tail >= nbytes else None
        return head if tail - head >= nbytes else None
