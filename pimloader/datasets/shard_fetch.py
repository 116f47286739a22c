"""Runs of shard members fetched ahead by a thread of their own, while the reader computes.

    runs = RunFetcher(policy)
    runs.ask([(url, offset, size), ...])     # returns at once: their runs queued, in order
    runs.take(url, offset, size)             # the bytes, once their run is fetched; None
                                             # when no run was asked for them
    runs.close()

The reader's thread asks for the members it will read (a batch, then the next) and reads
them; one fetch thread per fetcher, started when there is something to fetch, fetches the
queued runs in the order they were asked for, over an HttpClient of its own (never a
connection of the reader's thread): one connection at a time, as a remote store gives each
connection its bandwidth, and the next batch's runs after this batch's. A small next run
(a member or a few, as random access makes them) goes with the other small queued runs of
its shard (up to MAX_PARTS) in one GET of their ranges (http_ranges.py: a request each
costs CPU and, from a remote store, a round trip each); what that GET does not bring is
fetched run by run, and a server that does not answer several ranges in parts is asked
for one run at a time from then on. A read of a run still queued or in flight waits for it
(a Condition); a run whose request failed makes each read it covers raise that error, as
the read's own request would have. Which runs are held, and for how long, is
shard_runs.py's HeldRuns.

The thread ends after IDLE_S with nothing to fetch (closing its connection), so a dropped
dataset leaves no thread behind. `close()` stops it: the fetch in flight is abandoned (its
sockets shut down, no new request made) and the thread joined for at most JOIN_S. In a
process that inherited the fetcher (fork), the thread, its lock and its connections are the
parent's: close() leaves them alone, and the process makes a reader of its own (shards.py).
"""
from __future__ import annotations

import bisect
import os
import socket
import threading
import time
from collections import deque

from .http import HttpClient, HttpShardError, HttpStream, RetryPolicy
from .http_ranges import read_ranges
from .shard_members import is_http
from .shard_runs import HeldRuns, Run

IDLE_S = 2.0    # a fetch thread with nothing to fetch for this long ends
JOIN_S = 2.0    # close() waits this long for the fetch thread to end
MAX_PARTS = 16  # runs of one shard asked for in one GET (http_ranges.py)
PART_BYTES = 256 << 10   # runs larger than this (whole stretches of a shard) pay for their
                         # request already: each is asked for alone, in its turn
# Asked for with nothing queued or held, the members are what the reader waits for now (an
# epoch's first batch). It reads them in chunks of growing size (the image producer: 8, 16,
# 32: pipelines/classification.py) and decodes each chunk once it is read: the members of
# places 0-7, 8-23, 24-55 and after are then fetched as runs of their own tier, in that
# order, so that each chunk's bytes come while the one before decodes, instead of runs that
# hold members of every chunk (the first decode waited for most of the batch).
COLD_TIERS = (8, 24, 56)


class _StoppableClient(HttpClient):
    """A fetch thread's client, which another thread can stop: no request is made after,
    and the one in flight fails at once (its connections' sockets shut down)."""

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(policy)
        self.stopped = False
        self.connections: list = []   # the connections it opened that are still open

    def request(self, method: str, url: str, headers: dict):
        if self.stopped:
            raise HttpShardError(f"{method} {url}: the shard reader was closed", url)
        return super().request(method, url, headers)

    def stop(self) -> None:
        self.stopped = True
        for connection in self.connections[:]:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _connect(self, parts):
        connection = super()._connect(parts)
        self.connections = [*(c for c in self.connections if c.sock is not None), connection]
        return connection


