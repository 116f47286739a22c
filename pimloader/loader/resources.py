"""What one process opens for its producers, and who closes it.

A pipeline may need things that live as long as a process rather than an iterator: the
backends of its kernels, whose DPU sets are hardware and must be freed explicitly, not by
the garbage collector. The loader keeps one `ProcessResources` per process and hands it to
every producer it makes there (`ProducerContext.resources`); a pipeline keeps what it opens
in it, by key (`resources.get(Backends)`: the process's one `Backends`, made on first use).
The owner closes it: the loader's state at `PIMDataLoader.close()` (a dropped loader's by a
finalizer) for the main process (`num_workers=0`), each worker as it exits (at the end of
an epoch without `persistent_workers`, at `close()` with them).

Fork-aware: a worker forked from a process that holds resources sees none of them (it opens
its own) and never closes its parent's.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from pimloader.errors import close_all


class ProcessResources:
    """Closeable objects one process opened, by key; `close()` closes them all."""

    def __init__(self) -> None:
        self._held: dict[Any, Any] = {}
        self._pid = os.getpid()

    def get(self, key, make: Callable[[], Any] | None = None):
        """The resource kept under `key`, made by `make()` the first time this process asks
        (`make` defaults to `key` itself, a class: `resources.get(Backends)`). It must have
        a `close()`, which `close()` calls."""
        self._forget_if_forked()
        if key not in self._held:
            self._held[key] = (key if make is None else make)()
        return self._held[key]

    def __contains__(self, key) -> bool:
        self._forget_if_forked()
        return key in self._held

    def __len__(self) -> int:
        self._forget_if_forked()
        return len(self._held)

    def close(self) -> None:
        """Close every resource this process opened, the last opened first (the first error
        is raised once all are closed); they are made afresh if asked for again."""
        held, self._held = list(self._held.values()), {}
        if os.getpid() != self._pid:   # a forked child's copy: its parent's to close
            self._pid = os.getpid()
            return
        close_all(reversed(held))

    def _forget_if_forked(self) -> None:
        if os.getpid() != self._pid:   # inherited by a forked child: not its own
            self._held, self._pid = {}, os.getpid()
