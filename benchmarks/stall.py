"""Stall analysis (DS-Analyzer's question): how much of a training loop's time waits for data.

A training loop takes each batch from the loader and runs a "model step" of a fixed time.
No GPU here, so the step is modelled: by default it sleeps (`--step sleep`). A GPU step is
asynchronous to the host: the Python thread queues kernels and then waits on the device
while the host's cores stay free for the loader's workers; a sleep likewise takes wall time
and no CPU, so the workers get the machine as they would beside a GPU. `--step busy` spins
instead, holding one core for the whole step, as a CPU-bound step (or a host thread busy
launching kernels) would. The step times default to batch / a GPU's published ResNet-50
training rate (pimloader.costmodel.provisioning.GPU_RATES): the loop asks for data as fast
as that GPU would consume it.

Per loader and step time: the share of the loop's wall time spent waiting in next()
("stall"), in the step, and elsewhere (the loop itself), and per batch, from the loop's
clock and PIMDataLoader.stats() (read after each batch): fetch, decode, transform (the fused
kernel writing into the slot), deliver (the main process lending the batch), wait (the rest of
next(): blocked on the workers), and step. With workers, fetch / decode / transform run in
the workers while the step runs; only wait and deliver stall the loop (with num_workers=0
everything happens inside next(), and wait is what is left of it: the loader's own work).
torch's DataLoader keeps no such accounting: for it only wait and step are observable.

    python -m benchmarks.stall [--step-ms 12.8 25.9 53.3] [--step sleep|busy] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from benchmarks.harness import (RunWindow, close_loader, interleaved, local_date, pyplot, run_benchmark,
                                save_figure, settle)
from benchmarks.imagenet_pipeline import (SEEKABLE, Group, dataset_summary, environment,
                                          make_loader)
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.progress import bar
from pimloader.costmodel.provisioning import GPU_RATES

LOADERS = ("torchvision", "pimloader", SEEKABLE)
STATS_FIELDS = {"fetch": "fetch_s", "decode": "decode_s", "transform": "write_s",
                "deliver": "deliver_s", "in_next": "wait_s"}
QUICK = {"count": 40, "classes": 4, "epochs": 1, "warmup": 1, "batch_size": 16}


def model_step(kind: str, seconds: float) -> None:
    """The stand-in for a training step: sleep (a GPU step: no host CPU) or spin (one core)."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _stats_now(loader) -> dict | None:
    if not hasattr(loader, "stats"):
        return None
    current = loader.stats()[-1]
    return {stage: getattr(current, field) for stage, field in STATS_FIELDS.items()}


def train_epoch(loader, step_s: float, step_kind: str) -> dict:
    """One epoch of the loop: wall time, and per batch the loop's wait and step times and
    (PIMDataLoader) the deltas of stats() over that batch."""
    batches = []
    start = time.perf_counter()
    iterator = iter(loader)
    before = _stats_now(loader)
    while True:
        asked = time.perf_counter()
        try:
            images, _targets = next(iterator)
        except StopIteration:
            break
        got = time.perf_counter()
        model_step(step_kind, step_s)
        batch = {"images": len(images), "wait_loop": got - asked,
                 "step": time.perf_counter() - got}
        after = _stats_now(loader)
        if after is not None:
            batch.update({stage: after[stage] - before[stage] for stage in STATS_FIELDS})
            before = after
        batches.append(batch)
    end_wait = time.perf_counter() - asked  # the last next(), which raised StopIteration
    return {"wall_s": time.perf_counter() - start, "batches": batches, "end_wait_s": end_wait}


def shares(epoch: dict) -> dict:
    """Shares of the epoch's wall time: waiting in next(), stepping, and the rest (creating
    the iterator, the loop's own bookkeeping); they add up to 1."""
    wall = epoch["wall_s"]
    wait = sum(b["wait_loop"] for b in epoch["batches"]) + epoch["end_wait_s"]
    step = sum(b["step"] for b in epoch["batches"])
    return {"wait": wait / wall, "step": step / wall, "other": (wall - wait - step) / wall}


