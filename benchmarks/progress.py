"""Progress bars for the benchmarks' long steps (making a dataset, a seekable copy, an FFCV
.beton, each contender's epochs), drawn by tqdm when it is installed.

They are drawn on standard error when it is a terminal, and never when it is not (a log, CI,
a pipe) or when the environment sets TQDM_DISABLE=1 (tqdm's own switch, which also quiets
the bars that peers such as FFCV draw themselves). pimloader itself never needs tqdm.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Iterable


def quiet() -> bool:
    """No bars: TQDM_DISABLE is set (to anything but 0/false), or stderr is not a terminal."""
    switch = os.environ.get("TQDM_DISABLE", "").strip().lower()
    return switch not in ("", "0", "false") or not sys.stderr.isatty()


class Silent:
    """What `bar` gives when no bar is drawn: the same calls, doing nothing."""

    def __init__(self, iterable: Iterable | None = None):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def update(self, count: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
        unit: str = "it"):
    """A tqdm bar over `iterable` (or updated by hand up to `total`), or a Silent one."""
    if quiet():
        return Silent(iterable)
    try:
        from tqdm import tqdm
    except ImportError:
        return Silent(iterable)
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)


def reporter(desc: str, unit: str = "file") -> tuple[Callable[[int, int], None], Callable]:
    """A (done, total) callback that draws a bar, for library functions that take one
    (pimloader.decode.make_seekable's `progress=`), and the function that closes it."""
    state = {"bar": None, "done": 0}

    def report(done: int, total: int) -> None:
        if state["bar"] is None:
            state["bar"] = bar(total=total, desc=desc, unit=unit)
        state["bar"].update(done - state["done"])
        state["done"] = done

    def close() -> None:
        if state["bar"] is not None:
            state["bar"].close()

    return report, close
