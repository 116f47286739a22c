"""Scale: the memory of all a loader's processes as the dataset grows to ImageNet's 1.28M files.

    python -m benchmarks.scale                        # 1.28M files, 2 and 8 workers, 50,000 samples
    python -m benchmarks.scale --files 50000 --samples 12800 --workers 2   # a smaller run
    python -m benchmarks.scale --quick                # 5,000 files, 1,280 samples, 2 workers

The folder: `--files` files in ImageNet's layout (one class folder per 1,000 files), each a
hard link to one of a few real JPEGs (benchmarks.make_dataset's photographs), so that it
takes no disk space and stays in the page cache: what grows is the index, not the data.

Contenders, on the same folder, with the same training transform (RandomResizedCrop(224),
RandomHorizontalFlip, ToDtype(float32), Normalize), shuffle=True, persistent workers:
torch's DataLoader over torchvision's ImageFolder (PIL decode, the transform as Python), and
PIMDataLoader over pimloader's ImageFolder (the transform lowered, cpu backend). Each run is
a process of its own (so that one contender's dataset never sits in another's memory), in
rotating order across rounds. A run records the dataset's scan, the time from the loader's
construction to its first batch, and the PSS of all its processes (main + workers, from
/proc/PID/smaps_rollup: shared pages divided among the processes that map them) after the
first batch and after `--samples` samples. A dataset index held in per-sample Python objects
grows in every forked worker as it is read (the objects' reference counts are written, so
their pages are copied: pytorch issue 13246); one held in numpy arrays stays shared.
Writes results/latest/scale.json (scale.quick.json with --quick; results/ when refreshing,
harness.py). Not in `python -m
benchmarks`: the default run makes 1.28M links and reads 50,000 samples per run.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import (RunWindow, interleaved, machine, results_path, utc_date,
                                write_results)
from benchmarks.make_dataset import DATA_DIR, make_imagenet_like

CONTENDERS = ("torch DataLoader", "PIMDataLoader")
PER_CLASS = 1000   # files per class folder, as in ImageNet's training set
LINKS_PER_FILE = 50_000  # under ext4's 65,000 links to one inode
POINTS = 10   # PSS measured after each tenth of the samples too


# -- the folder ------------------------------------------------------------------------------

def make_linked_folder(root: Path, files: int, data: Path) -> Path:
    """`files` hard links in root/classNNNNN/NNNNNNN.JPEG to a few real JPEGs (kept when a
    complete one is there already)."""
    marker = root / "complete.json"
    if marker.exists() and json.loads(marker.read_text()).get("files") == files:
        return root
    photos = make_imagenet_like(data / "scale_photos", count=max(8, -(-files // LINKS_PER_FILE)),
                                classes=1, greyscale=False, progressive=False, png=False)
    originals = sorted(photos.rglob("*.JPEG"))
    shutil.rmtree(root, ignore_errors=True)
    for index in range(files):
        folder = root / f"class{index // PER_CLASS:05d}"
        if index % PER_CLASS == 0:
            folder.mkdir(parents=True)
        os.link(originals[index % len(originals)], folder / f"{index:07d}.JPEG")
    marker.write_text(json.dumps({"files": files, "originals": len(originals)}) + "\n")
    return root


# -- one run, in a process of its own --------------------------------------------------------

def tree_pss_mib() -> dict:
    """PSS of this process and of its descendants (MiB), from smaps_rollup: in all, in
    this process, in the others; and all processes' anonymous PSS (their heaps: what
    copy-on-read copies) and shared-memory PSS (batch slots, torch's shared tensors)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    parents[int(entry)] = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = [os.getpid()], [os.getpid()]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        tree += frontier
    rollups = {pid: _rollup_mib(pid) for pid in tree}
    main = rollups.pop(os.getpid())
    others = sum(rollup.get("Pss", 0.0) for rollup in rollups.values())
    every = [main, *rollups.values()]
    return {"total": main.get("Pss", 0.0) + others, "main": main.get("Pss", 0.0),
            "others": others, "processes": len(every),
            "anon": sum(rollup.get("Pss_Anon", 0.0) for rollup in every),
            "shmem": sum(rollup.get("Pss_Shmem", 0.0) for rollup in every)}


def _rollup_mib(pid: int) -> dict:
    """{field: MiB} of the Pss lines of /proc/PID/smaps_rollup ({} once the process left)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            return {line.split(":")[0]: float(line.split()[1]) / 1024 for line in file
                    if line.startswith("Pss")}
    except OSError:
        return {}


def run_one(contender: str, root: Path, workers: int, samples: int, batch_size: int,
            gc_freeze: bool) -> dict:
    import torch
    from benchmarks.pipelines import make_transform
    init = {"worker_init_fn": freeze_inherited} if gc_freeze else {}
    started = time.perf_counter()
    if contender == "PIMDataLoader":
        from pimloader import PIMDataLoader
        from pimloader.datasets import ImageFolder
        dataset = ImageFolder(root)
        scanned = time.perf_counter()
        loader = PIMDataLoader(dataset, batch_size=batch_size, shuffle=True,
                               num_workers=workers, persistent_workers=True, backend="cpu",
                               transform=make_transform("train", "float32"), **init)
    else:
        from torchvision.datasets import ImageFolder
        dataset = ImageFolder(root, transform=make_transform("train", "float32", pil=True))
        scanned = time.perf_counter()
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                             num_workers=workers, persistent_workers=True,
                                             **init)
    seen, first, at_first, trajectory = 0, None, None, []
    while seen < samples:
        for images, _ in loader:
            seen += len(images)
            if first is None:
                first = time.perf_counter() - scanned
                at_first = tree_pss_mib()
            if seen >= samples * (len(trajectory) + 1) / POINTS:
                trajectory.append({"samples": seen, **tree_pss_mib()})
            if seen >= samples:
                break
    delivered = {}
    if hasattr(loader, "stats"):   # pimloader: how its batches came (slots, collated)
        last = loader.stats()[-1]
        delivered = {"shared_batches": last.shared_batches,
                     "collated_batches": last.collated_batches}
    return {"contender": contender, "workers": workers, "files": len(dataset), **delivered,
            "scan_s": scanned - started, "first_batch_s": first, "samples": seen,
            "read_s": time.perf_counter() - scanned, "pss_first_mib": at_first,
            "pss_end_mib": trajectory[-1], "pss_trajectory_mib": trajectory}


def freeze_inherited(worker_id: int) -> None:
    """gc.freeze() in a worker: the objects it inherited are left out of its collections,
    whose bookkeeping would otherwise write to every one of them and so copy their pages."""
    gc.freeze()


def in_process(contender: str, root: Path, workers: int, samples: int, batch_size: int,
               gc_freeze: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.scale", "--child", contender, "--root",
               str(root), "--workers", str(workers), "--samples", str(samples),
               "--batch-size", str(batch_size)] + (["--gc-freeze"] if gc_freeze else [])
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(runs: list[dict]) -> None:
    """PSS (MiB, all processes) after the first batch, after a tenth of the samples (a
    loader's reused buffers, such as pimloader's batch slots, are all written by then) and
    at the end, with the growth from each to the end."""
    print(f"{'contender':<18}{'workers':>8}{'files':>10}{'first batch s':>14}"
          f"{'PSS first':>10}{'at 1/10':>9}{'end':>7}{'growth':>8}{'from 1/10':>10}"
          f"{'anon from 1/10':>15}{'samples':>9}")
    for run in runs:
        first, tenth, end = (run["pss_first_mib"], run["pss_trajectory_mib"][0],
                             run["pss_end_mib"])
        anon = end.get("anon", 0.0) - tenth.get("anon", 0.0)
        print(f"{run['contender']:<18}{run['workers']:>8}{run['files']:>10}"
              f"{run['first_batch_s']:>14.2f}{first['total']:>10.0f}{tenth['total']:>9.0f}"
              f"{end['total']:>7.0f}{end['total'] - first['total']:>8.0f}"
              f"{end['total'] - tenth['total']:>10.0f}{anon:>15.0f}{run['samples']:>9}")


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 files, 1,280 samples, "
                        "2 workers")
    parser.add_argument("--files", type=int, default=1_281_167)
    parser.add_argument("--samples", type=int, default=50_000, help="samples read per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1, help="runs per contender and "
                        "worker count, interleaved")
    parser.add_argument("--data", type=Path, default=DATA_DIR,
                        help="where the folder is made (as scale_<files>)")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/latest/scale.json, "
                        "or scale.quick.json)")
    parser.add_argument("--gc-freeze", action="store_true", help="both loaders with a "
                        "worker_init_fn that calls gc.freeze() (what the workers' own garbage "
                        "collections copy of the inherited heap)")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child, args.root, args.workers[0], args.samples,
                                 args.batch_size, args.gc_freeze)))
        return None
    if args.quick:
        args.files, args.samples, args.workers = 5_000, 1_280, [2]
    root = make_linked_folder(args.data / f"scale_{args.files}", args.files, args.data)
    window = RunWindow()
    runs = [in_process(contender, root, workers, args.samples, args.batch_size, args.gc_freeze)
            for round_index in range(args.rounds) for workers in args.workers
            for contender in interleaved(CONTENDERS, round_index + workers)]
    print_table(runs)
    results = {"date": utc_date(), **machine(), **window.load_and_wall(),
               "folder": {"root": str(root), "files": args.files, "per_class": PER_CLASS},
               "samples": args.samples, "batch_size": args.batch_size,
               "gc_freeze_in_workers": args.gc_freeze, "runs": runs}
    out = args.out or results_path("scale", args.quick)
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
