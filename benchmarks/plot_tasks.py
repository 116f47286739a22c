"""The plots of the task benchmarks: images/s of benchmarks/detection.py per pipeline and
workers, clips/s of benchmarks/audio.py per workers, each contender with its ratio to the
torch baseline of the same group above its bar. Each benchmark draws its own after its run;
this redraws them from the JSON (needs matplotlib, requirements-bench.txt: without it, a
line says so and nothing is drawn).

    python -m benchmarks.plot_tasks [--detection FILE.json] [--audio FILE.json] [--out-dir DIR]

By default it reads the run's JSON (results/latest/, else the committed ones) and draws into
results/latest/ (docs/ when refreshing, harness.py).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import input_path, plots_dir, pyplot, save_figure

DETECTION_COLOURS = {"torchvision": "#4c72b0", "pimloader": "#dd8452", "DALI": "#76b900",
                     "pim emulator*": "#999999"}
AUDIO_COLOURS = {"torch + torchaudio": "#4c72b0", "pimloader": "#dd8452", "DALI": "#76b900",
                 "pimloader emulator (not DPU speed)": "#999999"}
OTHER_COLOUR = "#c44e52"


def detection_groups(results: dict) -> list[tuple[str, dict]]:
    """(label, {contender: (images/s, ratio to torchvision)}) per pipeline and workers."""
    groups = []
    for group in results["groups"]:
        rates = group["images_per_s"]
        label = f"{group['pipeline']}\n{group['workers']} workers"
        groups.append((label, {name: (rate, rate / rates["torchvision"])
                               for name, rate in rates.items()}))
    return groups


def audio_groups(results: dict) -> list[tuple[str, dict]]:
    """(label, {contender: (clips/s, ratio to torch + torchaudio)}) per workers."""
    return [(f"{row['workers']} workers",
             {name: (entry["median_clips_s"], entry["ratio"])
              for name, entry in row["contenders"].items()})
            for row in results["rows"]]


def detection_title(results: dict) -> str:
    settings = results["settings"]
    env = results.get("environment")
    where = (f"{env['date']}, {env['cpus']} shared cores, load average "
             f"{env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}"
             if env else "date and load not recorded in this JSON")
    return (f"Detection pipelines: {settings['count']} COCO-format photos, batch "
            f"{settings['batch_size']}, median of {settings['epochs']} epochs after "
            f"{settings['warmup']} warm-up, contenders interleaved\n{where}\nlabel: ratio to "
            "torchvision in the same group; * DPU kernel on pimloader's emulator: not DPU speed")


def audio_title(results: dict) -> str:
    machine = results["machine"]
    return (f"Keyword pipeline ({results['route']} route): batch {results['batch_size']}, "
            f"{results['rows'][0]['clips']} clips, median epochs, contenders interleaved\n"
            f"{results['date']}, {machine['cpus']} shared cores, load average "
            f"{machine['load_average_1m']:.1f}\nlabel: ratio to torch + torchaudio in the "
            "same group; the emulator's figure is not DPU speed")


def draw_bars(groups: list, colours: dict, ylabel: str, title: str, path: Path) -> None:
    """Grouped bars, one colour per contender, the ratio above each; the PNG at `path`, or
    a line saying why not (matplotlib missing)."""
    plt = pyplot(path)
    if plt is None:
        return

    fig, ax = plt.subplots(figsize=(max(9.0, 1.6 * len(groups) + 2), 5), dpi=110)
    seen = set()
    for position, (_, contenders) in enumerate(groups):
        present = sorted(contenders, key=lambda name: (list(colours) + [name]).index(name))
        width = 0.8 / len(present)
        for slot, name in enumerate(present):
            rate, ratio = contenders[name]
            x = position + (slot - (len(present) - 1) / 2) * width
            ax.bar(x, rate, width, color=colours.get(name, OTHER_COLOUR),
                   label=None if name in seen else name)
            seen.add(name)
            ax.text(x, rate, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), [label for label, _ in groups], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.margins(y=0.12)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(seen))
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def draw_detection(results: dict, path: Path) -> None:
    draw_bars(detection_groups(results), DETECTION_COLOURS, "images/s (median epoch)",
              detection_title(results), path)


def draw_audio(results: dict, path: Path) -> None:
    draw_bars(audio_groups(results), AUDIO_COLOURS, "clips/s (median epoch)",
              audio_title(results), path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot_tasks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--detection", type=Path, help="(default: the run's, else the committed)")
    parser.add_argument("--audio", type=Path, help="(default: the run's, else the committed)")
    parser.add_argument("--out-dir", type=Path,
                        help="(default: results/latest, docs when refreshing)")
    args = parser.parse_args(argv)
    args.detection = args.detection or input_path("detection")
    args.audio = args.audio or input_path("audio")
    args.out_dir = args.out_dir or plots_dir()
    for source, draw, name in ((args.detection, draw_detection, "detection.png"),
                               (args.audio, draw_audio, "audio.png")):
        if source.is_file():
            draw(json.loads(source.read_text()), args.out_dir / name)
        else:
            print(f"no plot {args.out_dir / name}: {source} is missing")


if __name__ == "__main__":
    main()