def per_batch_ms(epoch: dict, produced_in_next: bool) -> dict:
    """Mean ms per batch of each stage that this loader lets us observe. `wait` is the rest
    of next() (stats' wait_s) once the stages spent inside it are taken out: deliver, and
    with num_workers=0 (`produced_in_next`) fetch, decode and transform too."""
    batches = epoch["batches"]
    mean = {"wait_loop": statistics.mean(b["wait_loop"] for b in batches) * 1e3,
            "step": statistics.mean(b["step"] for b in batches) * 1e3}
    if "in_next" in batches[0]:
        for stage in ("fetch", "decode", "transform", "deliver", "in_next"):
            mean[stage] = statistics.mean(b[stage] for b in batches) * 1e3
        inside = ("deliver", "fetch", "decode", "transform") if produced_in_next else ("deliver",)
        mean["wait"] = mean["in_next"] - sum(mean[stage] for stage in inside)
    return mean


def measure(root: Path, args: argparse.Namespace, step_s: float) -> dict:
    group = Group("train", "float32", args.workers, persistent=args.workers > 0)
    loaders = {name: make_loader(name, root, group, args.batch_size) for name in LOADERS}
    epochs = {name: [] for name in LOADERS}
    try:
        rounds = range(args.warmup + args.epochs)
        for repeat in bar(rounds, unit="round", desc=f"step {step_s * 1e3:.0f} ms"):
            for name in interleaved(LOADERS, repeat):
                epoch = train_epoch(loaders[name], step_s, args.step)
                if repeat >= args.warmup:
                    epochs[name].append(epoch)
    finally:
        for loader in loaders.values():
            close_loader(loader)
    row = {"step_ms": step_s * 1e3, "loaders": {}}
    for name, runs in epochs.items():
        median = sorted(runs, key=lambda e: e["wall_s"])[(len(runs) - 1) // 2]
        images = sum(batch["images"] for batch in median["batches"])
        row["loaders"][name] = {"wall_s": median["wall_s"], "img_s": images / median["wall_s"],
                                "shares": shares(median),
                                "per_batch_ms": per_batch_ms(median, args.workers == 0),
                                "epochs_wall_s": [e["wall_s"] for e in runs]}
    return row


def default_steps(batch_size: int) -> list[float]:
    """ms per step of each GPU rate of provisioning.GPU_RATES at this batch size."""
    return [batch_size / gpu.at() * 1e3 for gpu in GPU_RATES]


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    window = RunWindow()
    rows = []
    for step_ms in args.step_ms:
        rows.append(measure(root, args, step_ms / 1e3))
        print(f"  measured step {step_ms:.1f} ms ({window.elapsed():.0f} s)", flush=True)
    settings = {key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items() if key not in ("out", "quick", "plot")}
    return {"benchmark": "stall", "settings": settings, "date": local_date(),
            "gpu_steps": {gpu.name: args.batch_size / gpu.at() * 1e3 for gpu in GPU_RATES},
            "environment": {**environment(), **window.load_and_wall()},
            "dataset": dataset_summary(root), "rows": rows}


def format_tables(results: dict) -> str:
    head = (f"{'step ms':>7} {'loader':>18} {'img/s':>6} {'stall':>6} {'step':>6} {'other':>6}"
            f" | ms/batch: {'fetch':>6} {'decode':>6} {'transf':>6} {'deliv':>6} {'wait':>6}"
            f" {'step':>6}")
    lines = [head, "-" * len(head)]
    for row in results["rows"]:
        for name, entry in row["loaders"].items():
            s, ms = entry["shares"], entry["per_batch_ms"]
            stages = " ".join(f"{ms[k]:6.2f}" if k in ms else f"{'-':>6}"
                              for k in ("fetch", "decode", "transform", "deliver"))
            wait = ms.get("wait", ms["wait_loop"])
            lines.append(f"{row['step_ms']:7.1f} {name:>18} {entry['img_s']:6.0f} "
                         f"{s['wait']:6.1%} {s['step']:6.1%} {s['other']:6.1%} |           "
                         f"{stages} {wait:6.2f} {ms['step']:6.2f}")
    lines.append("stall/step/other: shares of the loop's wall time (median epoch) spent in next(), "
                 "in the step, elsewhere. ms/batch: fetch/decode/transf run in the workers "
                 "(overlapping the step); deliv and wait are inside next(). torchvision: only "
                 "wait and step are observable (no stats())")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    plt = pyplot(path)
    if plt is None:
        return

    entries = [(row["step_ms"], name, entry) for row in results["rows"]
               for name, entry in row["loaders"].items()]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.4 * len(entries) + 2.6), dpi=110)
    labels = [f"step {step:.1f} ms  {name}" for step, name, _ in entries]
    colours = {"wait": "#c44e52", "step": "#55a868", "other": "#bbbbbb"}
    for i, (_, _, entry) in enumerate(entries):
        left_edge = 0.0
        for part, colour in colours.items():
            share = entry["shares"][part]
            left.barh(i, share, left=left_edge, color=colour, label=part if i == 0 else None)
            left_edge += share
    left.set_yticks(range(len(entries)), labels, fontsize=7)
    left.invert_yaxis()
    left.set_xlabel("share of the training loop's wall time (wait = stall)")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    worker_colours = {"fetch": "#8172b2", "decode": "#dd8452", "transform": "#4c72b0"}
    loop_colours = {"deliver": "#937860", "wait": "#c44e52", "step": "#55a868"}
    seen = set()
    for i, (_, _, entry) in enumerate(entries):
        ms = dict(entry["per_batch_ms"])
        ms.setdefault("wait", ms["wait_loop"])
        for offset, colours in ((-0.2, worker_colours), (0.2, loop_colours)):
            edge = 0.0
            for stage, colour in colours.items():
                if stage not in ms:
                    continue
                right.barh(i + offset, ms[stage], height=0.38, left=edge, color=colour,
                           label=None if stage in seen else stage)
                seen.add(stage)
                edge += ms[stage]
    right.set_yticks(range(len(entries)), [""] * len(entries))
    right.invert_yaxis()
    right.set_xlabel("ms per batch. Upper bar: one worker's fetch + decode + transform "
                     "(stats(); overlaps the step);\nlower bar: the loop's deliver + wait "
                     "(inside next()) + step. torchvision: wait and step only", fontsize=8)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=6)
    fig.suptitle(f"Stall analysis, {results['settings']['step']} step, "
                 f"{results['settings']['workers']} workers, batch "
                 f"{results['settings']['batch_size']} ({results['date']}, load "
                 f"{results['environment']['loadavg_before'][0]:.1f})", fontsize=9)
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stall",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="files in the folder")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--data", type=Path, help="dataset folder (default: results/data/"
                        "imagenet_like, or imagenet_like_quick with --quick)")
    parser.add_argument("--step-ms", type=float, nargs="+",
                        help="model step times (default: batch / each GPU rate of "
                             "provisioning.GPU_RATES)")
    parser.add_argument("--step", choices=("sleep", "busy"), default="sleep",
                        help="sleep: no host CPU, as a GPU step; busy: spin on one core")
    parser.add_argument("--workers", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/latest/stall.json, "
                        "or stall.quick.json with --quick)")
    parser.add_argument("--plot", type=Path, help="PNG (default: results/latest/stall.png; none "
                        "with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"smoke-test settings: {QUICK}")
    args = settle(parser.parse_args(argv), "stall", QUICK, data="imagenet_like", plot="stall.png")
    if args.epochs < 1 or args.workers < 0:
        parser.error("--epochs must be at least 1 and --workers at least 0")
    args.step_ms = args.step_ms or default_steps(args.batch_size)
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)

    def report(results: dict) -> None:
        print(f"Stall analysis: {results['dataset']['files']} files, training pipeline float32, "
              f"batch {args.batch_size}, {args.workers} workers, {args.step} step, median epoch of "
              f"{args.epochs}, load {results['environment']['loadavg_before'][0]:.1f} -> "
              f"{results['environment']['loadavg_after'][0]:.1f}; steps "
              + ", ".join(f"{name} {ms:.1f} ms" for name, ms in results["gpu_steps"].items()))
        print(format_tables(results))

    return run_benchmark(args, run, report, plot)


if __name__ == "__main__":
    main()
