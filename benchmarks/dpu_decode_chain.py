"""JPEG decode and transform on the same (emulated) DPUs: the whole loader, and what a run moves.

On the benchmark dataset's seekable copy (benchmarks/make_dataset.py, made seekable with
`make_seekable`, as `python -m benchmarks` makes it):

- the loader with `backend="emulator", decode_on_dpu=True` against `backend="cpu"`, same
  seeds, training (RandomResizedCrop 224, flip) and validation (Resize 256, CenterCrop 224)
  pipelines, float32 normalised: whether every batch is identical, and where each sample was
  decoded (`stats()`: on DPUs, or on the host by reason);
- host<->DPU bytes per image of one run of validation-style centre crops, decoded on the host
  (pixels sent) and on the DPUs (compressed intervals sent): the emulator's counters for the
  kernel's stage, the decode stage's own push and gather (`DecodeStage.last_transfer`).

Counts and equality, not time: the emulator's speed is not DPU speed (docs/dpu.md). Part of
`python -m benchmarks` (about 15 s), after decode_projection.

    python -m benchmarks.dpu_decode_chain [--quick] [--data DIR] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torchvision.transforms.v2 as v2
from PIL import Image

from benchmarks.harness import results_path
from benchmarks.imagenet_pipeline import seekable_copy
from benchmarks.make_dataset import DATA_DIR, QUICK, make_imagenet_like
from pimloader import PIMDataLoader
from pimloader.backends.base import IMAGES, EncodedImage, KernelRun
from pimloader.backends.dpu import jpeg as DJ
from pimloader.backends.dpu.backend import DpuBackend
from pimloader.datasets import ImageFolder
from pimloader.decode import decode_jpeg
from pimloader.transforms.params import Geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = {
    "training": v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "validation": v2.Compose([v2.Resize(256), v2.CenterCrop(224),
                              v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
}
NR_DPUS, NR_TASKLETS, BATCH = 16, 16, 64


def loader_batches(root: Path, transform, **options):
    torch.manual_seed(5)
    loader = PIMDataLoader(ImageFolder(root), batch_size=BATCH, shuffle=True, transform=transform,
                           generator=torch.Generator().manual_seed(3), **options)
    return list(loader), loader


def whole_loader(root: Path) -> dict:
    results = {}
    for name, transform in PIPELINES.items():
        expected, _ = loader_batches(root, transform, backend="cpu")
        actual, loader = loader_batches(root, transform, backend="emulator", nr_dpus=NR_DPUS,
                                        nr_tasklets=NR_TASKLETS, decode_on_dpu=True)
        identical = len(actual) == len(expected) and all(
            torch.equal(a[0], e[0]) and torch.equal(a[1], e[1]) for a, e in zip(actual, expected))
        stats = loader.stats()[-1]
        results[name] = {"batches": len(actual), "samples": stats.samples, "identical": identical,
                         "decoded_on_dpus": stats.dpu_decoded_samples,
                         "host_fallbacks": stats.decode_fallbacks}
        print(f"{name}: {len(actual)} batches of {stats.samples} samples, identical to backend='cpu': "
              f"{identical}; decoded on DPUs {stats.dpu_decoded_samples}, on the host {stats.decode_fallbacks}",
              flush=True)
    return results


def centre_crops(root: Path, count: int, size=(224, 224)):
    """(files, boxes, geometries) of `count` colour JPEGs the DPUs take: centre squares of
    7/8 of the shorter side."""
    files, boxes, geometries = [], [], []
    for path in sorted(root.rglob("*.JPEG")):
        data = path.read_bytes()
        with Image.open(path) as image:
            if image.format != "JPEG" or image.mode != "RGB" or DJ.fallback_reason(data) is not None:
                continue
            width, height = image.size
        side = min(width, height) * 7 // 8
        box = ((height - side) // 2, (width - side) // 2, side, side)
        files.append((str(path), data))
        boxes.append(box)
        geometries.append(Geometry(box, size, (0, 0, *size), source=(height, width)))
        if len(files) == count:
            break
    return files, boxes, geometries


def transfers(root: Path, count: int = BATCH, size=(224, 224)) -> dict:
    """Host<->DPU bytes per image of one run of `count` centre crops."""
    files, boxes, geometries = centre_crops(root, count, size)
    backend = DpuBackend(8, NR_TASKLETS, decode=True)
    n = len(files)
    results = {"images": n, "file_kb": sum(len(data) for _, data in files) / n / 1e3}
    try:
        host = ([decode_jpeg(data) for _, data in files], boxes)
        dpus = ([EncodedImage(data, name, box) for (name, data), box in zip(files, boxes)],
                [(0, 0, *box[2:]) for box in boxes])
        for label, (sources, run_boxes) in (("decode on the host", host), ("decode on the DPUs", dpus)):
            for source in sources:
                if isinstance(source, EncodedImage) and backend.kernel_for(IMAGES).decode_refusal(source):
                    raise SystemExit(f"{source.name}: the DPUs refuse it")
            out = torch.empty(n, 3, *size, dtype=torch.uint8)
            backend.driver.reset_counters()
            loads = backend.driver.loads()
            backend.submit(KernelRun(sources, run_boxes, size, out, geometries)).wait()
            counters = backend.driver.counters()   # the kernel's stage (dpu_load resets them)
            stage = backend.decoder.last_transfer if label.endswith("DPUs") else {"to_dpus": 0, "from_dpus": 0}
            row = {"host_to_dpu_kb": (counters.host_to_dpu_bytes + stage["to_dpus"]) / n / 1e3,
                   "decode_stage_host_to_dpu_kb": stage["to_dpus"] / n / 1e3,
                   "dpu_to_host_kb": (counters.dpu_to_host_bytes + stage["from_dpus"]) / n / 1e3,
                   "dpu_loads": backend.driver.loads() - loads}
            results[label] = row
            print(f"{label}: host->DPU {row['host_to_dpu_kb']:.1f} kB/image (decode stage "
                  f"{row['decode_stage_host_to_dpu_kb']:.1f}), DPU->host {row['dpu_to_host_kb']:.1f} kB/image, "
                  f"dpu_load calls {row['dpu_loads']}", flush=True)
    finally:
        backend.close()
    print(f"files: {results['file_kb']:.1f} kB/image on average", flush=True)
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpu_decode_chain",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"a folder of {QUICK['count']} files, one run of 16")
    parser.add_argument("--data", type=Path, help="dataset folder (default: results/data/imagenet_like[_quick])")
    parser.add_argument("--out", type=Path, help="JSON results (default: "
                        "results/latest/dpu_decode_chain[.quick].json)")
    args = parser.parse_args(argv)
    args.out = args.out or results_path("dpu_decode_chain", args.quick)
    sizes = QUICK if args.quick else {"count": 500, "classes": 10}
    data = args.data or DATA_DIR / ("imagenet_like_quick" if args.quick else "imagenet_like")
    seekable = seekable_copy(make_imagenet_like(data, **sizes))
    results = {"whole_loader": whole_loader(seekable),
               "transfers": transfers(seekable, 16 if args.quick else BATCH)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
