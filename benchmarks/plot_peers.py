"""The plot of benchmarks/peers.py: images/s per contender and pipeline, with the ratio to
torchvision from the same run above each bar. `python -m benchmarks.peers` draws it after
its run; this redraws it from the JSON (needs matplotlib, requirements-bench.txt).

    python -m benchmarks.plot_peers [--results FILE.json] [--out FILE.png]

By default it reads the run's peers.json (results/latest/, else the committed one) and draws
results/latest/peers.png (docs/peers.png when refreshing, harness.py).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import input_path, plots_dir, pyplot, save_figure

COLOURS = {"torchvision": "#4c72b0", "DALI": "#76b900", "FFCV": "#8172b3",
           "pimloader": "#dd8452", "pimloader seekable": "#8c613c"}


def draw(results: dict, path: Path) -> None:
    """Write the PNG, or say why not (matplotlib missing) and go on."""
    plt = pyplot(path)
    if plt is None:
        return

    rows = results["rows"]
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    seen = set()
    for position, row in enumerate(rows):
        present = [name for name in COLOURS if name in row["contenders"]]
        width = 0.8 / len(present)
        for slot, name in enumerate(present):
            entry = row["contenders"][name]
            x = position + (slot - (len(present) - 1) / 2) * width
            ax.bar(x, entry["median_img_s"], width, color=COLOURS[name],
                   label=None if name in seen else name)
            seen.add(name)
            ax.text(x, entry["median_img_s"], f"{entry['ratio']:.2f}x", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [f"{row['pipeline']} (float32, normalised)"
                                     for row in rows], fontsize=9)
    ax.set_ylabel("images/s (median epoch)")
    ax.set_title(title(results), fontsize=8.5)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(COLOURS))
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def title(results: dict) -> str:
    settings, env = results["settings"], results["environment"]
    missing = "; ".join(f"{name} {reason}" for name, reason in results["missing"].items())
    return (f"Peers on {results['dataset']['files']} ImageNet-like JPEGs, batch "
            f"{settings['batch_size']}, {settings['workers']} workers/threads each, median of "
            f"{settings['epochs']} epochs ({results['date']})\n{env['cpus']} shared cores, "
            f"load average {env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}; "
            f"label: ratio to torchvision in the same run"
            + (f"\n{missing}" if missing else ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot_peers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, help="(default: the run's, else the committed)")
    parser.add_argument("--out", type=Path,
                        help="(default: results/latest/peers.png, docs/ when refreshing)")
    args = parser.parse_args(argv)
    draw(json.loads((args.results or input_path("peers")).read_text()),
         args.out or plots_dir() / "peers.png")


if __name__ == "__main__":
    main()
