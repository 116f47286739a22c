"""Detection pipelines: images/s of PIMDataLoader against torch's DataLoader + torchvision v2.

The COCO-format set of real photographs from make_detection_dataset.py, read through three
torchvision v2 pipelines (the detection references' recipes, at their sizes):

- "faster-rcnn": ToImage, RandomHorizontalFlip, Resize(800, max_size=1333),
  ToDtype(float32, scale=True), Normalize (what GeneralizedRCNNTransform then does);
- "ssd": ToImage, RandomPhotometricDistort, RandomZoomOut(fill per type), RandomIoUCrop,
  RandomHorizontalFlip, Resize((300, 300)), SanitizeBoundingBoxes, ToDtype, Normalize;
- "ssd-geometry": the same without RandomPhotometricDistort.

Contenders, all with the references' `collate_fn=lambda batch: tuple(zip(*batch))`, the
same sampler and batch size: "torchvision" (torch's DataLoader over torchvision's
CocoDetection wrapped for v2, PIL decode then the transforms), "pimloader" (PIMDataLoader
over pimloader.datasets.CocoDetection, cpu backend), and with 0 workers "pim emulator*"
(the DPU kernel on pimloader's libdpu emulator: a correctness test bed, its speed is not
DPU speed). Each group runs its contenders one epoch each in rotating order, medians over
the timed epochs; with workers, persistent_workers=True. Then ms per image by stage, in
this process with one thread. Writes results/latest/detection.json and, but for --quick, the
plot results/latest/detection.png (benchmarks/plot_tasks.py; results/ and docs/ when
refreshing, harness.py).

    python -m benchmarks.detection --count 200 --epochs 3 [--quick] [--plot FILE.png]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from benchmarks import peer_dali_detection as dali_detection
from benchmarks.harness import (RunWindow, interleaved, machine, plots_dir, results_path,
                                run_benchmark, silenced, utc_date, warnings_once)
from benchmarks.make_detection_dataset import DEFAULT_ROOT, make_detection_dataset
from benchmarks.plot_tasks import draw_detection
from benchmarks.progress import bar
from pimloader import PIMDataLoader, decode
from pimloader.datasets import CocoDetection
from pimloader.transforms.probe import for_probe, run_on_probe

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
EMULATOR = "pim emulator*"


def faster_rcnn():
    return v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(),
                       v2.Resize(800, max_size=1333), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def ssd_geometry():
    return v2.Compose([v2.ToImage(),
                       v2.RandomZoomOut(fill={tv_tensors.Image: (123, 117, 104), "others": 0}),
                       v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((300, 300)),
                       v2.SanitizeBoundingBoxes(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def ssd():
    steps = ssd_geometry().transforms
    return v2.Compose([steps[0], v2.RandomPhotometricDistort(), *steps[1:]])


PIPELINES = {"faster-rcnn": faster_rcnn, "ssd": ssd, "ssd-geometry": ssd_geometry}


def collate(batch):
    return tuple(zip(*batch))


def make_loader(contender: str, root: str, ann_file: str, make, workers: int, batch_size: int,
                sampler):
    common = dict(batch_size=batch_size, num_workers=workers, collate_fn=collate,
                  sampler=sampler, persistent_workers=workers > 0)
    if contender == "torchvision":
        dataset = torchvision.datasets.wrap_dataset_for_transforms_v2(
            silenced(torchvision.datasets.CocoDetection, root, ann_file, transforms=make()))
        return DataLoader(dataset, **common)
    if contender == dali_detection.NAME:
        return dali_detection.loader(make, root, ann_file, workers, batch_size, len(sampler))
    backend = "emulator" if contender == EMULATOR else "cpu"
    return PIMDataLoader(CocoDetection(root, ann_file, transforms=make()), backend=backend,
                         **common)


def epoch(loader) -> float:
    started, images = time.perf_counter(), 0
    for batch_images, _ in loader:
        images += len(batch_images)
    return images / (time.perf_counter() - started)


def run_group(contenders, root, ann_file, make, workers, args, desc: str) -> dict:
    sampler = list(range(args.count))
    loaders = {name: make_loader(name, root, ann_file, make, workers, args.batch_size, sampler)
               for name in contenders}
    rates = {name: [] for name in contenders}
    rounds = args.warmup + args.epochs
    with bar(total=rounds * len(contenders), desc=desc, unit="epoch") as epochs:
        for round_ in range(rounds):
            for name in interleaved(contenders, round_):
                epochs.set_postfix_str(name)
                rate = epoch(loaders[name])
                if round_ >= args.warmup:
                    rates[name].append(rate)
                epochs.update()
    kernel = {}
    for name, loader in loaders.items():
        if isinstance(loader, PIMDataLoader):
            kernel[name] = loader.stats()[-1].kernel_samples / args.count
            loader.close()
    return {name: statistics.median(values) for name, values in rates.items()}, kernel


def stages(root, ann_file, make, count: int) -> dict:
    """ms per image of each stage, this process, one thread: torchvision's PIL load and
    transforms; pimloader's read + header + target, probe run, decode, kernel."""
    theirs = silenced(torchvision.datasets.CocoDetection, root, ann_file)
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(theirs)
    ours = CocoDetection(root, ann_file, transforms=make())
    transforms, on_probe = make(), for_probe(make())
    times = dict.fromkeys(["tv load", "tv transforms", "pim read+target", "pim probe",
                           "pim decode+kernel"], 0.0)
    for index in bar(range(count), desc="stages", unit="image"):
        started = time.perf_counter()
        image, target = wrapped[index]
        loaded = time.perf_counter()
        transforms(image, target)
        times["tv load"] += loaded - started
        times["tv transforms"] += time.perf_counter() - loaded
        started = time.perf_counter()
        encoded = ours.reader(index)
        size = decode.image_size(encoded.data)
        target = ours.target(index, encoded.target, size)
        read = time.perf_counter()
        if on_probe is not None:
            run_on_probe(on_probe, target, *size)
        probed = time.perf_counter()
        ours_sample_seconds = _timed_sample(ours, index)
        times["pim read+target"] += read - started
        times["pim probe"] += probed - read
        times["pim decode+kernel"] += max(0.0, ours_sample_seconds - (probed - started))
    return {name: 1000 * seconds / count for name, seconds in times.items()}


