"""ImageNet pipelines: images/s of PIMDataLoader against torch's DataLoader with torchvision.

The ImageNet-like folder of real photographs from make_dataset.py, read through two
torchvision v2 pipelines (three, and a colour variant):

- training: RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(float32, scale=True),
  Normalize(ImageNet mean and std); also with ToDtype(float16, scale=True);
- validation: Resize(256), CenterCrop(224), the same ToDtype and Normalize;
- colour: the training pipeline with ColorJitter(brightness=0.4, contrast=0.4,
  saturation=0.4) after the flip (torchvision and pimloader only).

Contenders, all with `shuffle=True` and the same batch size:

- "torchvision": torch's DataLoader over torchvision's ImageFolder whose loader reads the
  file and decodes it with `torchvision.io.decode_image(data, mode=ImageReadMode.RGB)`
  (libjpeg-turbo, the tensor path), then the v2 pipeline on the uint8 CHW tensor;
- "torchvision PIL": torch's DataLoader over torchvision's ImageFolder with its default
  PIL loader; the geometric v2 transforms run on the PIL image and `v2.PILToTensor()` is put
  right before ToDtype (which leaves PIL images alone);
- "pimloader": `PIMDataLoader(pimloader.datasets.ImageFolder(root), transform=<the same v2
  pipeline>)`, cpu backend, `reduced_dct="auto"` (on for RandomResizedCrop, off for the
  validation pipeline); "pimloader exact" is the training pipeline with reduced_dct=False;
  "pimloader seekable" is "pimloader" over a copy of the folder made once by
  `pimloader.decode.make_seekable` (the same pixels: JPEGs rewritten losslessly with
  restart markers, so that a crop decodes without the rest of the image).

Each group (pipeline, dtype, workers) runs its contenders in the same process, one epoch each
in rotating order, so that they share the machine's noise; figures are medians over the
timed epochs after warm-up epochs. This process runs with `torch.set_num_threads(1)`
(`--threads`), as DataLoader workers do. With workers, `persistent_workers=True` unless the row
says "fresh". Then a per-stage breakdown per image: for the torchvision contenders measured
in this process with one thread, for pimloader from `loader.stats()` of its median epoch
with num_workers=0.

    python -m benchmarks.imagenet_pipeline --count 500 --epochs 5 [--quick]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torch.utils.data import DataLoader, default_collate
from torchvision.datasets import ImageFolder as TorchvisionImageFolder

from benchmarks.harness import RunWindow, close_loader, interleaved, local_date, machine, run_benchmark, settle
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.pipelines import (DTYPES, decode_pil, decode_rgb, make_transform, read_bytes,
                                  tensor_loader)
from benchmarks.progress import bar, reporter

try:
    from pimloader import PIMDataLoader
    from pimloader.datasets import ImageFolder as PimImageFolder
    from pimloader.decode import make_seekable
    PIMLOADER_IMPORT_ERROR = None
except ImportError as error:
    PIMDataLoader = PimImageFolder = make_seekable = None
    PIMLOADER_IMPORT_ERROR = f"{type(error).__name__}: {error}"

# torchvision 0.29 warns on every decode_image call that its decoders move to TorchCodec.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities",
                        category=DeprecationWarning)

QUICK = {"count": 40, "classes": 4, "epochs": 2, "warmup": 1, "batch_size": 16,
         "breakdown_passes": 1, "fresh_workers": False}

BASELINE = "torchvision"
TORCHVISION_CONTENDERS = ("torchvision", "torchvision PIL")
EMULATOR = "pim DPU-emulator*"
EMULATOR_NOTE = ("* the DPU kernel and driver on pimloader's libdpu emulator (8 DPUs x 16 "
                 "tasklets as host threads): a correctness test bed; its speed is NOT DPU speed")
SEEKABLE = "pimloader seekable"
PIM_CONTENDERS = ("pimloader", "pimloader exact", SEEKABLE, EMULATOR)
PIPELINES = (("train", "float32"), ("train", "float16"), ("val", "float32"),
             ("colour", "float32"))


# -- contenders ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Group:
    """Contenders measured together, epoch by epoch in rotating order."""

    pipeline: str     # "train" or "val"
    dtype: str        # "float32" or "float16"
    workers: int
    persistent: bool

    def workers_label(self) -> str:
        if self.workers == 0:
            return "0"
        return f"{self.workers}" if self.persistent else f"{self.workers} fresh"


def contenders_for(group: Group) -> list[str]:
    names = ["torchvision"]
    if group.pipeline == "colour":  # what colour ops add: the two main contenders only
        return names + (["pimloader"] if PIMDataLoader is not None else [])
    if group.dtype == "float32":
        names.append("torchvision PIL")
    if PIMDataLoader is not None:
        names.append("pimloader")
        if group.pipeline == "train":  # reduced_dct="auto" is on there: show the exact path
            names.append("pimloader exact")
        if group.dtype == "float32" and group.persistent is (group.workers > 0):
            names.append(SEEKABLE)
        if (group.pipeline, group.dtype) == ("train", "float32"):
            names.append(EMULATOR)
    return names


def groups(workers: list[int], fresh_workers: bool) -> list[Group]:
    rows = []
    for pipeline, dtype in PIPELINES:
        for count in workers:
            rows.append(Group(pipeline, dtype, count, persistent=count > 0))
            if count > 0 and fresh_workers and (pipeline, dtype) == ("train", "float32"):
                rows.append(Group(pipeline, dtype, count, persistent=False))
    return rows


def make_loader(name: str, root: Path, group: Group, batch_size: int,
                pin_memory: bool = False) -> DataLoader:
    options = {"batch_size": batch_size, "shuffle": True, "num_workers": group.workers,
               "persistent_workers": group.persistent, "pin_memory": pin_memory}
    if name == "torchvision":
        dataset = TorchvisionImageFolder(root, make_transform(group.pipeline, group.dtype),
                                         loader=tensor_loader)
        return DataLoader(dataset, **options)
    if name == "torchvision PIL":
        dataset = TorchvisionImageFolder(root, make_transform(group.pipeline, group.dtype,
                                                              pil=True))
        return DataLoader(dataset, **options)
    reduced_dct = "auto" if name in ("pimloader", SEEKABLE) else False
    # the emulator contender keeps the host's decode (its figures stay comparable across runs);
    # decode on the DPUs as well is python -m benchmarks.dpu_decode_chain's
    backend = {"backend": "emulator", "nr_dpus": 8, "nr_tasklets": 16, "decode_on_dpu": False} \
        if name == EMULATOR else {"backend": "cpu"}
    if name == SEEKABLE:
        root = seekable_copy(root)
    loader = PIMDataLoader(PimImageFolder(root), transform=make_transform(
        group.pipeline, group.dtype), reduced_dct=reduced_dct, **backend, **options)
    if loader._pipeline is None:
        raise RuntimeError("PIMDataLoader did not take the native image path")
    return loader


def seekable_copy(root: Path) -> Path:
    """`root` with its JPEGs rewritten with restart markers (same pixels), made once next to
    it and again whenever the files of `root` change."""
    copy = root.with_name(root.name + "_seekable")
    stamp = copy / ".seekable_of"
    files = sorted((str(path.relative_to(root)), path.stat().st_size, path.stat().st_mtime_ns)
                   for path in root.rglob("*") if path.is_file())
    wanted = json.dumps(files)
    if stamp.exists() and stamp.read_text() == wanted:
        return copy
    if copy.exists():
        shutil.rmtree(copy)
    progress, close_bar = reporter(f"seekable copy of {root.name}")
    try:
        make_seekable(root, copy, progress=progress)
    finally:
        close_bar()
    stamp.write_text(wanted)
    return copy


def run_epoch(loader: DataLoader, dtype: str) -> float:
    """Seconds to consume every batch, from creating the iterator to its end."""
    seen = 0
    start = time.perf_counter()
    for images, _targets in loader:
        if seen == 0 and (images.dtype != DTYPES[dtype] or images.shape[1:] != (3, 224, 224)):
            raise RuntimeError(f"{type(loader).__name__} gave {images.dtype} "
                               f"{tuple(images.shape)} batches")
        seen += images.shape[0]
    elapsed = time.perf_counter() - start
    if seen != len(loader.dataset):
        raise RuntimeError(f"{type(loader).__name__} gave {seen} of {len(loader.dataset)} images")
    return elapsed


def median_epoch(seconds: list[float]) -> int:
    """Index of the epoch whose time is the (lower) median."""
    ranked = sorted(range(len(seconds)), key=seconds.__getitem__)
    return ranked[(len(ranked) - 1) // 2]


def measure(root: Path, group: Group, batch_size: int, epochs: int, warmup: int) -> dict:
    names = contenders_for(group)
    loaders = {name: make_loader(name, root, group, batch_size) for name in names}
    seconds = {name: [] for name in names}
    stats = {name: [] for name in names}
    epochs_bar = bar(total=(warmup + epochs) * len(names), unit="epoch",
                     desc=f"{group.pipeline} {group.dtype} workers={group.workers_label()}")
    try:
        for repeat in range(warmup + epochs):
            for name in interleaved(names, repeat):
                epochs_bar.set_postfix_str(name)
                elapsed = run_epoch(loaders[name], group.dtype)
                epochs_bar.update()
                if repeat >= warmup:
                    seconds[name].append(elapsed)
                    if hasattr(loaders[name], "stats"):
                        stats[name].append(dataclasses.asdict(loaders[name].stats()[-1]))
    finally:
        epochs_bar.close()
        for loader in loaders.values():
            close_loader(loader)
    samples = len(loaders[names[0]].dataset)
    row = dataclasses.asdict(group)
    row["contenders"] = {}
    for name in names:
        times = seconds[name]
        entry = {"median_img_s": samples / statistics.median(times), "epoch_s": times}
        if stats[name]:
            entry["median_epoch_stats"] = stats[name][median_epoch(times)]
            entry["reduced_dct"] = loaders[name]._pipeline.images.reduced_dct
        row["contenders"][name] = entry
    base = row["contenders"][BASELINE]["median_img_s"]
    for entry in row["contenders"].values():
        entry["ratio"] = entry["median_img_s"] / base
    return row


# -- per-stage breakdown -------------------------------------------------------------------

def torchvision_breakdown(root: Path, pipeline: str, dtype: str, pil: bool, batch_size: int,
                          passes: int) -> dict:
    """ms per image of each stage, one thread, in this process: read, decode, each transform
    step, collate. Each pass covers the dataset; the figure is the median over passes of the
    stage's total time / images."""
    files = [path for path, _target in TorchvisionImageFolder(root).samples]
    steps = make_transform(pipeline, dtype, pil).transforms
    step_names = [type(step).__name__ for step in steps]
    per_pass: dict[str, list[float]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(passes):
            totals = dict.fromkeys(["read", "decode", *step_names, "collate"], 0.0)
            outputs = []
            for path in files:
                t0 = time.perf_counter()
                data = read_bytes(path)
                t1 = time.perf_counter()
                image = decode_pil(data) if pil else decode_rgb(data)
                t2 = time.perf_counter()
                totals["read"] += t1 - t0
                totals["decode"] += t2 - t1
                for name, step in zip(step_names, steps):
                    started = time.perf_counter()
                    image = step(image)
                    totals[name] += time.perf_counter() - started
                outputs.append((image, 0))
                if len(outputs) == batch_size:
                    started = time.perf_counter()
                    default_collate(outputs)
                    totals["collate"] += time.perf_counter() - started
                    outputs = []
            if outputs:
                started = time.perf_counter()
                default_collate(outputs)
                totals["collate"] += time.perf_counter() - started
            for name, total in totals.items():
                per_pass.setdefault(name, []).append(total / len(files) * 1e3)
    finally:
        torch.set_num_threads(threads)
    steps_ms = {name: statistics.median(per_pass[name]) for name in step_names}
    result = {"read": statistics.median(per_pass["read"]),
              "decode": statistics.median(per_pass["decode"]),
              "transform": sum(steps_ms.values()),
              "collate_or_write": statistics.median(per_pass["collate"]),
              "transform_steps": steps_ms}
    result["total"] = (result["read"] + result["decode"] + result["transform"]
                       + result["collate_or_write"])
    return result


def pimloader_breakdown(stats: dict) -> dict:
    """ms per image from loader.stats() of the median epoch (num_workers=0)."""
    samples = stats["samples"]
    return {"read": stats["fetch_s"] / samples * 1e3,
            "decode": stats["decode_s"] / samples * 1e3,
            "transform": None,
            "collate_or_write": stats["write_s"] / samples * 1e3,
            "total": stats["wait_s"] / samples * 1e3}


def breakdowns(root: Path, rows: list[dict], batch_size: int, passes: int) -> list[dict]:
    out = []
    for pipeline, dtype in PIPELINES:
        for name in TORCHVISION_CONTENDERS:
            if name == "torchvision PIL" and (dtype != "float32" or pipeline == "colour"):
                continue
            stages = torchvision_breakdown(root, pipeline, dtype, name.endswith("PIL"),
                                           batch_size, passes)
            out.append({"pipeline": pipeline, "dtype": dtype, "contender": name, **stages})
        for row in rows:
            if (row["pipeline"], row["dtype"], row["workers"]) != (pipeline, dtype, 0):
                continue
            for name in PIM_CONTENDERS:
                entry = row["contenders"].get(name)
                if entry is not None:
                    out.append({"pipeline": pipeline, "dtype": dtype, "contender": name,
                                **pimloader_breakdown(entry["median_epoch_stats"])})
    return out


# -- report --------------------------------------------------------------------------------

def format_table(rows: list[dict]) -> str:
    header = (f"{'pipeline':>8} {'contender':>18} {'workers':>8} {'dtype':>8} "
              f"{'img/s':>7} {'ratio':>6}")
    lines = [header, "-" * len(header)]
    for row in rows:
        workers = Group(row["pipeline"], row["dtype"], row["workers"],
                        row["persistent"]).workers_label()
        for name, entry in row["contenders"].items():
            lines.append(f"{row['pipeline']:>8} {name:>18} {workers:>8} {row['dtype']:>8} "
                         f"{entry['median_img_s']:7.0f} {entry['ratio']:6.2f}")
    if any(EMULATOR in row["contenders"] for row in rows):
        lines.append(EMULATOR_NOTE)
    return "\n".join(lines)


def format_breakdown(entries: list[dict]) -> str:
    header = (f"{'pipeline':>8} {'contender':>18} {'dtype':>8} {'read':>6} {'decode':>7} "
              f"{'transform':>9} {'coll/write':>10} {'total':>6}")
    lines = ["ms per image (torchvision: 1 thread in-process; pimloader: stats() of the "
             "median num_workers=0 epoch,", "read = read file + header + parameter draw, "
             "transform fused into write, total = wait_s):", header, "-" * len(header)]
    for entry in entries:
        transform = ("fused" if entry["transform"] is None else f"{entry['transform']:.3f}")
        lines.append(f"{entry['pipeline']:>8} {entry['contender']:>18} {entry['dtype']:>8} "
                     f"{entry['read']:6.3f} {entry['decode']:7.3f} {transform:>9} "
                     f"{entry['collate_or_write']:10.3f} {entry['total']:6.3f}")
    steps = [entry for entry in entries if "transform_steps" in entry]
    if steps:
        lines.append("transform steps (ms per image):")
        for entry in steps:
            parts = ", ".join(f"{name} {ms:.3f}" for name, ms in entry["transform_steps"].items())
            lines.append(f"  {entry['pipeline']} {entry['contender']} {entry['dtype']}: {parts}")
    return "\n".join(lines)


def environment() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, **machine(),
            "torch_threads": torch.get_num_threads(),
            "pimloader_import_error": PIMLOADER_IMPORT_ERROR}


