"""Reading members' bytes out of shards, in the process that reads them.

    reader = ShardReader(policy)            # made lazily in each process and thread, never pickled
    reader.prefetch([(url, offset, size), ...])     # returns at once: fetched ahead, in runs
    reader.read(url, offset, size)          # the bytes; fewer only if the shard is cut short
    reader.close()

Local shards: `os.pread` on a file descriptor kept open per shard (a few at a time).
HTTP shards: the reader keeps a few streaming GETs open, one per shard; a read at or a little
after where a shard's stream stands continues it (consecutive samples of a shard cost no new
request), a read elsewhere in a shard that was just read forward opens a new stream from
there, and a lone read is one bounded Range request over a kept-alive connection.
`prefetch` queues the members a batch is about to read (then the next batch's) as runs of
adjacent members (shard_runs.py), which a thread of the reader's own fetches in that order,
a shard's queued runs in one GET of their ranges, while this thread computes
(shard_fetch.py); a read those runs cover waits for its run if need be, and opens no
stream.
"""
from __future__ import annotations

import os
from collections import OrderedDict

from .http import HttpClient, HttpStream, RetryPolicy
from .shard_fetch import RunFetcher
from .shard_members import is_http, local_path

OPEN_FILES = 8
OPEN_STREAMS = 4
FORWARD_SKIP = 4 << 20   # a stream skips up to this many bytes rather than reopen


class ShardReader:
    def __init__(self, policy: RetryPolicy) -> None:
        self.pid = os.getpid()
        self.client = HttpClient(policy)
        self.files: OrderedDict = OrderedDict()     # path -> fd
        self.streams: OrderedDict = OrderedDict()   # url -> HttpStream
        self.last_end: dict = {}                    # url -> where the last read ended
        self.runs = RunFetcher(policy)              # members asked for ahead, in runs

    def read(self, url: str, offset: int, size: int) -> bytes:
        if is_http(url):
            fetched = self.runs.take(url, offset, size)
            return self._read_http(url, offset, size) if fetched is None else fetched
        return os.pread(self._fd(local_path(url)), size, offset)

    def prefetch(self, members) -> None:
        """Fetch the members [(url, offset, size)] of HTTP shards ahead, in runs, in a
        thread of the reader's own (returns at once), the run of the first member listed
        first; members already asked for are not fetched again."""
        self.runs.ask(members)

    def close(self) -> None:
        """Close the files and connections. In a process that inherited the reader (fork),
        only this process's copies of their descriptors: a stream's rest is the parent's
        to read, never drained here."""
        inherited = os.getpid() != self.pid
        self.runs.close()   # (inherited: the parent's fetch thread, left to it)
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()
        for stream in self.streams.values():
            stream.abandon() if inherited else stream.close()
        self.streams.clear()
        self.client.close()

    def __del__(self):   # a dataset dropped without close(): its descriptors still go
        try:
            self.close()
        except OSError:
            pass

    def _fd(self, path: str) -> int:
        fd = self.files.pop(path, None)
        if fd is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            if len(self.files) >= OPEN_FILES:
                os.close(self.files.popitem(last=False)[1])
        self.files[path] = fd   # the most recently used last
        return fd

    def _read_http(self, url: str, offset: int, size: int) -> bytes:
        stream = self.streams.pop(url, None)
        if stream is not None and not stream.position <= offset <= stream.position + FORWARD_SKIP:
            stream.close()
            stream = None
        forward = self.last_end.get(url, offset + 1) <= offset
        if stream is None and not forward:   # a lone read: one bounded request
            bounded = HttpStream(self.client, url, offset, offset + size)
            try:
                return self._note(url, offset, bounded.read(size))
            finally:
                bounded.close()
        if stream is None:
            stream = HttpStream(self.client, url, offset)
        if len(self.streams) >= OPEN_STREAMS:
            self.streams.popitem(last=False)[1].close()
        self.streams[url] = stream
        stream.skip(offset - stream.position)
        return self._note(url, offset, stream.read(size))

    def _note(self, url: str, offset: int, data: bytes) -> bytes:
        self.last_end[url] = offset + len(data)
        return data
