"""Plots of the benchmark results for docs/: images/s per contender, time per image by stage,
and the loader's own overhead.

Reads imagenet_pipeline.json and loader_overhead.json (written by
`python -m benchmarks.imagenet_pipeline` and `python -m benchmarks.loader_overhead`: the
run's, in results/latest/, else the committed ones) and writes three PNGs, to results/latest/
(to docs/ when refreshing, harness.py); needs matplotlib (requirements-bench.txt).

    python -m benchmarks.plot [--results FILE] [--loader-results FILE] [--out-dir DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import input_path, plots_dir, pyplot, save_figure

EMULATOR = "pim DPU-emulator*"
COLOURS = {"torchvision": "#4c72b0", "torchvision PIL": "#8fa9d6",
           "pimloader": "#dd8452", "pimloader exact": "#c44e52",
           "pimloader seekable": "#8c613c", EMULATOR: "#999999"}
STAGE_COLOURS = {"read": "#bbbbbb", "decode": "#4c72b0", "transform": "#55a868",
                 "collate_or_write": "#dd8452"}


def workers_label(row: dict) -> str:
    if row["workers"] == 0:
        return "0 workers"
    return f"{row['workers']} workers" + ("" if row["persistent"] else " (fresh)")


def plot_throughput(results: dict, path: Path) -> None:
    plt = pyplot(path)
    if plt is None:
        return

    rows = results["rows"]
    names = list(COLOURS)
    fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
    width = 0.8 / len(names)
    labels, seen = [], set()
    for position, row in enumerate(rows):
        labels.append(f"{row['pipeline']} {row['dtype']}\n{workers_label(row)}")
        present = [name for name in names if name in row["contenders"]]
        for slot, name in enumerate(present):
            entry = row["contenders"][name]
            x = position + (slot - (len(present) - 1) / 2) * width
            ax.bar(x, entry["median_img_s"], width, color=COLOURS[name],
                   label=None if name in seen else name)
            seen.add(name)
            ax.text(x, entry["median_img_s"], f"{entry['ratio']:.1f}x", ha="center",
                    va="bottom", fontsize=6.5)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("images/s (median epoch)")
    settings, dataset = results["settings"], results["dataset"]
    ax.set_title(f"ImageNet-like pipelines, {dataset['files']} JPEGs, batch "
                 f"{settings['batch_size']}, median of {settings['epochs']} epochs, "
                 f"{results['environment']['cpus']} shared cores ({results['date']})\n"
                 "label above bar: ratio to torchvision (decode_image) in the same group; "
                 "* DPU kernel on pimloader's emulator: not DPU speed", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def plot_breakdown(results: dict, path: Path) -> None:
    plt = pyplot(path)
    if plt is None:
        return

    entries = results["breakdown"]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(entries) + 1.8), dpi=110)
    labels = []
    for position, entry in enumerate(entries):
        labels.append(f"{entry['pipeline']} {entry['dtype']}  {entry['contender']}")
        left = 0.0
        for stage, colour in STAGE_COLOURS.items():
            ms = entry[stage]
            if ms is None:
                continue
            ax.barh(position, ms, left=left, color=colour,
                    label=stage.replace("collate_or_write", "collate / kernel+write")
                    if position == 0 else None)
            left += ms
    ax.set_yticks(range(len(entries)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per image (torchvision: 1 thread in-process; pimloader: loader.stats(), "
                  "num_workers=0)", fontsize=8)
    ax.set_title(f"Where the time goes, per image ({results['date']})", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=4)
    ax.grid(axis="x", alpha=0.3)
    save_figure(fig, path)


def plot_loader_overhead(results: dict, path: Path) -> None:
    """images/s of torch's DataLoader and PIMDataLoader per configuration (no transform),
    and, when measured, with a training transform on the same in-memory images."""
    plt = pyplot(path)
    if plt is None:
        return

    groups = [(f"batch {row['batch_size']}\n{_loader_workers(row)}", row["torch"],
               {"pimloader": row["pimloader"]}) for row in results["rows"]]
    for row in results.get("transform", {}).get("rows", []):
        groups.append((f"+ transform, batch {row['batch_size']}\n{row['workers']} workers",
                       row["torch"], {name: row[name] for name in ("cpu", "emulator")
                                      if name in row}))
    colours = {"torch": "#4c72b0", "pimloader": "#dd8452", "cpu": "#dd8452",
               "emulator": "#999999"}
    fig, ax = plt.subplots(figsize=(11, 4.6), dpi=110)
    seen = set()
    for position, (label, torch_entry, contenders) in enumerate(groups):
        bars = [("torch", torch_entry)] + list(contenders.items())
        width = 0.8 / len(bars)
        for slot, (name, entry) in enumerate(bars):
            x = position + (slot - (len(bars) - 1) / 2) * width
            legend = {"torch": "torch DataLoader (+ torchvision)", "pimloader": "PIMDataLoader",
                      "cpu": "PIMDataLoader", "emulator": "PIMDataLoader, DPU emulator*"}[name]
            ax.bar(x, entry["median_img_s"], width, color=colours[name],
                   label=None if legend in seen else legend)
            seen.add(legend)
            if name != "torch":
                ratio = entry["median_img_s"] / torch_entry["median_img_s"]
                ax.text(x, entry["median_img_s"], f"{ratio:.1f}x", ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=7.5)
    ax.set_yscale("log")
    ax.set_ylabel("images/s (median epoch, log scale)")
    settings = results["settings"]
    ax.set_title(f"Loader overhead: in-memory 3x224x224 uint8 images, median of "
                 f"{settings['epochs']} epochs\n(+ transform: RandomResizedCrop 224, flip, "
                 f"float32, normalize); label: ratio to torch in the same group; "
                 f"* not DPU speed", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def _loader_workers(row: dict) -> str:
    if row["workers"] == 0:
        return "0 workers"
    return f"{row['workers']} workers" + (" persistent" if row["persistent"] else " fresh")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path,
                        help="imagenet_pipeline JSON (default: the run's, else the committed)")
    parser.add_argument("--loader-results", type=Path,
                        help="loader_overhead JSON (default: the run's, else the committed)")
    parser.add_argument("--out-dir", type=Path,
                        help="folder for the PNGs (default: results/latest, docs when refreshing)")
    args = parser.parse_args(argv)
    args.results = args.results or input_path("imagenet_pipeline")
    args.loader_results = args.loader_results or input_path("loader_overhead")
    args.out_dir = args.out_dir or plots_dir()
    results = json.loads(args.results.read_text())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, plot in (("imagenet_pipeline.png", plot_throughput),
                       ("imagenet_breakdown.png", plot_breakdown)):
        plot(results, args.out_dir / name)
    if args.loader_results.exists():
        plot_loader_overhead(json.loads(args.loader_results.read_text()),
                             args.out_dir / "loader_overhead.png")


if __name__ == "__main__":
    main()
