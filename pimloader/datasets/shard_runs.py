"""A batch's member reads coalesced into runs, fetched ahead and held for the reads.

    runs = member_runs([(offset, size), ...])   # [(start, end)]: members a few KB apart
    held = HeldRuns()
    held.hold(url, start, end, data)            # or an HttpShardError, raised on its reads
    held.take(url, offset, size)                # the bytes, None when no run holds them

A sample's members and the samples that follow it in a shard lie a tar header or two apart:
reading them as one run, over one bounded Range request read to its end (its connection
kept alive for the next), costs one request where per-member reads cost one each, and no
stream reads another process's members to skip them. A run that came back short (a shard
cut after it was indexed) gives its reads what it has, as a read past the end would; a run
whose request failed raises its error, once per read, as that read's own request would
have. The runs are held until `clear` (the reader clears them at each prefetch): a chunk's
worth of bytes at most.
"""
from __future__ import annotations

import bisect

from .http import HttpShardError

RUN_GAP = 16 << 10      # members at most this far apart are read as one run
RUN_BYTES = 64 << 20    # at most this much is fetched ahead at once


def member_runs(spans) -> list:
    """(start, end) of the runs covering the (offset, size) spans, in order."""
    runs: list = []
    for offset, size in sorted(spans):
        if runs and offset - runs[-1][1] <= RUN_GAP:
            runs[-1][1] = max(runs[-1][1], offset + size)
        else:
            runs.append([offset, offset + size])
    return [tuple(run) for run in runs]


class HeldRuns:
    """Runs' bytes (or the error that their request ended with), per URL, by start."""

    def __init__(self) -> None:
        self.starts: dict = {}   # url -> sorted run starts
        self.runs: dict = {}     # url -> [(start, end, bytes or HttpShardError)]

    def hold(self, url: str, start: int, end: int, data) -> None:
        starts, runs = self.starts.setdefault(url, []), self.runs.setdefault(url, [])
        place = bisect.bisect(starts, start)
        starts.insert(place, start)
        runs.insert(place, (start, end, data))

    def take(self, url: str, offset: int, size: int):
        """The bytes at `offset` (fewer where the run came back short); None when no run
        covers them."""
        starts = self.starts.get(url)
        if not starts:
            return None
        place = bisect.bisect(starts, offset) - 1
        if place < 0:
            return None
        start, end, data = self.runs[url][place]
        if offset + size > end:
            return None
        if isinstance(data, HttpShardError):
            raise HttpShardError(str(data), data.url, data.status, data.attempts)
        return data[offset - start:offset - start + size]

    def clear(self) -> None:
        self.starts.clear()
        self.runs.clear()