class _FetchThread:
    """What one fetch thread owns: its client, and the stream of the run in flight."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.client = _StoppableClient(policy)
        self.stream: HttpStream | None = None
        self.thread: threading.Thread | None = None


class RunFetcher:
    """The runs one reader asked for: queued, fetched by a thread of their own, held."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.pid = os.getpid()
        self.changed = threading.Condition()   # a run queued or fetched, or the thread gone
        self.held = HeldRuns()
        self.queue: deque = deque()              # runs to fetch, in the order asked
        self.fetching: _FetchThread | None = None
        self.unranged: set = set()               # URLs whose server ignores Range
        self.unparted: set = set()               # URLs whose server answers no ranges in parts

    def ask(self, members) -> None:
        """Queue runs over the members [(url, offset, size)] of HTTP shards, listed in the
        order they are to be read, that no held or queued run covers (within RUN_BYTES: the
        rest are read as they come). The runs go in the order of their first member read:
        a batch's first sample comes first, not the lowest offset of its first shard."""
        wanted: dict = {}    # url -> {(offset, size): its first place in `members`}
        for place, (url, offset, size) in enumerate(members):
            wanted.setdefault(url, {}).setdefault((offset, size), place)
        with self.changed:
            cold = not self.queue and not self.held.bytes   # see COLD_TIERS
            fresh = []   # (the place of its first member, run)
            for url, places in wanted.items():
                # (a server that ignores Range would send each run from byte 0)
                if is_http(url) and url not in self.unranged:
                    tiers = _tiers(places) if cold else None
                    fresh += [(min(places[member] for member in run.wanted), run)
                              for run in self.held.plan(url, places, tiers)]
            for _, run in sorted(fresh, key=lambda first: first[0]):
                if self.held.add(run):
                    self.queue.append(run)
            if self.queue and self.fetching is None:
                self._start()
            self.changed.notify_all()

    def take(self, url: str, offset: int, size: int):
        """The bytes at `offset` (fewer where the run came back short) once their run is
        fetched, or its request's error; None when no run asked for covers them."""
        with self.changed:
            run = self.held.find(url, offset, size)
            if run is None:
                return None
            while not run.done:
                self.changed.wait()
            self.held.take(run, offset, size)
        return run.bytes_at(offset, size)

    def close(self) -> None:
        """Stop the fetch thread and forget the runs (a later ask starts a new thread)."""
        if os.getpid() != self.pid:
            return   # inherited over fork: the parent's thread, lock and connections
        with self.changed:
            fetching, self.fetching = self.fetching, None
            self._fail_queued(HttpShardError("the shard reader was closed"))
            self.held.clear()
            if fetching is not None:
                fetching.client.stop()
            self.changed.notify_all()
        if fetching is not None and fetching.thread is not threading.current_thread():
            fetching.thread.join(JOIN_S)

    def _start(self) -> None:
        fetching = _FetchThread(self.policy)
        fetching.thread = threading.Thread(target=self._fetch_all, args=(fetching,),
                                           name="pimloader-shard-fetch", daemon=True)
        self.fetching = fetching
        try:
            fetching.thread.start()
        except RuntimeError:   # no thread to be had: the runs are read as they come
            self.fetching = None
            for run in self.queue:
                self.held.drop(run)
            self.queue.clear()

    def _fetch_all(self, fetching: _FetchThread) -> None:
        try:
            while (runs := self._next_runs(fetching)) is not None:
                if len(runs) > 1:
                    runs = self._fetch_parts(fetching, runs)
                for run in runs:
                    self._fetch_one(fetching, run)
        finally:
            fetching.client.close()
            with self.changed:
                if self.fetching is fetching:   # ended by an error of its own: the queued
                    self.fetching = None        # runs' members are read as they come
                    for run in self.queue:
                        self.held.drop(run)
                    self._fail_queued(HttpShardError("the shard fetch thread ended"))
                self.changed.notify_all()

    def _fetch_one(self, fetching: _FetchThread, run: Run) -> None:
        """Fetch `run` over a stream of its own (a stopped client fails it at once)."""
        with self.changed:
            fetching.stream = HttpStream(fetching.client, run.url, run.start, run.end)
        data = _fetched(fetching.stream, run)
        with self.changed:
            if fetching.stream.ranges_ignored:
                self.unranged.add(run.url)
            fetching.stream = None
            self._done(run, data)

    def _fetch_parts(self, fetching: _FetchThread, runs: list) -> list:
        """Fetch the runs of one shard with one GET of their ranges; the runs it did not
        bring, to fetch one by one (with their retries and errors)."""
        def deliver(i: int, data: bytes) -> None:
            with self.changed:
                self._done(runs[i], data)

        try:
            left, parted = read_ranges(fetching.client, runs[0].url,
                                       [(run.start, run.end) for run in runs], deliver)
        except Exception:   # never leave a read waiting: what is not done is fetched alone
            return [run for run in runs if not run.done]
        if not parted:
            with self.changed:
                self.unparted.add(runs[0].url)
        return [runs[i] for i in left]

    def _done(self, run: Run, data) -> None:
        run.data, run.done = data, True
        self.changed.notify_all()

    def _next_runs(self, fetching: _FetchThread) -> list | None:
        """The next run to fetch and, when it is small, up to MAX_PARTS - 1 more small queued
        runs of its shard and tier, to be asked for together; None when the thread is to
        end (stopped, or idle for IDLE_S)."""
        with self.changed:
            idle_until = time.monotonic() + IDLE_S
            while not self.queue and self.fetching is fetching:
                left = idle_until - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            if self.fetching is not fetching or not self.queue:
                if self.fetching is fetching:
                    self.fetching = None
                return None
            run = self.queue.popleft()
            if run.url in self.unparted or run.size > PART_BYTES:
                return [run]
            more = [queued for queued in self.queue if queued.url == run.url
                    and queued.tier == run.tier and queued.size <= PART_BYTES][:MAX_PARTS - 1]
            for queued in more:
                self.queue.remove(queued)
            return [run, *more]

    def _fail_queued(self, error: HttpShardError) -> None:
        for run in self.queue:
            run.data, run.done = error, True
        self.queue.clear()


def _fetched(stream: HttpStream, run: Run):
    """The run's bytes (fewer if the shard ends first), or the error its request ended with."""
    try:
        return stream.read(run.size)
    except HttpShardError as error:
        return error
    except Exception as error:   # never leave a read waiting for a run
        return HttpShardError(f"GET {run.url}: {type(error).__name__}: {error}", run.url)
    finally:
        stream.abandon() if stream.client.stopped else stream.close()


def _tiers(places: dict) -> dict:
    """{member: its COLD_TIERS tier} of members by their place in the reading order."""
    return {member: bisect.bisect_right(COLD_TIERS, place) for member, place in places.items()}
