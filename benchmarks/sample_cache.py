"""The encoded-sample cache (cache_bytes=) on the case it exists for: a dataset larger than
the budget, read cold every epoch.

    python -m benchmarks.sample_cache            # 400 files, 6 epochs per contender (about 20 s)
    python -m benchmarks.sample_cache --quick    # 48 files, 3 epochs (smoke run)

Three contenders over the same image folder, PIMDataLoader with a training pipeline
(RandomResizedCrop(224), RandomHorizontalFlip, ToDtype(float32), Normalize), 2 workers:

  no cache, cold:  before each epoch the page cache of every file of the dataset is dropped
                   (posix_fadvise(POSIX_FADV_DONTNEED)), so every file is read from disk;
  page cache:      no dropping: the OS page cache alone (the dataset fits in RAM here);
  MinIO, cold:     files dropped as in the first, cache_bytes = --fraction of the dataset's
                   bytes: the cached samples come from shared memory, the rest from disk.

DONTNEED only helps where the files sit on a block device; on a tmpfs or an overlay over
one it may do nothing. The benchmark measures that first (a file of --probe-mib read cold
after DONTNEED, then warm) and labels the "cold" figures accordingly. Epoch 0 of each
contender is a warm-up (and fills the MinIO cache); figures are medians over the others.
Writes results/latest/sample_cache.json and, but for --quick, the plot
results/latest/sample_cache.png (results/ and docs/ when refreshing, harness.py).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torchvision.transforms.v2 as v2

from benchmarks.harness import RunWindow, machine, pyplot, run_benchmark, save_figure, settle, utc_date
from benchmarks.make_dataset import DATA_DIR, make_imagenet_like
from benchmarks.progress import bar
from pimloader import PIMDataLoader
from pimloader.datasets import ImageFolder

QUICK = {"count": 48, "epochs": 3, "batch_size": 16, "probe_mib": 16}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def drop_page_cache(paths) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_seconds(path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as file:
        while file.read(1 << 20):
            pass
    return time.perf_counter() - start


def probe_dontneed(folder: Path, mib: int) -> dict:
    """Whether DONTNEED makes a read cold here: a file read after it vs read again warm."""
    path = folder / "dontneed_probe.bin"
    with open(path, "wb") as file:
        file.write(os.urandom(mib << 20))
        file.flush()
        os.fsync(file.fileno())
    try:
        drop_page_cache([path])
        cold = read_seconds(path)
        warm = min(read_seconds(path) for _ in range(3))
    finally:
        path.unlink()
    effective = cold > 2 * warm
    return {"probe_mib": mib, "cold_read_s": cold, "warm_read_s": warm,
            "dontneed_effective": effective, "filesystem": filesystem_of(folder)}


def filesystem_of(path: Path) -> str:
    """The type of the mount holding `path` (from /proc/mounts), or "unknown"."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1]
                if str(path.resolve()).startswith(point) and len(point) > len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def run_contender(root: Path, files: list, cache_bytes: int, cold: bool, epochs: int,
                  batch_size: int, workers: int) -> dict:
    transform = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    loader = PIMDataLoader(ImageFolder(root), batch_size=batch_size, shuffle=True,
                           num_workers=workers, persistent_workers=True, transform=transform,
                           backend="cpu", cache_bytes=cache_bytes,
                           generator=torch.Generator().manual_seed(0))
    seconds = []
    try:
        for _ in bar(range(epochs), unit="epoch", desc=f"cache_bytes={cache_bytes}, "
                     f"{'cold' if cold else 'page cache'}"):
            if cold:
                drop_page_cache(files)
            start = time.perf_counter()
            for images, _labels in loader:
                pass
            seconds.append(time.perf_counter() - start)
        stats = loader.stats()
    finally:
        loader.close()
    timed = stats[1:]
    median = statistics.median(seconds[1:])
    samples = stats[-1].samples
    return {"img_per_s": samples / median, "epoch_s": seconds,
            "hit_rate": (sum(s.cache_hits for s in timed)
                         / max(1, sum(s.cache_hits + s.cache_misses for s in timed))),
            "fill_epoch_misses": stats[0].cache_misses,
            "hits_per_epoch": [s.cache_hits for s in stats],
            "misses_per_epoch": [s.cache_misses for s in stats],
            "hit_mib_per_epoch": [s.cache_hit_bytes / 2 ** 20 for s in stats]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sample_cache",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="48 files, 3 epochs")
    parser.add_argument("--data", type=Path, default=DATA_DIR,
                        help="folder where the image folder is made once (default: "
                             "results/data, as sample_cache_<count>)")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=6, help="per contender, 1 warm-up")
    parser.add_argument("--fraction", type=float, default=0.5,
                        help="cache budget as a fraction of the dataset's bytes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--probe-mib", type=int, default=64)
    parser.add_argument("--out", type=Path, help="JSON file for the results (default: "
                        "results/latest/sample_cache.json, or sample_cache.quick.json)")
    parser.add_argument("--plot", type=Path, help="PNG (default: "
                        "results/latest/sample_cache.png; none with --quick)")
    return settle(parser.parse_args(argv), "sample_cache", QUICK, plot="sample_cache.png")


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), measure, report, plot)


