"""What the benchmarks share around their measurements: the order of interleaved rounds,
the machine's load, the date and the wall time around a run, writing the results' JSON, and
keeping the run's output readable (a warning shown once, not once per loader).

Each benchmark keeps its own JSON layout (other benchmarks and docs read them); these are
the pieces they had each written alike.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import time
import warnings
from pathlib import Path
from typing import Sequence


def interleaved(names: Sequence[str], round_index: int) -> list[str]:
    """The contenders of round `round_index`, rotated by one more each round, so that none
    always runs first (on a cold cache, a just-freed core) or always after the same one."""
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def machine() -> dict:
    """The machine, as every benchmark's JSON names it."""
    return {"cpus": os.cpu_count(), "machine": platform.machine()}


def local_date() -> str:
    """The date as the loader benchmarks write it ("2026-12-01 18:00 UTC")."""
    return time.strftime("%Y-%m-%d %H:%M %Z")


def utc_date() -> str:
    """The date as an ISO 8601 UTC timestamp ("2026-12-01T18:00:00Z")."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RunWindow:
    """The load average when a run starts and ends, and its wall time: started when made."""

    def __init__(self) -> None:
        self.load_before = os.getloadavg()
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def load(self) -> dict:
        """loadavg_before and loadavg_after (now), each the 1, 5 and 15-minute averages."""
        return {"loadavg_before": self.load_before, "loadavg_after": os.getloadavg()}

    def load_and_wall(self) -> dict:
        return {**self.load(), "wall_s": self.elapsed()}


def write_results(results: dict, path: Path) -> None:
    """The results as indented JSON at `path` (its folder made if need be), and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"results written to {path}")


@contextlib.contextmanager
def warnings_once():
    """Each distinct UserWarning shown once within the block (Python's default shows it
    again from every new loader, pipeline and call site). Filters already set (-W, a test's
    "ignore" or "error") come first and still apply."""
    with warnings.catch_warnings():
        warnings.filterwarnings("once", category=UserWarning, append=True)
        yield


def silenced(make, *args, **kwargs):
    """make(*args, **kwargs) with its prints to standard output dropped (pycocotools' COCO
    announces every annotation file it loads)."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        return make(*args, **kwargs)


def pyplot(path):
    """matplotlib's pyplot on the Agg backend, or None after a line saying that the plot at
    `path` is not drawn (matplotlib is a benchmark extra: requirements-bench.txt)."""
    try:
        import matplotlib
    except ImportError as error:
        print(f"no plot {path}: {error} (pip install -r requirements-bench.txt)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