def _timed_sample(dataset, index: int) -> float:
    """Seconds pimloader's pipeline takes for one whole sample (as PIMDataLoader runs it)."""
    from pimloader.backends.select import CPU, Backends
    from pimloader.pipelines.detection import build
    from pimloader.options import PipelineOptions
    if not hasattr(_timed_sample, "cache"):
        backends = Backends()
        _timed_sample.cache = {}, backends
    pipelines, backends = _timed_sample.cache
    if id(dataset) not in pipelines:
        pipelines[id(dataset)] = build(dataset, None, PipelineOptions(backend="cpu"))
    started = time.perf_counter()
    pipeline = pipelines[id(dataset)]
    _, pending = pipeline.prepare(index)
    pipeline.render([pending] if pending is not None else [], backends.router(CPU))
    return time.perf_counter() - started


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES))
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--quick", action="store_true", help="tiny settings (a smoke run)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON results (default: results/latest/detection[.quick].json)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG to draw (default: results/latest/detection.png; none with "
                             "--quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.epochs, args.warmup, args.workers = 16, 1, 0, [0]
    elif args.plot is None:
        args.plot = plots_dir() / "detection.png"
    return args


def run(args: argparse.Namespace) -> dict:
    ann_file = make_detection_dataset(args.root, count=max(args.count, 16), seed=0)
    root = str(Path(args.root) / "images")
    window = RunWindow()
    settings = {key: str(value) if isinstance(value, Path) else value
                for key, value in vars(args).items() if key != "plot"}
    report = {"settings": settings, "groups": [], "stages": {}}
    print(f"detection pipelines, {args.count} images, batch {args.batch_size}; images/s "
          f"(median of {args.epochs} epochs), ratio to torchvision in the same run")
    for name in args.pipelines:
        make = PIPELINES[name]
        for workers in args.workers:
            contenders = (["torchvision", "pimloader"] + ([EMULATOR] if workers == 0 else [])
                          + dali_detection.contenders(make))
            rates, kernel = run_group(contenders, root, ann_file, make, workers, args,
                                      desc=f"{name} workers={workers}")
            base = rates["torchvision"]
            cells = ", ".join(f"{c} {rates[c]:.1f} ({rates[c] / base:.2f}x)" for c in contenders)
            print(f"  {name:13s} workers={workers}: {cells}; fused kernel made "
                  f"{kernel['pimloader']:.0%} of the images", flush=True)
            report["groups"].append({"pipeline": name, "workers": workers, "images_per_s": rates,
                                     "kernel_fraction": kernel})
        report["stages"][name] = stages(root, ann_file, make, min(args.count, 24))
        print("    ms/image: " + ", ".join(f"{stage} {ms:.1f}"
                                           for stage, ms in report["stages"][name].items()))
    print(f"  * {EMULATOR}: the DPU kernel on pimloader's libdpu emulator (a test bed, not "
          "DPU speed); samples that pad run on the CPU kernel")
    report["environment"] = {**machine(), **window.load_and_wall(), "date": utc_date()}
    return report


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    with warnings_once():   # --out resolved here: run() records the flags as given
        return run_benchmark(args, run, plot=draw_detection,
                             out=args.out or results_path("detection", args.quick))


if __name__ == "__main__":
    main()
