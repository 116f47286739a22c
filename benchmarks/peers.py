"""Peers: PIMDataLoader beside torch + torchvision, NVIDIA DALI and FFCV, on the same photos.

The ImageNet-like folder of make_dataset.py (500 real photographs by default), the training
and validation pipelines, float32 output normalised with ImageNet's mean and std, the same
batch size (64) and 2 workers or threads for every contender:

- "torchvision": torch's DataLoader over torchvision's ImageFolder, decode_image + the v2
  pipeline (the baseline of every ratio), 2 persistent worker processes;
- "pimloader" and "pimloader seekable" (over a copy made once by make_seekable), cpu
  backend, 2 persistent worker processes;
- "DALI": NVIDIA DALI's CPU pipelines, 2 threads (peer_dali.py);
- "FFCV": FFCV 1.0.2's Loader over a .beton written once, 2 threads (peer_ffcv.py).

DALI and FFCV are optional: one that does not import is reported as "not installed: <why>"
and the run goes on without it. Each contender's exact pipeline is printed. Per pipeline,
the contenders run in this process one epoch each in rotating order (warm-up epochs first,
untimed: FFCV compiles its pipeline with numba there), and every epoch must deliver each
image's label once; figures are medians over the timed epochs, ratios against torchvision
in the same run. Results go to results/latest/peers.json and the plot to
results/latest/peers.png (results/ and docs/ when refreshing, harness.py).

    python -m benchmarks.peers [--epochs 7] [--contenders torchvision DALI] [--quick]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
import torchvision
from torchvision.datasets import ImageFolder

from benchmarks import imagenet_pipeline, peer_dali, peer_ffcv
from benchmarks.harness import close_loader, interleaved, run_benchmark, settle
from benchmarks.imagenet_pipeline import SEEKABLE, Group, seekable_copy
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.pipelines import make_transform
from benchmarks.progress import bar

PLOT = "peers.png"
BASELINE = "torchvision"
CONTENDERS = (BASELINE, "pimloader", SEEKABLE, "DALI", "FFCV")
PEERS = {"DALI": peer_dali, "FFCV": peer_ffcv}
PIPELINES = ("train", "val")
QUICK = {"count": 40, "classes": 4, "epochs": 2, "warmup": 1, "batch_size": 16}


@dataclass
class Contender:
    name: str
    loader: Iterable      # (images, labels) batches; each iteration is one epoch
    samples: int
    text: str             # the exact pipeline
    close: Callable[[], None]


# -- contenders ----------------------------------------------------------------------------

def torch_text(name: str, pipeline: str, group: Group, batch_size: int) -> str:
    loader = (f"batch_size={batch_size}, shuffle=True, num_workers={group.workers}, "
              f"persistent_workers={group.persistent}")
    transform = repr(make_transform(pipeline, "float32"))
    if name == BASELINE:
        return (f"torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(root, "
                f"transform=T, loader=<read file + torchvision.io.decode_image(mode=RGB)>), "
                f"{loader})\n  T = {transform}")
    root = "<make_seekable copy of root>" if name == SEEKABLE else "root"
    return (f"pimloader.PIMDataLoader(pimloader.datasets.ImageFolder({root}), transform=T, "
            f"backend='cpu', reduced_dct='auto', {loader})\n  T = {transform}")


def build(name: str, root: Path, pipeline: str, args: argparse.Namespace,
          beton: Path | None) -> Contender:
    if name == "DALI":
        loader = peer_dali.DaliLoader(root, pipeline, args.batch_size, args.workers, args.seed)
        return Contender(name, loader, loader.samples, loader.text, loader.close)
    if name == "FFCV":
        loader = peer_ffcv.FfcvLoader(beton, pipeline, args.batch_size, args.workers, args.seed)
        return Contender(name, loader, loader.samples, loader.text, loader.close)
    group = Group(pipeline, "float32", args.workers, persistent=args.workers > 0)
    loader = imagenet_pipeline.make_loader(name, root, group, args.batch_size)
    return Contender(name, loader, len(loader.dataset),
                     torch_text(name, pipeline, group, args.batch_size),
                     lambda: close_loader(loader))


def unavailable(names: list[str]) -> dict[str, str]:
    """The peers among `names` that cannot run here, with the reason."""
    reasons = {name: PEERS[name].missing() for name in names if name in PEERS}
    if imagenet_pipeline.PIMDataLoader is None:
        reasons.update({name: f"pimloader: {imagenet_pipeline.PIMLOADER_IMPORT_ERROR}"
                        for name in names if name.startswith("pimloader")})
    return {name: reason for name, reason in reasons.items() if reason}


def prepare(root: Path, names: list[str], args: argparse.Namespace) -> dict:
    """One-time costs before any epoch: the seekable copy, the .beton. Timed when made now;
    None seconds: it was already there."""
    prepared = {}
    if SEEKABLE in names:
        stamp = root.with_name(root.name + "_seekable") / ".seekable_of"
        started, made = time.perf_counter(), not stamp.exists()
        copy = seekable_copy(root)
        prepared[SEEKABLE] = {"path": str(copy), "seconds": time.perf_counter() - started
                              if made else None}
    if "FFCV" in names:
        beton, seconds = peer_ffcv.ensure_beton(root, args.data.parent / "ffcv", args.workers)
        prepared["FFCV"] = {"path": str(beton), "seconds": seconds,
                            "bytes": beton.stat().st_size, "stored": peer_ffcv.STORED}
    return prepared


# -- measurement ---------------------------------------------------------------------------

def run_epoch(contender: Contender, class_counts: torch.Tensor) -> float:
    """Seconds to consume every batch; then checks that each image came once (its label)."""
    labels = []
    start = time.perf_counter()
    for images, targets in contender.loader:
        if images.dtype != torch.float32 or tuple(images.shape[1:]) != (3, 224, 224):
            raise RuntimeError(f"{contender.name} gave {images.dtype} {tuple(images.shape)} "
                               "batches, not float32 (batch, 3, 224, 224)")
        labels.append(targets.to(torch.int64, copy=True).view(-1))
    elapsed = time.perf_counter() - start
    counts = torch.bincount(torch.cat(labels), minlength=len(class_counts))
    if not torch.equal(counts, class_counts):
        raise RuntimeError(f"{contender.name}: an epoch delivered labels {counts.tolist()}, "
                           f"the dataset holds {class_counts.tolist()}")
    return elapsed


def measure(contenders: list[Contender], class_counts: torch.Tensor, epochs: int,
            warmup: int, desc: str) -> dict:
    """Epochs in rotating order; the first `warmup` rounds are not timed."""
    seconds = {c.name: [] for c in contenders}
    warmups = {c.name: [] for c in contenders}
    load_before = os.getloadavg()
    with bar(total=(warmup + epochs) * len(contenders), desc=desc, unit="epoch") as epochs_bar:
        for repeat in range(warmup + epochs):
            for contender in interleaved(contenders, repeat):
                epochs_bar.set_postfix_str(contender.name)
                elapsed = run_epoch(contender, class_counts)
                (seconds if repeat >= warmup else warmups)[contender.name].append(elapsed)
                epochs_bar.update()
    row = {"loadavg_before": load_before, "loadavg_after": os.getloadavg(), "contenders": {}}
    for contender in contenders:
        times = seconds[contender.name]
        row["contenders"][contender.name] = {
            "median_img_s": contender.samples / statistics.median(times),
            "epoch_s": times, "warmup_epoch_s": warmups[contender.name],
            "pipeline_text": contender.text}
    base = row["contenders"][BASELINE]["median_img_s"]
    for entry in row["contenders"].values():
        entry["ratio"] = entry["median_img_s"] / base
    return row


def measure_pipeline(root: Path, pipeline: str, names: list[str], args: argparse.Namespace,
                     prepared: dict, failed: dict) -> dict:
    class_counts = torch.bincount(torch.tensor(ImageFolder(root).targets))
    contenders = []
    try:
        for name in names:
            try:
                contenders.append(build(name, root, pipeline, args,
                                        Path(prepared["FFCV"]["path"]) if name == "FFCV"
                                        else None))
            except Exception as error:  # a peer that imports but cannot start
                if name not in PEERS:
                    raise
                failed[f"{name} {pipeline}"] = f"failed to start: {type(error).__name__}: {error}"
        row = measure(contenders, class_counts, args.epochs, args.warmup,
                      desc=f"peers {pipeline}")
    finally:
        for contender in contenders:
            contender.close()
    return {"pipeline": pipeline, **row}


# -- the run -------------------------------------------------------------------------------

def environment() -> dict:
    versions = {name: (None if module.missing() else module.version())
                for name, module in PEERS.items()}
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "dali": versions["DALI"],
            "ffcv": versions["FFCV"], "cpus": os.cpu_count(), "machine": platform.machine(),
            "torch_threads": torch.get_num_threads()}


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    missing = unavailable(args.contenders)
    names = [name for name in args.contenders if name not in missing]
    started, load_before = time.perf_counter(), os.getloadavg()
    prepared = prepare(root, names, args)
    rows = []
    for pipeline in args.pipelines:
        rows.append(measure_pipeline(root, pipeline, names, args, prepared, missing))
        print(f"  measured {pipeline} ({time.perf_counter() - started:.0f} s)", flush=True)
    settings = {key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items() if key not in ("out", "plot", "quick")}
    return {"benchmark": "peers", "settings": settings,
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "environment": {**environment(), "loadavg_before": load_before,
                            "loadavg_after": os.getloadavg(),
                            "wall_s": time.perf_counter() - started},
            "dataset": imagenet_pipeline.dataset_summary(root), "prepared": prepared,
            "missing": missing, "rows": rows}


def format_table(rows: list[dict]) -> str:
    header = (f"{'pipeline':>8} {'contender':>18} {'img/s':>7} {'ratio':>6}  "
              f"{'epochs img/s (min-max)':>22}  {'warm-up s':>9}  load")
    lines = [header, "-" * len(header)]
    for row in rows:
        load = f"{row['loadavg_before'][0]:.1f}->{row['loadavg_after'][0]:.1f}"
        for name, entry in row["contenders"].items():
            samples = entry["median_img_s"] * statistics.median(entry["epoch_s"])
            spread = f"{samples / max(entry['epoch_s']):.0f}-{samples / min(entry['epoch_s']):.0f}"
            warmup = " ".join(f"{s:.1f}" for s in entry["warmup_epoch_s"])
            lines.append(f"{row['pipeline']:>8} {name:>18} {entry['median_img_s']:7.0f} "
                         f"{entry['ratio']:6.2f}  {spread:>22}  {warmup:>9}  {load}")
    return "\n".join(lines)


def report(results: dict) -> None:
    settings, env = results["settings"], results["environment"]
    print(f"Peers: {results['dataset']['files']} files, batch {settings['batch_size']}, "
          f"{settings['workers']} workers/threads each, median of {settings['epochs']} epochs "
          f"after {settings['warmup']} warm-up, {env['cpus']} CPUs, load average "
          f"{env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}, "
          f"DALI {env['dali']}, FFCV {env['ffcv']}")
    for name, reason in results["missing"].items():
        print(f"  {name}: {reason}")
    for name, prep in results["prepared"].items():
        made = "already there" if prep["seconds"] is None else f"made in {prep['seconds']:.1f} s"
        print(f"  {name} reads {prep['path']} ({made})")
    for row in results["rows"]:
        print(f"\n{row['pipeline']} pipeline, exactly:")
        for name, entry in row["contenders"].items():
            print(f"[{name}] {entry['pipeline_text']}")
    print("\nratio = img/s / torchvision's in the same pipeline (same run, epochs interleaved)")
    print(format_table(results["rows"]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500,
                        help="files in the ImageNet-like folder (default: %(default)s)")
    parser.add_argument("--classes", type=int, default=10, help="(default: %(default)s)")
    parser.add_argument("--data", type=Path,
                        help="folder of the dataset (default: results/data/imagenet_like, or "
                             "imagenet_like_quick with --quick; made if missing); FFCV's "
                             ".beton files go to ffcv/ beside it")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS),
                        help="(default: all; torchvision, the baseline, is always run)")
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes (torchvision, pimloader, persistent) or threads "
                             "(DALI, FFCV) of every contender (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads() of this process (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=7,
                        help="timed epochs per contender (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed epochs before them (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/latest/peers.json, "
                                                 "or peers.quick.json with --quick)")
    parser.add_argument("--plot", type=Path,
                        help=f"PNG to draw (default: results/latest/{PLOT}; "
                             "none with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"smoke-run settings: {QUICK}")
    args = parser.parse_args(argv)
    settle(args, "peers", QUICK, data="imagenet_like", plot=PLOT)
    if args.epochs < 1 or args.warmup < 0 or args.workers < 1 or args.batch_size < 1:
        parser.error("--epochs, --workers and --batch-size must be at least 1, --warmup 0")
    args.contenders = [BASELINE] + [name for name in dict.fromkeys(args.contenders)
                                    if name != BASELINE]
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report, draw)


def draw(results: dict, path: Path) -> None:
    from benchmarks.plot_peers import draw   # matplotlib's import, only when drawing
    draw(results, path)


if __name__ == "__main__":
    main()