def measure(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data / f"sample_cache_{args.count}", count=args.count,
                              classes=4)
    files = [path for path, _ in ImageFolder(root).samples]
    total = sum(os.path.getsize(path) for path in files)
    budget = int(total * args.fraction)
    probe = probe_dontneed(Path(root), args.probe_mib)
    cold_label = "cold" if probe["dontneed_effective"] else "DONTNEED had no effect"
    window = RunWindow()
    contenders = {
        f"no cache ({cold_label})": (0, True),
        "OS page cache alone": (0, False),
        f"MinIO {args.fraction:.0%} ({cold_label})": (budget, True),
    }
    rows = {name: run_contender(root, files, cache_bytes, cold, args.epochs,
                                args.batch_size, args.workers)
            for name, (cache_bytes, cold) in contenders.items()}
    results = {
        "dataset": {"root": str(root), "files": len(files), "mib": total / 2 ** 20},
        "settings": {"budget_bytes": budget, "fraction": args.fraction,
                     "epochs": args.epochs, "workers": args.workers,
                     "batch_size": args.batch_size, "quick": args.quick},
        "dontneed_probe": probe,
        "environment": {**machine(), **window.load(), "date": utc_date()},
        "rows": rows,
    }
    return results


def report(results: dict) -> None:
    data, settings, probe = results["dataset"], results["settings"], results["dontneed_probe"]
    env = results["environment"]
    print(f"sample cache: {data['files']} files, {data['mib']:.1f} MiB, budget "
          f"{settings['budget_bytes'] / 2 ** 20:.1f} MiB ({settings['fraction']:.0%}), "
          f"{settings['workers']} workers, batch {settings['batch_size']}, medians of "
          f"{settings['epochs'] - 1} epochs after 1 warm-up")
    print(f"DONTNEED probe on {probe['filesystem']}: {probe['probe_mib']} MiB read cold "
          f"{probe['cold_read_s'] * 1000:.1f} ms, warm {probe['warm_read_s'] * 1000:.1f} ms: "
          + ("the page cache is dropped, 'cold' epochs read from the block device (which a "
             "virtual machine's host may itself cache)" if
             probe["dontneed_effective"] else
             "DONTNEED had no measurable effect here (tmpfs/overlay or a host cache): the "
             "'cold' epochs are NOT cold, and the contenders differ only by the cache's "
             "own cost and the copy it saves"))
    print(f"load average before {env['loadavg_before'][0]:.2f}, after "
          f"{env['loadavg_after'][0]:.2f}")
    print(f"{'contender':<38} {'img/s':>8} {'hit rate':>9}  epoch seconds")
    for name, row in results["rows"].items():
        print(f"{name:<38} {row['img_per_s']:8.1f} {row['hit_rate']:9.1%}  "
              + " ".join(f"{s:.2f}" for s in row["epoch_s"]))


def plot(results: dict, path: Path) -> None:
    """Images/s per contender with its hit rate (left), and each epoch's seconds (right:
    epoch 0 reads everything and fills the MinIO cache)."""
    plt = pyplot(path)
    if plt is None:
        return

    rows, data, settings = results["rows"], results["dataset"], results["settings"]
    env = results["environment"]
    dontneed = "effective" if results["dontneed_probe"]["dontneed_effective"] else "had NO effect"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=110)
    for position, (name, row) in enumerate(rows.items()):
        left.bar(position, row["img_per_s"])
        left.text(position, row["img_per_s"], f"{row['img_per_s']:,.0f} img/s\n"
                  f"{row['hit_rate']:.0%} hits", ha="center", va="bottom", fontsize=8)
        right.plot(range(len(row["epoch_s"])), row["epoch_s"], marker="o", label=name)
    left.set_xticks(range(len(rows)), [name.replace(" (", "\n(") for name in rows], fontsize=8)
    left.set_ylabel(f"images/s (median of the {settings['epochs'] - 1} epochs after epoch 0)")
    left.margins(y=0.2)
    left.grid(axis="y", alpha=0.3)
    right.set_xlabel("epoch (0: warm-up, fills the cache)")
    right.set_ylabel("epoch seconds")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(f"Encoded-sample cache: {data['files']} files, {data['mib']:.1f} MiB, budget "
                 f"{settings['fraction']:.0%} of it, {settings['workers']} workers, batch "
                 f"{settings['batch_size']}; cold = page cache dropped before each epoch "
                 f"(DONTNEED {dontneed} here)"
                 f"\n{env['date']}, {env['cpus']} CPUs, load {env['loadavg_before'][0]:.1f}"
                 f" -> {env['loadavg_after'][0]:.1f}", fontsize=9)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
