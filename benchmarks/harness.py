"""What the benchmarks share around their measurements: the order of interleaved rounds,
the machine's load, the date and the wall time around a run, where results, data and plots
go, the end of a main (run, report, write the JSON, plot: `run_benchmark`), and keeping the
run's output readable (a warning shown once, not once per loader).

Each benchmark keeps its own flags and JSON layout (other benchmarks and docs read them);
these are the pieces they had each written alike.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
import warnings
from pathlib import Path
from typing import Callable, Sequence

BENCHMARKS = Path(__file__).resolve().parent
RESULTS_DIR = BENCHMARKS / "results"      # the committed results/<name>.json
LATEST_DIR = RESULTS_DIR / "latest"       # a run's JSON, plots and pages (git ignores it)
DATA_DIR = RESULTS_DIR / "data"           # generated datasets (git ignores them)
DOCS = BENCHMARKS.parent / "docs"         # the committed plots and pages the docs show
REFRESH_ENV = "PIMLOADER_BENCH_REFRESH"   # set to 1: write over the committed ones


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


def close_loader(loader) -> None:
    """End a loader's persistent workers now, rather than whenever the loader is collected
    (PIMDataLoader.close(), or torch's iterator shut down)."""
    if hasattr(loader, "close"):
        loader.close()
        return
    iterator = getattr(loader, "_iterator", None)
    loader._iterator = None
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()


def write_results(results: dict, path: Path, default: Callable | None = None) -> None:
    """The results as indented JSON at `path` (its folder made if need be), and say so;
    `default` turns what JSON has no type for into what it has (json.dumps')."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=default) + "\n")
    print(f"results written to {path}")


def refreshing() -> bool:
    """Whether this run refreshes the committed results ($PIMLOADER_BENCH_REFRESH set, not 0)."""
    return os.environ.get(REFRESH_ENV, "0") not in ("", "0")


def run_dir() -> Path:
    """Where this run writes its JSON: results/ when refreshing, else results/latest/."""
    return RESULTS_DIR if refreshing() else LATEST_DIR


def plots_dir() -> Path:
    """Where this run draws its plots and writes its pages: docs/ when refreshing, else
    results/latest/, beside its JSON."""
    return DOCS if refreshing() else LATEST_DIR


def results_path(name: str, quick: bool) -> Path:
    """Where benchmark `name` writes its JSON by default: <name>.json in run_dir(), or
    <name>.quick.json for a --quick run (never over the committed results)."""
    return run_dir() / f"{name}{'.quick' if quick else ''}.json"


def input_path(name: str, quick: bool = False) -> Path:
    """The JSON of benchmark `name` for another to read: this run's (results_path), or where
    this run has none, the committed one, with a line saying so."""
    path = results_path(name, quick)
    committed = RESULTS_DIR / path.name
    if path.exists() or not committed.exists():
        return path
    print(f"note: no {path} from this run: reading the committed {committed}")
    return committed


def settle(args: argparse.Namespace, name: str, quick: dict | None = None,
           data: str | None = None, plot: str | None = None) -> argparse.Namespace:
    """Fill in what a benchmark's flags leave open, as every benchmark does: with --quick
    the `quick` settings replace the parsed ones; then an unset --data is
    results/data/<data> (<data>_quick with --quick), an unset --out results_path(name), and
    an unset --plot <plot> in plots_dir() unless --quick (a smoke run draws nothing by
    default)."""
    if args.quick and quick:
        vars(args).update(quick)
    if data is not None and args.data is None:
        args.data = DATA_DIR / (f"{data}_quick" if args.quick else data)
    if args.out is None:
        args.out = results_path(name, args.quick)
    if plot is not None and args.plot is None and not args.quick:
        args.plot = plots_dir() / plot
    return args


def run_benchmark(args: argparse.Namespace, run: Callable[[argparse.Namespace], dict],
                  report: Callable[[dict], None] | None = None,
                  plot: Callable[[dict, Path], None] | None = None, *,
                  out: Path | None = None, default: Callable | None = None) -> dict:
    """The end of a benchmark's main, once its flags are settled: results = run(args);
    report(results) prints them; the JSON goes to `out` or else args.out (write_results,
    `default` as there); plot(results, args.plot) draws them when args.plot is set.
    Returns the results."""
    results = run(args)
    if report is not None:
        report(results)
    write_results(results, out or args.out, default=default)
    if plot is not None and getattr(args, "plot", None) is not None:
        plot(results, args.plot)
    return results


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


def save_figure(fig, path) -> None:
    """Lay out `fig` (a figure of pyplot's, above), save it at `path` (its folder made if need
    be), close it and say so."""
    import matplotlib.pyplot as plt   # importable: the figure was made with it
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")
