"""Members' reads coalesced into runs, and the runs a reader has asked for, held for the reads.

    runs = member_runs([(offset, size), ...])   # [(start, end)]: members a few KB apart
    held = HeldRuns()
    new = held.plan(url, [(offset, size), ...]) # Runs for the members no run covers yet
    held.add(run)                               # False: over RUN_BYTES even after evictions
    run = held.find(url, offset, size)          # the run covering these bytes, or None
    held.take(run, offset, size)                # the member read: dropped when all are

A sample's members and the samples that follow it in a shard lie a tar header or two apart:
reading them as one run, over one bounded Range request read to its end (its connection
kept alive for the next), costs one request where per-member reads cost one each, and no
stream reads another process's members to skip them. A run that came back short (a shard
cut after it was indexed) gives its reads what it has, as a read past the end would; a run
whose request failed raises its error, once per read, as that read's own request would
have.

A run is held from when it is asked for (queued, then fetched: shard_fetch.py) until each
member it was asked for has been read once; a member asked for again while a run holds it
is not fetched again (unless a read has raised its run's error: then it is fetched again),
and a new run never spans a held one. Held and queued runs stay within RUN_BYTES: the
oldest fetched runs are evicted to make room (their members are then read as they come),
and a run that still does not fit is not fetched ahead. A plan may keep tiers of members
apart (an epoch's first batch: shard_fetch.py's COLD_TIERS).
"""
from __future__ import annotations

import bisect
from collections import OrderedDict

from .http import HttpShardError

RUN_GAP = 16 << 10      # members at most this far apart are read as one run
RUN_BYTES = 64 << 20    # at most this much is held or queued at once


def member_runs(spans) -> list:
    """(start, end) of the runs covering the (offset, size) spans, in order."""
    return [(run.start, run.end) for run in HeldRuns().plan("", spans)]


class Run:
    """Bytes start..end of a shard, the members they were asked for that are still to be
    read, and, once fetched (`done`), the bytes or the error its request ended with."""

    __slots__ = ("url", "start", "end", "wanted", "data", "done", "raised", "tier")

    def __init__(self, url: str, start: int, end: int, wanted, tier=None) -> None:
        self.url, self.start, self.end = url, start, end
        self.wanted = set(wanted)     # (offset, size) of the members not read yet
        self.data = None
        self.done = False
        self.raised = False           # a read has raised its request's error
        self.tier = tier              # its members' tier (HeldRuns.plan), None: untiered

    @property
    def size(self) -> int:
        return self.end - self.start

    def covers(self, offset: int, size: int) -> bool:
        return self.start <= offset and offset + size <= self.end

    def bytes_at(self, offset: int, size: int) -> bytes:
        """The bytes at `offset` (fewer where the run came back short), or its error."""
        data = self.data
        if isinstance(data, HttpShardError):
            self.raised = True
            raise HttpShardError(str(data), data.url, data.status, data.attempts)
        return data[offset - self.start:offset - self.start + size]

    def __repr__(self) -> str:
        state = "fetched" if self.done else "to fetch"
        return f"Run({self.url}, {self.start}..{self.end}, {state}, {len(self.wanted)} to read)"


class HeldRuns:
    """Runs asked for, per URL by start, and oldest first, within `budget` bytes."""

    def __init__(self, budget: int = RUN_BYTES) -> None:
        self.budget = budget
        self.starts: dict = {}           # url -> sorted run starts
        self.runs: dict = {}             # url -> runs, in the order of their starts
        self.age: OrderedDict = OrderedDict()   # run -> None, the oldest first
        self.bytes = 0

    def find(self, url: str, offset: int, size: int):
        """The run that covers bytes offset..offset+size of `url`, or None."""
        place = bisect.bisect(self.starts.get(url, ()), offset) - 1
        if place < 0:
            return None
        run = self.runs[url][place]
        return run if run.covers(offset, size) else None

    def plan(self, url: str, members, tiers=None) -> list:
        """New runs over those of the (offset, size) `members` that no run covers (members
        at most RUN_GAP apart, with no held run between them, make one run; with `tiers`,
        {member: tier}, only members of one tier); the covered ones are wanted again from
        the runs that cover them."""
        fresh: list = []
        for member in sorted(set(members)):
            offset, size = member
            tier = None if tiers is None else tiers[member]
            held = self.find(url, offset, size)
            if held is not None and held.raised:   # its error told: asked again, fetched again
                self.drop(held)
                held = None
            if held is not None:
                held.wanted.add(member)
            elif fresh and fresh[-1].tier == tier and offset - fresh[-1].end <= RUN_GAP \
                    and not self._starts_within(url, fresh[-1].end, offset):
                fresh[-1].end = max(fresh[-1].end, offset + size)
                fresh[-1].wanted.add(member)
            else:
                fresh.append(Run(url, offset, offset + size, [member], tier))
        return fresh

    def add(self, run: Run) -> bool:
        """Hold `run`, evicting the oldest fetched runs while it would not fit; False (not
        held) when it still does not."""
        for old in list(self.age):
            if self.bytes + run.size <= self.budget:
                break
            if old.done:
                self.drop(old)
        if self.bytes + run.size > self.budget:
            return False
        starts, runs = self.starts.setdefault(run.url, []), self.runs.setdefault(run.url, [])
        place = bisect.bisect(starts, run.start)
        starts.insert(place, run.start)
        runs.insert(place, run)
        self.age[run] = None
        self.bytes += run.size
        return True

    def take(self, run: Run, offset: int, size: int) -> None:
        """A read of the fetched `run`: once each member it was asked for has been read, the
        run is dropped."""
        run.wanted.discard((offset, size))
        if not run.wanted:
            self.drop(run)

    def drop(self, run: Run) -> None:
        if run in self.age:
            del self.age[run]
            place = bisect.bisect_left(self.starts[run.url], run.start)
            del self.runs[run.url][place], self.starts[run.url][place]
            self.bytes -= run.size

    def clear(self) -> None:
        self.starts.clear()
        self.runs.clear()
        self.age.clear()
        self.bytes = 0

    def _starts_within(self, url: str, low: int, high: int) -> bool:
        """Whether a held run starts in low..high (exclusive)."""
        starts = self.starts.get(url, ())
        place = bisect.bisect_left(starts, low)
        return place < len(starts) and starts[place] < high
