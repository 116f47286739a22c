"""CPU time of this process and its children (loader workers), live or reaped.

getrusage(RUSAGE_CHILDREN) counts a child only once it has been reaped, so persistent
workers would show up only when the loader closes. `CpuClock` adds the live children's
utime + stime from /proc/<pid>/stat (Linux), so that one epoch of a persistent loader can be
measured while others wait their turn. CPU time is the steadier figure on a loaded machine:
wall time stretches when other jobs take the cores, CPU time much less.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def live_children() -> dict[int, float]:
    """{pid: CPU seconds} of this process's live children."""
    cpu = {}
    for pid in _child_pids():
        fields = _stat_fields(pid)
        if fields is not None:
            cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS   # utime, stime
    return cpu


def _child_pids() -> list[int]:
    """Every thread's children from /proc/self/task/*/children, or, on a kernel without
    that file (CONFIG_PROC_CHILDREN off), the processes whose parent is this one."""
    listings = list(Path("/proc/self/task").glob("*/children"))
    if listings:
        pids = []
        for listing in listings:
            try:
                pids += [int(pid) for pid in listing.read_text().split()]
            except OSError:
                continue
        return pids
    me = os.getpid()
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and (_stat_fields(int(p.name)) or [None, None])[1] == str(me)]


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (state, ppid, ...), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()   # the name may hold spaces


class CpuClock:
    """CPU seconds spent by this process and its children since `start()`."""

    def start(self) -> "CpuClock":
        self._self = _rusage_s(resource.RUSAGE_SELF)
        self._reaped = _rusage_s(resource.RUSAGE_CHILDREN)
        self._live = live_children()
        return self

    def elapsed(self) -> float:
        live = live_children()
        reaped = _rusage_s(resource.RUSAGE_CHILDREN) - self._reaped
        # a child alive at start() and reaped since counts in `reaped` with its whole life
        reaped -= sum(cpu for pid, cpu in self._live.items() if pid not in live)
        grown = sum(cpu - self._live.get(pid, 0.0) for pid, cpu in live.items())
        return _rusage_s(resource.RUSAGE_SELF) - self._self + max(reaped, 0.0) + grown
