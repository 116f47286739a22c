"""The naive configuration: more workers (more CPUs) per loader, and the cost table built on it.

For each worker count from 1 to this machine's CPUs (`os.sched_getaffinity`; 1, 2, 4, ...
and all of them), three loaders read the ImageNet-like folder through the training pipeline
(RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(float32, scale=True), Normalize),
batch 64, shuffled, persistent workers, one epoch each in rotating order (imagenet_pipeline's
contenders):

- "torchvision": torch's DataLoader + torchvision ImageFolder (decode_image, v2 transforms);
- "pimloader": PIMDataLoader, cpu backend, reduced_dct="auto";
- "pimloader seekable": the same over a seekable copy of the folder (make_seekable).

Per epoch: wall time and CPU time of this process and its workers (benchmarks.cpu_time:
getrusage of self and reaped children + /proc of live ones). Figures: median img/s, img/s
per worker, CPU ms per image (the steadier figure on a loaded machine) and the cores that
CPU time keeps busy. benchmarks.cost_table turns them, with the cost model's PROJECTED DPU
rates (dpu_projection.json: the run's, else the committed one) and published prices, into
the host cores, DIMMs and $/hour each loader needs to feed a GPU; results go to
results/latest/naive_sweep.json and the plot to results/latest/naive_sweep.png (results/ and
docs/ when refreshing, harness.py).

    python -m benchmarks.naive_sweep [--workers 1 2] [--epochs 3] [--quick]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
from pathlib import Path

import torch

from benchmarks import cost_table
from benchmarks.cpu_time import CpuClock
from benchmarks.harness import (RunWindow, close_loader, input_path, interleaved, local_date,
                                run_benchmark, settle)
from benchmarks.imagenet_pipeline import (SEEKABLE, Group, dataset_summary, environment,
                                          make_loader, median_epoch, run_epoch)
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.progress import bar

LOADERS = ("torchvision", "pimloader", SEEKABLE)
QUICK = {"count": 40, "classes": 4, "epochs": 1, "warmup": 1, "batch_size": 16}


def machine_cpus() -> int:
    return len(os.sched_getaffinity(0))


def default_workers(cpus: int) -> list[int]:
    """1, 2, 4, ... up to `cpus`, and `cpus` itself: the sweep from one core to all of them,
    without one run per worker count on a large server."""
    return sorted({2 ** k for k in range(cpus.bit_length()) if 2 ** k <= cpus} | {cpus})


def measure(root: Path, workers: int, batch_size: int, epochs: int, warmup: int) -> dict:
    """One worker count: every loader, epochs interleaved; wall and CPU time per epoch."""
    group = Group("train", "float32", workers, persistent=True)
    loaders = {name: make_loader(name, root, group, batch_size) for name in LOADERS}
    seconds = {name: [] for name in LOADERS}
    cpu = {name: [] for name in LOADERS}
    stats = {name: [] for name in LOADERS}
    try:
        for repeat in bar(range(warmup + epochs), unit="round", desc=f"{workers} workers"):
            for name in interleaved(LOADERS, repeat):
                clock = CpuClock().start()
                elapsed = run_epoch(loaders[name], "float32")
                used = clock.elapsed()
                if repeat < warmup:
                    continue
                seconds[name].append(elapsed)
                cpu[name].append(used)
                if hasattr(loaders[name], "stats"):
                    stats[name].append(dataclasses.asdict(loaders[name].stats()[-1]))
    finally:
        for loader in loaders.values():
            close_loader(loader)
    images = len(loaders[LOADERS[0]].dataset)
    return {"workers": workers, "images": images,
            "loaders": {name: summary(seconds[name], cpu[name], stats[name], images, workers)
                        for name in LOADERS}}


def summary(seconds: list[float], cpu: list[float], stats: list[dict], images: int,
            workers: int) -> dict:
    img_s = images / statistics.median(seconds)
    cpu_s_per_image = statistics.median(cpu) / images
    entry = {"median_img_s": img_s, "img_s_per_worker": img_s / workers,
             "cpu_ms_per_image": cpu_s_per_image * 1e3, "img_s_per_core": 1 / cpu_s_per_image,
             "cores_busy": cpu_s_per_image * img_s, "epoch_s": seconds, "epoch_cpu_s": cpu}
    if stats:
        entry["median_epoch_stats"] = stats[median_epoch(seconds)]
    return entry


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    window = RunWindow()
    rows = []
    for workers in args.workers:
        rows.append(measure(root, workers, args.batch_size, args.epochs, args.warmup))
        print(f"  measured workers={workers} ({window.elapsed():.0f} s)", flush=True)
    settings = {key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items() if key not in ("out", "quick", "plot")}
    return {"benchmark": "naive_sweep", "settings": settings,
            "date": local_date(),
            "environment": {**environment(), "affinity_cpus": machine_cpus(),
                            **window.load_and_wall()},
            "dataset": dataset_summary(root), "rows": rows}


def format_sweep(results: dict) -> str:
    header = (f"{'loader':>18} {'workers':>7} {'img/s':>7} {'img/s/worker':>12} "
              f"{'CPU ms/img':>10} {'img/s/core':>10} {'cores busy':>10}")
    lines = [header, "-" * len(header)]
    for row in results["rows"]:
        for name, entry in row["loaders"].items():
            lines.append(f"{name:>18} {row['workers']:>7} {entry['median_img_s']:7.0f} "
                         f"{entry['img_s_per_worker']:12.0f} {entry['cpu_ms_per_image']:10.3f} "
                         f"{1e3 / entry['cpu_ms_per_image']:10.0f} {entry['cores_busy']:10.2f}")
    return "\n".join(lines)


def report(results: dict) -> None:
    env, settings = results["environment"], results["settings"]
    print(f"Naive sweep: {results['dataset']['files']} files, training pipeline float32, batch "
          f"{settings['batch_size']}, persistent workers, median of {settings['epochs']} epochs "
          f"after {settings['warmup']} warm-up, {env['affinity_cpus']} CPUs, load "
          f"{env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}")
    print("CPU ms/img: this process + its workers (utime + stime) per image; img/s/core = "
          "1 / CPU time per image (img/s of one fully busy core); cores busy = CPU time per "
          "second of the epoch")
    print(format_sweep(results))
    if "cost_table" in results:
        print(cost_table.format_table(results["cost_table"]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.naive_sweep",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="files in the folder")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--data", type=Path, help="dataset folder (default: results/data/"
                        "imagenet_like, or imagenet_like_quick with --quick; made if missing)")
    parser.add_argument("--workers", type=int, nargs="+",
                        help="worker counts (default: 1, 2, 4, ... and the CPUs of "
                             "os.sched_getaffinity); give --count enough files for several "
                             "batches per worker")
    parser.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3,
                        help="timed epochs per loader and worker count (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    parser.add_argument("--projection", type=Path,
                        help="dpu_projection JSON for the DPU rows of the cost table (default: "
                             "the run's dpu_projection[.quick].json, else the committed one)")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/latest/naive_sweep"
                        ".json, or naive_sweep.quick.json with --quick)")
    parser.add_argument("--plot", type=Path, help="PNG of the sweep and the cost table "
                        "(default: results/latest/naive_sweep.png; none with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke-test settings: {QUICK}, workers 1 unless --workers")
    args = parser.parse_args(argv)
    settle(args, "naive_sweep", QUICK, data="imagenet_like", plot="naive_sweep.png")
    if args.workers is None:
        args.workers = [1] if args.quick else default_workers(machine_cpus())
    if min(args.workers) < 1 or args.epochs < 1:
        parser.error("--workers and --epochs must be at least 1")
    args.projection = args.projection or input_path("dpu_projection", args.quick)
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run_with_cost_table, report, cost_table.plot)


def run_with_cost_table(args: argparse.Namespace) -> dict:
    """The sweep, and the cost table built on it and on dpu_projection's JSON (if any)."""
    results = run(args)
    projection = (json.loads(args.projection.read_text()) if args.projection.exists()
                  else None)
    results["cost_table"] = cost_table.build(results, projection)
    return results


if __name__ == "__main__":
    main()