def dataset_summary(root: Path) -> dict:
    manifest = json.loads((root / "manifest.json").read_text())
    files = manifest["files"]
    return {"root": str(root), "files": len(files),
            "mean_bytes": statistics.mean(entry["bytes"] for entry in files),
            "mean_pixels": statistics.mean(entry["width"] * entry["height"] for entry in files),
            "params": manifest["params"]}


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    window = RunWindow()
    rows = []
    for group in groups(args.workers, args.fresh_workers):
        rows.append(measure(root, group, args.batch_size, args.epochs, args.warmup))
        print(f"  measured {group.pipeline} {group.dtype} workers={group.workers_label()} "
              f"({window.elapsed():.0f} s)", flush=True)
    stages = breakdowns(root, rows, args.batch_size, args.breakdown_passes)
    settings = {key: (str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items() if key not in ("out", "quick")}
    return {"benchmark": "imagenet_pipeline", "settings": settings,
            "date": local_date(),
            "environment": {**environment(), **window.load_and_wall()},
            "dataset": dataset_summary(root), "rows": rows, "breakdown": stages}


def report(results: dict) -> None:
    settings, env = results["settings"], results["environment"]
    print(f"ImageNet pipelines: {results['dataset']['files']} files, batch "
          f"{settings['batch_size']}, median of {settings['epochs']} epochs after "
          f"{settings['warmup']} warm-up, {env['cpus']} CPUs, load "
          f"{env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}")
    print("workers: 2 = persistent_workers=True, '2 fresh' = new workers every epoch; "
          "ratio = img/s / torchvision's in the same group")
    print(format_table(results["rows"]))
    if PIMDataLoader is None:
        print(f"no pimloader rows: {PIMLOADER_IMPORT_ERROR}")
    print(format_breakdown(results["breakdown"]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.imagenet_pipeline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500,
                        help="files in the ImageNet-like folder (default: %(default)s)")
    parser.add_argument("--classes", type=int, default=10,
                        help="class folders (default: %(default)s)")
    parser.add_argument("--data", type=Path,
                        help="folder of the dataset (default: results/data/imagenet_like, "
                             "or imagenet_like_quick with --quick; made if missing)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="batch_size of every loader (default: %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2],
                        help="worker counts; those > 0 run with persistent_workers=True "
                             "(default: %(default)s)")
    parser.add_argument("--no-fresh-workers", dest="fresh_workers", action="store_false",
                        help="skip the training float32 rows with persistent_workers=False")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads() of this process, which runs the "
                             "num_workers=0 rows (workers always use 1, as torch sets); "
                             "default 1: on a shared 2-core machine a 2-thread pool slowed "
                             "torch's transforms 4-8x (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=5,
                        help="timed epochs per contender and group (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed epochs before them (default: %(default)s)")
    parser.add_argument("--breakdown-passes", type=int, default=3,
                        help="passes over the dataset for the torchvision breakdown "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the dataset and of torch's RNG (default: %(default)s)")
    parser.add_argument("--out", type=Path,
                        help="JSON file for the results (default: results/latest/imagenet_pipeline"
                             ".json, or imagenet_pipeline.quick.json with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny smoke-test settings: {QUICK}")
    args = settle(parser.parse_args(argv), "imagenet_pipeline", QUICK, data="imagenet_like")
    if args.epochs < 1 or args.count < 1 or args.breakdown_passes < 1:
        parser.error("--epochs, --count and --breakdown-passes must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
