"""Plots of the benchmark results for docs/: images/s per contender, and time per image by stage.

Reads benchmarks/results/imagenet_pipeline.json (written by `python -m
benchmarks.imagenet_pipeline`) and writes two PNGs; needs matplotlib (requirements-bench.txt).

    python -m benchmarks.plot [--results FILE] [--out-dir docs]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "imagenet_pipeline.json"
COLOURS = {"torchvision": "#4c72b0", "torchvision PIL": "#8fa9d6",
           "pimloader": "#dd8452", "pimloader exact": "#c44e52"}
STAGE_COLOURS = {"read": "#bbbbbb", "decode": "#4c72b0", "transform": "#55a868",
                 "collate_or_write": "#dd8452"}


def workers_label(row: dict) -> str:
    if row["workers"] == 0:
        return "0 workers"
    return f"{row['workers']} workers" + ("" if row["persistent"] else " (fresh)")


def plot_throughput(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
                 "label above bar: ratio to torchvision (decode_image) in the same group",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_breakdown(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="imagenet_pipeline JSON (default: %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "docs",
                        help="folder for the PNGs (default: %(default)s)")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, plot in (("imagenet_pipeline.png", plot_throughput),
                       ("imagenet_breakdown.png", plot_breakdown)):
        plot(results, args.out_dir / name)
        print(f"wrote {args.out_dir / name}")


if __name__ == "__main__":
    main()
