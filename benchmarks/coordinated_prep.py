"""Coordinated prep (share_with=): N concurrent jobs reading one dataset with one pipeline,
each preparing its own batches vs sharing one stream prepared once.

    python -m benchmarks.coordinated_prep            # 400 photos, 2 and 4 jobs (about a minute)
    python -m benchmarks.coordinated_prep --quick    # 48 photos, 2 jobs (smoke run)

Writes results/latest/coordinated_prep.json and, but for --quick, the plot
results/latest/coordinated_prep.png (results/ and docs/ when refreshing, harness.py).

Each job is a process (spawned) that iterates one epoch of the ImageNet-like training
pipeline (RandomResizedCrop(224), RandomHorizontalFlip, ToDtype(float32), Normalize) over
the benchmark's image folder, PIMDataLoader with --workers workers, batch --batch-size,
the CPU backend, workers forked (as for a job started from a shell: a spawned process's
loaders would otherwise spawn their workers too), and no training step (the loader alone:
the case where preparing batches is the bound). "independent": every job runs its own loader and workers; "shared": the jobs
form a group (share_with=..., share_jobs=N), one of them prepares each batch once and all N
read it. Reported: total images/s delivered to the jobs (N x the epoch's images over the
wall time from the start barrier to the last job's end), and the CPU seconds of all the
jobs and their workers (getrusage of each job, itself and its reaped children).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import resource
import time
from pathlib import Path

import torch

from benchmarks.harness import RunWindow, machine, pyplot, run_benchmark, save_figure, settle, utc_date
from benchmarks.make_dataset import DATA_DIR, make_imagenet_like
from benchmarks.pipelines import make_transform
from benchmarks.progress import bar

QUICK = {"count": 48, "jobs": [2], "batch_size": 16}


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def job(root: str, share: dict, workers: int, batch_size: int, barrier, results) -> None:
    """One job: build the loader, wait for the others, iterate one epoch, report."""
    from pimloader import PIMDataLoader
    from pimloader.datasets import ImageFolder
    loader = PIMDataLoader(ImageFolder(root), batch_size=batch_size, shuffle=True,
                           num_workers=workers, transform=make_transform("train", "float32"),
                           backend="cpu", generator=torch.Generator().manual_seed(0),
                           multiprocessing_context="fork", **share)
    barrier.wait()
    cpu, start = _cpu_s(), time.monotonic()
    images = sum(len(labels) for _images, labels in loader)
    end = time.monotonic()
    prepared = loader.stats()[-1].fetch_s > 0
    loader.close()
    results.put({"start": start, "end": end, "images": images, "cpu_s": _cpu_s() - cpu,
                 "prepared": prepared})


def run(root: Path, jobs: int, shared: bool, workers: int, batch_size: int) -> dict:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(jobs), context.Queue()
    share = {"share_with": f"bench-{os.getpid()}-{jobs}", "share_jobs": jobs} if shared else {}
    processes = [context.Process(target=job, args=(str(root), share, workers, batch_size,
                                                   barrier, results)) for _ in range(jobs)]
    for process in processes:
        process.start()
    reports = []
    while len(reports) < jobs:
        try:
            reports.append(results.get(timeout=1.0))
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                for process in processes:
                    process.kill()
                break
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a benchmark job exited with code {process.exitcode}")
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    images = sum(r["images"] for r in reports)
    return {"jobs": jobs, "shared": shared, "wall_s": wall, "images": images,
            "img_per_s": images / wall, "cpu_s": sum(r["cpu_s"] for r in reports),
            "preparing_jobs": sum(r["prepared"] for r in reports)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coordinated_prep",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="48 photos, 2 jobs")
    parser.add_argument("--data", type=Path, default=DATA_DIR,
                        help="folder where the image folder is made once (default: "
                             "results/data, as coordinated_<count>)")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--jobs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--workers", type=int, default=2, help="per loader")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, help="JSON file for the results (default: "
                        "results/latest/coordinated_prep.json, or coordinated_prep.quick.json)")
    parser.add_argument("--plot", type=Path, help="PNG (default: "
                        "results/latest/coordinated_prep.png; none with --quick)")
    return settle(parser.parse_args(argv), "coordinated_prep", QUICK, plot="coordinated_prep.png")


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), measure, report, plot)


def measure(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data / f"coordinated_{args.count}", count=args.count,
                              classes=4)
    window = RunWindow()
    runs = [(jobs, shared) for jobs in args.jobs for shared in (False, True)]
    rows = [run(root, jobs, shared, args.workers, args.batch_size)
            for jobs, shared in bar(runs, unit="run", desc="coordinated prep")]
    results = {
        "settings": {"photos": args.count, "workers": args.workers,
                     "batch_size": args.batch_size, "pipeline": "train float32",
                     "quick": args.quick},
        "environment": {**machine(), **window.load(), "date": utc_date()},
        "rows": rows,
    }
    return results


def report(results: dict) -> None:
    settings, env = results["settings"], results["environment"]
    print(f"coordinated prep: {settings['photos']} photos, training pipeline, "
          f"{settings['workers']} workers per loader, batch {settings['batch_size']}, one "
          f"epoch per job, no training step; {env['cpus']} CPUs, load average before "
          f"{env['loadavg_before'][0]:.2f}, after {env['loadavg_after'][0]:.2f}")
    print(f"{'jobs':>4} {'mode':<12} {'total img/s':>11} {'wall s':>7} {'CPU s':>7} "
          f"{'preparing':>9}")
    for row in results["rows"]:
        print(f"{row['jobs']:>4} {'shared' if row['shared'] else 'independent':<12} "
              f"{row['img_per_s']:11.1f} {row['wall_s']:7.2f} {row['cpu_s']:7.2f} "
              f"{row['preparing_jobs']:>9}")


def plot(results: dict, path: Path) -> None:
    """Total images/s delivered to the jobs (left) and the CPU seconds they spent (right),
    independent vs shared, per number of jobs."""
    plt = pyplot(path)
    if plt is None:
        return

    rows, settings, env = results["rows"], results["settings"], results["environment"]
    counts = sorted({row["jobs"] for row in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for ax, key, label in ((axes[0], "img_per_s", "images/s delivered, all jobs"),
                           (axes[1], "cpu_s", "CPU s, all jobs and their workers")):
        for slot, shared in enumerate((False, True)):
            values = [next(r[key] for r in rows if r["jobs"] == n and r["shared"] == shared)
                      for n in counts]
            xs = [i + (slot - 0.5) * 0.38 for i in range(len(counts))]
            ax.bar(xs, values, 0.38, label="shared (one job prepares)" if shared
                   else "independent")
            for x, value in zip(xs, values):
                ax.text(x, value, f"{value:,.0f}" if key == "img_per_s" else f"{value:.2f}",
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(counts)), [f"{n} jobs" for n in counts])
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Coordinated prep: {settings['photos']} photos, training pipeline, "
                 f"{settings['workers']} workers per loader, batch {settings['batch_size']}, "
                 f"one epoch per job, no training step\n{env['date']}, {env['cpus']} CPUs, "
                 f"load {env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}",
                 fontsize=9)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
