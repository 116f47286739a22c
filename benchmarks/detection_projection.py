"""PROJECTED DPU throughput of the detection pipelines, from emulator counts and the cost model.

No DPU hardware is reachable: nothing here measures a DPU. For the Faster R-CNN-style
pipeline (flip, shortest side 800 / max 1333, float32, normalize) and the SSD-style
geometry (zoom-out, IoU crop, flip, 300x300, sanitize, float32, normalize) of
benchmarks/detection.py, over the offline COCO-format set:

- each sample is prepared as PIMDataLoader prepares it (pipelines/detection.py: the
  transforms run on the image probe, torchvision's draws; the decode of what the geometry
  reads), MEASURED here per image on one core (CPU time);
- samples whose geometry pads (zoom-out canvases) cannot run on the DPU kernel: they run on
  the host's CPU kernel, MEASURED here per image, and are charged to the host; for them the
  bytes a DPU would be sent, canvas filled by the host or source pixels only, are reported
  (`costmodel.canvas_bytes`);
- the others are grouped by output size (the driver launches one size at a time) and each
  group is run through the DPU driver on pimloader's libdpu emulator, `--dpus` DPUs x
  `--images-per-dpu` images, whose COUNTED DMAs and transfer lengths
  `pimloader.costmodel.project` turns into PROJECTED per-launch times for a 64-DPU rank, a
  640-DPU and a 2,560-DPU system, best / nominal / worst (docs/cost_model.md);
- `costmodel.combine` weighs the groups by their shares and bounds the DPU path by the
  host's work (probe, decode, padded samples on `--host-cores`, scaled linearly: assumed).

    python -m benchmarks.detection_projection [--dpus 16] [--images-per-dpu 2] [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from benchmarks.detection import faster_rcnn, ssd_geometry
from benchmarks.dpu_projection import host_copy_bandwidth
from benchmarks.harness import results_path, write_results
from benchmarks.make_detection_dataset import DEFAULT_ROOT, make_detection_dataset
from benchmarks.progress import bar
from pimloader import costmodel as cm
from pimloader import decode
from pimloader.backends import kernels as K
from pimloader.backends.base import KernelRun
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.datasets import CocoDetection
from pimloader.pipelines.detection import build
from pimloader.options import PipelineOptions
from pimloader.transforms.probe import run_on_probe

PIPELINES = {"faster-rcnn": faster_rcnn, "ssd-geometry": ssd_geometry}
QUICK = {"count": 16, "dataset_count": 16, "dpus": 4, "images_per_dpu": 1}
LABEL = "PROJECTED"


def prepare(pipeline_name: str, root: str, ann_file: str, count: int):
    """Each sample's Pending (geometry, decoded pixels, box, table) as the loader makes it,
    the MEASURED CPU seconds per image of preparing it (read, probe, decode), and of the
    probe run alone (torchvision's draws and box, mask and label ops)."""
    dataset = CocoDetection(root, ann_file, transforms=PIPELINES[pipeline_name]())
    pipeline = build(dataset, None, PipelineOptions(backend="cpu"))
    torch.manual_seed(0)
    pendings, started = [], time.thread_time()
    for index in range(count):
        _, pending = pipeline.prepare(index)
        if pending is not None:
            pendings.append(pending)
    prepare_s = (time.thread_time() - started) / count
    probe_s = 0.0
    for index in range(count):
        encoded = dataset.reader(index)
        size = decode.image_size(encoded.data)
        target = dataset.target(index, encoded.target, size)
        started = time.thread_time()
        run_on_probe(pipeline.on_probe, target, *size)
        probe_s += time.thread_time() - started
    return pendings, prepare_s, probe_s / count


def run_of(pendings, out: torch.Tensor) -> KernelRun:
    return KernelRun([p.pixels for p in pendings], [p.box for p in pendings],
                     pendings[0].geometry.size, out, [p.geometry for p in pendings], "NCHW",
                     pendings[0].lut)


def cpu_kernel_seconds(pendings: list) -> float:
    """MEASURED CPU seconds per image of the host's CPU kernel on `pendings`."""
    if not pendings:
        return 0.0
    started = time.thread_time()
    for pending in pendings:
        out = torch.empty(1, 3, *pending.geometry.size, dtype=pending.dtype)
        run = run_of([pending], out)
        K.resized_crop_batch(run.sources, run.boxes, run.size, out, **run.kernel_arguments())
    return (time.thread_time() - started) / len(pendings)


def emulate_group(pendings: list, driver: DpuDriver, images: int) -> cm.DpuRun:
    """One emulated launch of `images` images of one output size (cycling through the
    group's samples), and what the emulator counted."""
    chosen = [pendings[i % len(pendings)] for i in range(images)]
    out = torch.empty(len(chosen), 3, *chosen[0].geometry.size, dtype=chosen[0].dtype)
    run = run_of(chosen, out)
    arguments = run.kernel_arguments()
    driver.reset_counters()
    driver.run(run.sources, run.boxes, run.size, out, **arguments)
    packed, _ = K.pack_batch(run.sources, run.boxes, run.size, out_dtype=out.dtype,
                             **{k: v for k, v in arguments.items() if k != "lut"})
    return cm.DpuRun.from_backend(driver, packed)


def project_pipeline(name: str, root: str, ann_file: str, args, driver) -> dict:
    pendings, prepare_s, probe_s = prepare(name, root, ann_file, args.count)
    padded = [p for p in pendings if p.geometry.padding is not None]
    unpadded = [p for p in pendings if p.geometry.padding is None]
    cpu_s, cpu_unpadded_s = cpu_kernel_seconds(padded), cpu_kernel_seconds(unpadded)
    by_size = defaultdict(list)
    for pending in unpadded:
        by_size[pending.geometry.size].append(pending)
    launches = []
    for size, group in sorted(by_size.items(), key=lambda item: -len(item[1])):
        run = emulate_group(group, driver, args.dpus * args.images_per_dpu)
        launches.append({"size": size, "share": len(group) / len(pendings), "run": run,
                         "per_image": run.per_image(), "work_per_image": {
                             unit: float(value) / run.n_images
                             for unit, value in zip(cm.WORK, sum(w.total for w in run.work))}})
    # the host: prepare every image, run the padded ones, copy each DPU image's crop into
    # its chunk and its output into the batch (memcpy, MEASURED bandwidth)
    copied = sum(launch["share"] * (launch["run"].in_real_bytes + launch["run"].out_real_bytes)
                 / launch["run"].n_images for launch in launches)
    host_s = prepare_s + cpu_s * len(padded) / len(pendings) + copied / args.copy_bandwidth
    cpu_only_s = prepare_s + (cpu_s * len(padded) + cpu_unpadded_s * len(unpadded)) / len(pendings)
    combined = []
    for system in cm.SYSTEMS:
        for case in cm.CASES:
            projections = [cm.project(launch["run"], system, case=case) for launch in launches]
            groups = [cm.SizeGroup(launch["size"], launch["share"], p.images_per_s)
                      for launch, p in zip(launches, projections)]
            combined.append({"system": system.name, "case": case,
                             **cm.combine(groups, host_s, args.host_cores),
                             "groups": [{"size": g.size, "share": g.share,
                                         "images_per_s": g.images_per_s, "bound": p.bound}
                                        for g, p in zip(groups, projections)]})
    canvases = [cm.canvas_bytes(p.geometry) for p in padded]
    return {"pipeline": name, "images": len(pendings), "padded_share": len(padded) / len(pendings),
            "prepare_cpu_s_per_image": prepare_s, "probe_cpu_s_per_image": probe_s,
            "cpu_kernel_s_per_padded_image": cpu_s,
            "cpu_kernel_s_per_unpadded_image": cpu_unpadded_s,
            "host_copy_s_per_image": copied / args.copy_bandwidth, "host_s_per_image": host_s,
            "cpu_only_images_per_s": args.host_cores / cpu_only_s,
            "padded_bytes_per_image": {
                "canvas": statistics.mean(c for c, _ in canvases) if canvases else 0,
                "source": statistics.mean(s for _, s in canvases) if canvases else 0},
            "launches": [{k: v for k, v in launch.items() if k != "run"} for launch in launches],
            "projections": combined}


def report(results: dict) -> None:
    print(f"ALL DPU FIGURES BELOW ARE {LABEL} (pimloader.costmodel, no DPU hardware): "
          f"{results['settings']['dpus']} emulated DPUs x {results['settings']['images_per_dpu']}"
          f" images per launch and size; host work MEASURED here (one core, CPU time), "
          f"scaled to {results['settings']['host_cores']} cores; load "
          f"{results['load'][0]:.1f} -> {results['load'][1]:.1f}")
    for entry in results["pipelines"]:
        print(f"  {entry['pipeline']}: {entry['images']} images, "
              f"{entry['padded_share']:.0%} pad (zoom-out: host CPU kernel, "
              f"{entry['cpu_kernel_s_per_padded_image'] * 1e3:.1f} ms each); host "
              f"{entry['host_s_per_image'] * 1e3:.1f} ms per image (read, probe "
              f"{entry['probe_cpu_s_per_image'] * 1e3:.1f}, decode, padded samples, copies "
              f"{entry['host_copy_s_per_image'] * 1e3:.1f}); CPU kernel on the others "
              f"{entry['cpu_kernel_s_per_unpadded_image'] * 1e3:.1f} ms each; the host "
              f"alone (CPU kernel for all): {entry['cpu_only_images_per_s']:.0f} img/s")
        if entry["padded_share"]:
            sizes = entry["padded_bytes_per_image"]
            print(f"    a zoom-out sample would send a DPU {sizes['canvas'] / 1e3:.0f} kB with "
                  f"the canvas filled by the host, {sizes['source'] / 1e3:.0f} kB of source "
                  f"pixels if the kernel padded")
        for launch in entry["launches"]:
            per = launch["per_image"]
            print(f"    size {launch['size'][0]}x{launch['size'][1]} ({launch['share']:.0%}): "
                  f"per image H->D {per['host_to_dpu_bytes'] / 1e3:.0f} kB, D->H "
                  f"{per['dpu_to_host_bytes'] / 1e3:.0f} kB, MRAM DMA/least "
                  f"{per['dma_ratio']:.2f}")
        for p in entry["projections"]:
            if p["case"] != "nominal":
                continue
            bounds = sorted({g["bound"] for g in p["groups"]})
            print(f"    {p['system']:<10} nominal: DPU path {p['dpu_images_per_s']:.0f} img/s "
                  f"({', '.join(bounds)}), host {p['host_images_per_s']:.0f}, "
                  f"end to end {p['images_per_s']:.0f} ({p['bound']})")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.detection_projection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=48,
                        help="images of the detection set projected (its first ones)")
    parser.add_argument("--dataset-count", type=int, default=200,
                        help="images the set is made with: benchmarks.detection's default, so "
                             "that the two share one set (default: %(default)s)")
    parser.add_argument("--dpus", type=int, default=16, help="emulated DPUs per launch")
    parser.add_argument("--tasklets", type=int, default=16)
    parser.add_argument("--images-per-dpu", type=int, default=2,
                        help="images per DPU and launch (a 10 MB float32 output each)")
    parser.add_argument("--host-cores", type=int, default=os.cpu_count())
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help=f"smoke-test settings: {QUICK}")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if min(args.count, args.dpus, args.images_per_dpu, args.host_cores) < 1:
        parser.error("--count, --dpus, --images-per-dpu and --host-cores must be >= 1")
    if args.out is None:
        args.out = results_path("detection_projection", args.quick)
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    ann_file = make_detection_dataset(args.root, count=max(args.count, args.dataset_count),
                                      seed=0)
    root = str(Path(args.root) / "images")
    load_before = os.getloadavg()
    args.copy_bandwidth = host_copy_bandwidth()
    with DpuDriver(args.dpus, args.tasklets) as driver:
        entries = [project_pipeline(name, root, str(ann_file), args, driver)
                   for name in bar(PIPELINES, desc="detection projection", unit="pipeline")]
    results = {"benchmark": "detection_projection", "label": LABEL,
               "settings": {k: str(v) if isinstance(v, Path) else v
                            for k, v in vars(args).items()},
               "date": time.strftime("%Y-%m-%d %H:%M %Z"),
               "load": (load_before[0], os.getloadavg()[0]),
               "note": "DPU rates are PROJECTED by pimloader.costmodel from emulator counts; "
                       "host times are measured here", "assumptions": cm.Assumptions().table(),
               "pipelines": entries}
    report(results)
    write_results(results, args.out, default=_plain)
    return results


def _plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else str(value)


if __name__ == "__main__":
    main()
