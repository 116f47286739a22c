"""Loader overhead: images/s of PIMDataLoader against torch's DataLoader on in-memory tensors.

The dataset holds ready 3x224x224 uint8 images in memory, so an epoch costs only what the
loader itself adds: sampling, fetching, collating, moving batches between processes and
starting workers. Both loaders run in the same process, epoch by epoch in alternating order,
so that they share the machine's noise; the figures are medians over the timed epochs.

    python -m benchmarks.loader_overhead --samples 4096 --epochs 7 --touch

A second, separate measurement (`--transform`, on by default; `--no-transform` skips it)
has both loaders apply a training pipeline to the same in-memory images: torch's
DataLoader over a dataset that applies torchvision v2 itself, against
PIMDataLoader(transform=...) with backend "cpu" (the fused kernel) and "emulator" (the DPU
kernel on pimloader's emulator: its speed is not DPU speed). It uses fewer samples.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.harness import machine, run_benchmark, settle
from benchmarks.progress import bar

try:
    from pimloader import PIMDataLoader
    PIMLOADER_IMPORT_ERROR = None
except ImportError as error:
    PIMDataLoader = None
    PIMLOADER_IMPORT_ERROR = f"{type(error).__name__}: {error}"

IMAGE_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
QUICK = {"samples": 256, "epochs": 3, "warmup": 1, "batch_sizes": [64], "workers": [0, 2],
         "transform_samples": 64}
TRANSFORM_BATCH = 64
TRANSFORM_BACKENDS = ("cpu", "emulator")
EMULATOR_LABEL = "emulator (not DPU speed)"


class InMemoryImages(Dataset):
    """`data[N, 3, 224, 224]` uint8 from a seeded generator; item i is `(data[i], label)`."""

    def __init__(self, samples: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (samples, *IMAGE_SHAPE), dtype=torch.uint8,
                                  generator=generator)
        self.labels = torch.randint(0, NUM_CLASSES, (samples,), generator=generator).tolist()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.data[index], self.labels[index]


class TransformedImages(Dataset):
    """The same images with a torchvision transform applied by the dataset (torch's side)."""

    def __init__(self, images: InMemoryImages, transform) -> None:
        self.images = images
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.images[index]
        return self.transform(image), label


def training_pipeline():
    from torchvision.transforms import v2
    return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@dataclass(frozen=True)
class Config:
    batch_size: int
    workers: int
    persistent: bool

    def label(self) -> str:
        return f"{self.workers} persistent" if self.persistent else str(self.workers)


def configs(batch_sizes: list[int], workers: list[int]) -> list[Config]:
    """Fresh workers every epoch for each worker count; persistent ones as well where > 0."""
    rows = []
    for batch_size in batch_sizes:
        for count in workers:
            rows.append(Config(batch_size, count, persistent=False))
            if count > 0:
                rows.append(Config(batch_size, count, persistent=True))
    return rows


def make_loaders(dataset: Dataset, config: Config) -> dict[str, DataLoader]:
    classes = {"torch": DataLoader}
    if PIMDataLoader is not None:
        classes["pimloader"] = PIMDataLoader
    return {name: cls(dataset, batch_size=config.batch_size, shuffle=True,
                      num_workers=config.workers, persistent_workers=config.persistent)
            for name, cls in classes.items()}


PHASES = ("start", "first", "rest", "end")


def run_epoch(loader: DataLoader, touch: bool) -> dict[str, float]:
    """Seconds to consume every batch, split into phases: creating the iterator (with
    fresh workers: forking them), waiting for the first batch, the other batches, and
    the end (from the last batch to StopIteration: shutting fresh workers down)."""
    seen = 0
    start = time.perf_counter()
    iterator = iter(loader)
    created = first = last = time.perf_counter()
    for images, _labels in iterator:
        if seen == 0:
            first = time.perf_counter()
        seen += images.shape[0]
        if touch:
            images[0, 0, 0, 0].item()
        last = time.perf_counter()
    end = time.perf_counter()
    if seen != len(loader.dataset):
        raise RuntimeError(f"{type(loader).__name__} gave {seen} of {len(loader.dataset)} images")
    return {"start": created - start, "first": first - created, "rest": last - first,
            "end": end - last}


def fork_exit_cost(repeats: int = 5) -> dict[str, float]:
    """Median seconds for this process to fork a child, and for that child to exit at once
    (what every fresh worker costs torch's DataLoader and PIMDataLoader alike: both grow
    with the size of this process, here holding the dataset)."""
    forks, exits = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forked = time.perf_counter()
        os.waitpid(pid, 0)
        forks.append(forked - start)
        exits.append(time.perf_counter() - forked)
    return {"fork_s": statistics.median(forks), "exit_s": statistics.median(exits)}


def last_epoch_stats(loader: DataLoader) -> dict | None:
    if not hasattr(loader, "stats") or not loader.stats():
        return None
    return dataclasses.asdict(loader.stats()[-1])


def median_epoch(seconds: list[float]) -> int:
    """Index of the epoch whose time is the (lower) median."""
    ranked = sorted(range(len(seconds)), key=seconds.__getitem__)
    return ranked[(len(ranked) - 1) // 2]


def measure(dataset: Dataset, config: Config, epochs: int, warmup: int, touch: bool) -> dict:
    """Alternate the loaders epoch by epoch; keep times and pimloader's stats of timed epochs."""
    loaders = make_loaders(dataset, config)
    seconds = {name: [] for name in loaders}
    stats = {name: [] for name in loaders}
    phases = {name: [] for name in loaders}
    rounds = bar(range(warmup + epochs), unit="round",
                 desc=f"batch {config.batch_size}, {config.workers} workers")
    for repeat in rounds:
        order = list(loaders) if repeat % 2 == 0 else list(reversed(loaders))
        for name in order:
            phase_s = run_epoch(loaders[name], touch)
            if repeat >= warmup:
                seconds[name].append(sum(phase_s.values()))
                phases[name].append(phase_s)
                stats[name].append(last_epoch_stats(loaders[name]))
    return summarize(config, len(dataset), seconds, stats, phases)


def transform_loaders(images: InMemoryImages, workers: int) -> dict[str, DataLoader]:
    """torch + torchvision in the dataset, and PIMDataLoader(transform=) per backend."""
    options = dict(batch_size=TRANSFORM_BATCH, shuffle=True, num_workers=workers)
    loaders = {"torch": DataLoader(TransformedImages(images, training_pipeline()), **options)}
    if PIMDataLoader is not None:
        for backend in TRANSFORM_BACKENDS:
            loaders[backend] = PIMDataLoader(images, transform=training_pipeline(),
                                             backend=backend, **options)
    return loaders


def measure_transform(images: InMemoryImages, workers: int, epochs: int,
                      warmup: int) -> dict:
    """Median images/s of each loader over `epochs` epochs, alternating their order."""
    loaders = transform_loaders(images, workers)
    seconds = {name: [] for name in loaders}
    rounds = bar(range(warmup + epochs), unit="round", desc=f"transform, {workers} workers")
    for repeat in rounds:
        order = list(loaders) if repeat % 2 == 0 else list(reversed(loaders))
        for name in order:
            epoch_s = sum(run_epoch(loaders[name], touch=True).values())
            if repeat >= warmup:
                seconds[name].append(epoch_s)
    row = {"batch_size": TRANSFORM_BATCH, "workers": workers}
    for name, times in seconds.items():
        row[name] = {"median_img_s": len(images) / statistics.median(times), "epoch_s": times}
        stats = last_epoch_stats(loaders[name])
        if stats is not None:
            row[name]["kernel_samples"] = stats["kernel_samples"]
    for backend in TRANSFORM_BACKENDS:
        if backend in row:
            row[f"ratio_{backend}"] = row[backend]["median_img_s"] / row["torch"]["median_img_s"]
    return row


def format_transform_table(transform: dict) -> str:
    header = (f"{'batch':>6} {'workers':>8} {'torch+tv img/s':>15} {'cpu img/s':>10} "
              f"{'ratio':>6} {EMULATOR_LABEL + ' img/s':>31} {'ratio':>6}")
    lines = [header, "-" * len(header)]
    for row in transform["rows"]:
        cells = [f"{row['batch_size']:>6} {row['workers']:>8} "
                 f"{row['torch']['median_img_s']:15.0f}"]
        for backend, width in (("cpu", 10), ("emulator", 31)):
            if backend in row:
                cells.append(f"{row[backend]['median_img_s']:{width}.0f} "
                             f"{row[f'ratio_{backend}']:6.2f}")
            else:
                cells.append(f"{'n/a':>{width}} {'n/a':>6}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def summarize(config: Config, samples: int, seconds: dict, stats: dict,
              phases: dict) -> dict:
    row = dataclasses.asdict(config)
    for name, times in seconds.items():
        median_index = median_epoch(times)
        row[name] = {"median_img_s": samples / statistics.median(times),
                     "epoch_s": times,
                     "median_phases_s": {phase: statistics.median(p[phase] for p in phases[name])
                                         for phase in PHASES},
                     "median_epoch_stats": stats[name][median_index]}
    if "pimloader" in row:
        row["ratio"] = row["pimloader"]["median_img_s"] / row["torch"]["median_img_s"]
    return row


def row_label(row: dict) -> str:
    return Config(row["batch_size"], row["workers"], row["persistent"]).label()


def format_table(rows: list[dict]) -> str:
    header = f"{'batch':>6} {'workers':>13} {'torch img/s':>12} {'pimloader img/s':>16} {'ratio':>6}"
    lines = [header, "-" * len(header)]
    for row in rows:
        pim = row.get("pimloader")
        pim_text = f"{pim['median_img_s']:16.0f}" if pim else f"{'n/a':>16}"
        ratio_text = f"{row['ratio']:6.2f}" if pim else f"{'n/a':>6}"
        lines.append(f"{row['batch_size']:>6} {row_label(row):>13} "
                     f"{row['torch']['median_img_s']:12.0f} {pim_text} {ratio_text}")
    return "\n".join(lines)


def format_pim_stats(rows: list[dict]) -> str:
    header = (f"{'batch':>6} {'workers':>13} {'batches':>7} {'wait_s':>8} {'fetch_s':>8} "
              f"{'write_s':>8} {'shared':>6} {'collated':>8}")
    lines = ["pimloader stats of the median epoch:", header, "-" * len(header)]
    for row in rows:
        stats = row.get("pimloader", {}).get("median_epoch_stats")
        if stats is None:
            continue
        lines.append(f"{row['batch_size']:>6} {row_label(row):>13} {stats['batches']:>7} "
                     f"{stats['wait_s']:8.3f} {stats['fetch_s']:8.3f} {stats['write_s']:8.3f} "
                     f"{stats['shared_batches']:>6} {stats['collated_batches']:>8}")
    return "\n".join(lines)


def format_phases(rows: list[dict], fork_exit: dict) -> str:
    header = f"{'batch':>6} {'workers':>13} {'loader':>9} " + " ".join(
        f"{phase + ' ms':>9}" for phase in PHASES)
    lines = ["where an epoch goes (medians; start = creating the iterator, end = from the "
             "last batch to StopIteration):", header, "-" * len(header)]
    for row in rows:
        for name in ("torch", "pimloader"):
            if name not in row:
                continue
            phase_s = row[name]["median_phases_s"]
            lines.append(f"{row['batch_size']:>6} {row_label(row):>13} {name:>9} " + " ".join(
                f"{phase_s[phase] * 1e3:9.1f}" for phase in PHASES))
    lines.append(f"this process forks a child in {fork_exit['fork_s'] * 1e3:.1f} ms, and an "
                 f"empty child exits in {fork_exit['exit_s'] * 1e3:.1f} ms (median): the floor "
                 f"of start and end with fresh workers, for both loaders")
    return "\n".join(lines)


def environment() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__,
            **machine(), "torch_threads": torch.get_num_threads(),
            "pimloader_import_error": PIMLOADER_IMPORT_ERROR}


def run(args: argparse.Namespace) -> dict:
    dataset = InMemoryImages(args.samples, args.seed)
    rows = [measure(dataset, config, args.epochs, args.warmup, args.touch)
            for config in configs(args.batch_sizes, args.workers)]
    settings = {key: value for key, value in vars(args).items() if key not in ("out", "quick")}
    results = {"benchmark": "loader_overhead", "settings": settings,
               "environment": environment(), "rows": rows, "fork_exit": fork_exit_cost()}
    if args.transform:
        del dataset
        images = InMemoryImages(args.transform_samples, args.seed)
        results["transform"] = {
            "pipeline": "RandomResizedCrop(224), RandomHorizontalFlip(), "
                        "ToDtype(float32, scale=True), Normalize(ImageNet)",
            "samples": args.transform_samples, "batch_size": TRANSFORM_BATCH,
            "rows": [measure_transform(images, workers, args.epochs, args.warmup)
                     for workers in args.workers]}
    return results


def report(results: dict) -> None:
    settings = results["settings"]
    print(f"loader overhead: {settings['samples']} samples of 3x224x224 uint8, "
          f"median of {settings['epochs']} epochs after {settings['warmup']} warm-up, "
          f"touch={settings['touch']}, {results['environment']['cpus']} CPUs")
    print(format_table(results["rows"]))
    if PIMDataLoader is None:
        print(f"pimloader columns are n/a: {PIMLOADER_IMPORT_ERROR}")
    else:
        print(format_pim_stats(results["rows"]))
    print(format_phases(results["rows"], results["fork_exit"]))
    if "transform" in results:
        transform = results["transform"]
        print(f"\nwith a transform: {transform['pipeline']}, {transform['samples']} samples "
              f"of 3x224x224 uint8, median of {settings['epochs']} epochs; torch+tv = "
              f"DataLoader with torchvision v2 in the dataset, cpu / emulator = "
              f"PIMDataLoader(transform=, backend=); the emulator's speed is not DPU speed")
        print(format_transform_table(transform))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4096,
                        help="images in the dataset, one epoch (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=7,
                        help="timed epochs per loader and configuration (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed epochs before them (default: %(default)s)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256],
                        help="batch sizes to run (default: %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2],
                        help="worker counts to run; each count > 0 also runs with "
                             "persistent_workers=True (default: %(default)s)")
    parser.add_argument("--touch", action="store_true",
                        help="also read the first byte of every batch, not only its shape")
    parser.add_argument("--seed", type=int, default=0, help="seed of the dataset's pixels")
    parser.add_argument("--transform", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure both loaders applying a training pipeline "
                             "(default: on; --no-transform skips it)")
    parser.add_argument("--transform-samples", type=int, default=512,
                        help="images of the transform measurement (default: %(default)s)")
    parser.add_argument("--out", type=Path,
                        help="JSON file for the results (default: results/latest/"
                             "loader_overhead.json, or loader_overhead.quick.json with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny smoke-test settings: {QUICK}")
    args = settle(parser.parse_args(argv), "loader_overhead", QUICK)
    if args.epochs < 1 or args.samples < 1 or args.transform_samples < 1:
        parser.error("--epochs, --samples and --transform-samples must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
