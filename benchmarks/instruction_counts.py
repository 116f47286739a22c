"""Instructions of the DPU crop/resize kernel COUNTED on a proxy ISA, beside the cost model's
assumed figures.

For each pipeline of benchmarks.dpu_projection (training float32 and float16, validation
float32) on the benchmark dataset, one batch runs through `DpuDriver` on the emulator with
its MRAM traced (DPUEMU_TRACE_DIR); every traced DPU run is then replayed by the kernel
compiled for RV32IM and for RV32EM (pimloader.costmodel.proxy) and must leave MRAM equal to
the emulator's. From the counts:

- instructions per image and per DPU, counted, against the cost model's best / nominal /
  worst prediction for the same launches (the work counted from the driver's own plan);
- the instructions per unit of work (h_mac, v_mac, emit, ...) fitted to the per-tasklet
  counts (non-negative least squares), beside the assumed ones;
- the kernel's static size against the DPU's 4,096-instruction IRAM, at -O2 and -Os;
- the brackets for how the proxy differs from the DPU ISA (docs/cost_model.md).

Needs riscv64-unknown-elf-gcc (Debian: gcc-riscv64-unknown-elf); without it, says so.

    python -m benchmarks.instruction_counts [--quick] [--images-per-dpu 4] [--tasklets 16]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.dpu_projection import PIPELINES, image_files, measure
from benchmarks.harness import results_path, write_results
from benchmarks.make_dataset import DEFAULT_ROOT, QUICK, make_imagenet_like
from benchmarks.progress import bar
from pimloader import costmodel as cm
from pimloader.backends import kernels as K
from pimloader.backends.dpu.driver import KERNEL_SOURCE as KERNEL, DpuDriver
from pimloader.costmodel import proxy
from pimloader.costmodel.counted import BRACKETS, WANTED, class_weights, fits
from pimloader.costmodel.work import WORK

# The figures the cost model assumed before they were counted (read from the C source), kept
# for comparison: best, nominal, worst.
ASSUMED_BEFORE = {"h_mac": (5, 6, 20), "h_out": (6, 9, 14), "v_mac": (7, 9, 23), "v_init": (1, 2, 3),
                  "v_finish": (5, 7, 9), "emit": (5, 8, 12), "row": (25, 40, 80), "column": (6, 10, 15),
                  "sample_load": (100, 150, 400), "dma_call": (5, 10, 20)}
def count(run_batch, driver, elves: dict, simulator: str) -> dict:
    """One batch: emulated with its MRAM traced, replayed on every proxy build; per bracket,
    each tasklet's DPU instructions by source function, beside the cost model's work."""
    trace = tempfile.mkdtemp(prefix="pimloader-trace-")
    os.environ["DPUEMU_TRACE_DIR"] = trace
    try:
        run = run_batch(driver)
        launches = proxy.traced_launches(trace)
        replays = {isa: [proxy.replay(elf, launch, simulator=simulator) for launch in launches]
                   for isa, elf in elves.items()}
    finally:
        del os.environ["DPUEMU_TRACE_DIR"]
        shutil.rmtree(trace, ignore_errors=True)
    assumptions = cm.Assumptions()
    predicted = {case: sum(cm.model.compute_cycles(w, float(run.read_calls[d] + run.write_calls[d]),
                                                   assumptions, case)[1] for d, w in enumerate(run.work))
                 for case in cm.CASES}
    functions = {isa: proxy.by_source_function(elves[isa], rs, WANTED) for isa, rs in replays.items()}
    per_function = {case: [{name: (table @ class_weights(b)).tolist() for name, table in per.items()}
                           for per in functions[b["isa"]]] for case, b in BRACKETS.items()}
    rv32im = replays["rv32im"]
    return {"images": run.n_images, "dpus": run.active_dpus,
            "per_image_counted": {c: sum(sum(map(sum, per.values())) for per in per_function[c]) / run.n_images
                                  for c in BRACKETS},
            "per_image_model": {k: v / run.n_images for k, v in predicted.items()},
            "proxy_instructions": {isa: int(sum(r.total for r in rs)) for isa, rs in replays.items()},
            "classes": {k: int(sum(r.classes[k] for r in rv32im)) for k in rv32im[0].classes},
            "by_function": {name: int(sum(np.array(per[name]).sum() for per in per_function["nominal"] if name in per))
                            for name in {n for per in per_function["nominal"] for n in per}},
            "tasklet_work": [w.per_tasklet.tolist() for w in run.work],
            "tasklet_functions": per_function,
            "tasklet_dma_calls": [r.dma_calls.tolist() for r in rv32im]}


def pipeline_batch(pipeline: str, dtype: str, files):
    def run_batch(driver):
        return measure(pipeline, dtype, files, driver, repeats=1)["run"]
    return run_batch


def photo_batch(n: int, size: int, interpolation: str, dtype, layout: str, grey: bool, seed: int):
    """A batch of skimage's photographs with RandomResizedCrop-like boxes: launches of many
    shapes, so that the units of work vary independently for the fit."""
    from skimage import data
    photos = [data.camera()] if grey else [data.astronaut(), data.chelsea(), data.coffee(), data.rocket()]
    rng = np.random.default_rng(seed)
    images = [photos[i % len(photos)] for i in range(n)]
    boxes = []
    for im in images:
        h, w = im.shape[:2]
        ch, cw = int(rng.integers(h // 8, h + 1)), int(rng.integers(w // 8, w + 1))
        boxes.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
    flips = [bool(b) for b in rng.integers(0, 2, n)]
    C = 1 if grey else 3

    def run_batch(driver):
        out = torch.empty((n, C, size, size) if layout == "NCHW" else (n, size, size, C), dtype=dtype)
        lut = None if dtype == torch.uint8 else K.normalize_lut(C, dtype, [0.5] * C, [0.25] * C)
        kwargs = dict(hflip=flips, vflip=[False] * n, interpolation=interpolation, layout=layout)
        driver.reset_counters()
        driver.run(images, boxes, (size, size), out, lut=lut, **kwargs)
        packed, _ = K.pack_batch(images, boxes, (size, size), out_dtype=dtype, **kwargs)
        return cm.DpuRun.from_backend(driver, packed)
    return run_batch


FIT_BATCHES = [  # n, output size, interpolation, dtype, layout, grey
    (2, 224, "bilinear", torch.float32, "NCHW", False), (6, 96, "bicubic", torch.uint8, "NCHW", False),
    (1, 320, "bilinear", torch.float16, "NHWC", False), (9, 48, "bilinear", torch.float32, "NCHW", False),
    (4, 160, "bicubic", torch.float32, "NHWC", False), (3, 224, "bilinear", torch.uint8, "NCHW", True),
    (12, 32, "bicubic", torch.float32, "NCHW", False), (2, 288, "bicubic", torch.float16, "NCHW", False),
]


def run(args: argparse.Namespace) -> dict:
    if proxy.find_cross_compiler() is None:
        return {"benchmark": "instruction_counts", "skipped": f"{proxy.CROSS_COMPILER} not installed"}
    started = time.perf_counter()
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    files = image_files(root, args.images_per_dpu)
    elves = {isa: proxy.build_kernel(KERNEL, nr_tasklets=args.tasklets, isa=isa) for isa in proxy.ISAS}
    simulator = proxy.build_simulator()
    entries, extra = [], []
    fit_batches = FIT_BATCHES[:3] if args.quick else FIT_BATCHES
    with DpuDriver(1, args.tasklets) as driver, \
            bar(total=len(PIPELINES) + len(fit_batches), desc="instruction counts",
                unit="launch") as progress:
        for pipeline, dtype in PIPELINES:
            entries.append({"pipeline": pipeline, "dtype": dtype,
                            **count(pipeline_batch(pipeline, dtype, files), driver, elves, simulator)})
            progress.update()
            print(f"  counted {pipeline} {dtype} ({time.perf_counter() - started:.0f} s)", flush=True)
        for i, shape in enumerate(fit_batches):
            extra.append(count(photo_batch(*shape, seed=args.seed + i), driver, elves, simulator))
            progress.update()
        print(f"  counted {len(extra)} more launches for the fit ({time.perf_counter() - started:.0f} s)",
              flush=True)
    sizes = {f"{isa} {opt}": proxy.static_size(proxy.build_kernel(KERNEL, nr_tasklets=args.tasklets, isa=isa,
                                                                  optimisation=opt))
             for isa in proxy.ISAS for opt in ("-O2", "-Os")}
    defaults = cm.Assumptions()
    model = {name: {case: getattr(defaults, name).at(case) for case in cm.CASES} for name in [*WORK, "dma_call"]}
    return {"benchmark": "instruction_counts", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "note": "instructions COUNTED on an RV32 proxy of the DPU ISA; DPU figures are brackets",
            "brackets": BRACKETS, "pipelines": entries, "fits": fits(entries + extra), "model_units": model,
            "assumed_before": ASSUMED_BEFORE,
            "static_size": sizes, "iram_instructions": 4096, "wall_s": time.perf_counter() - started}


def report(results: dict) -> None:
    if "skipped" in results:
        print(f"instruction counts: skipped ({results['skipped']})")
        return
    print("\nDPU crop/resize kernel, instructions per image: COUNTED on the RV32 proxy (DPU ISA brackets) "
          "vs the cost model's prediction for the same launches")
    head = f"{'pipeline':<8} {'dtype':<8} " + " ".join(f"{'counted ' + c:>16} {'model ' + c:>14}" for c in cm.CASES)
    print(head + "\n" + "-" * len(head))
    for e in results["pipelines"]:
        cells = " ".join(f"{e['per_image_counted'][c] / 1e6:>15.2f}M {e['per_image_model'][c] / 1e6:>13.2f}M"
                         for c in cm.CASES)
        print(f"{e['pipeline']:<8} {e['dtype']:<8} {cells}")
    print("\ninstructions per unit of work, best / nominal / worst: counted now, in the model, assumed before")
    print(f"{'unit':<12} {'counted':>22}   {'model':>22}   {'assumed before':>16}")
    for name in [*WORK, "dma_call"]:
        counted = " / ".join(f"{results['fits'][c]['units'][name]:.1f}" for c in cm.CASES)
        model = " / ".join(f"{results['model_units'][name][c]:g}" for c in cm.CASES)
        before = " / ".join(f"{v:g}" for v in results["assumed_before"][name])
        print(f"{name:<12} {counted:>22}   {model:>22}   {before:>16}")
    print("R^2 of the two fits (h_mac+h_out; row+column): " + ", ".join(
        f"{c} {results['fits'][c]['r2_hpass']:.3f}, {results['fits'][c]['r2_rest']:.3f}" for c in cm.CASES))
    print(f"\nstatic size of the kernel (IRAM holds {results['iram_instructions']} DPU instructions):")
    for build, size in results["static_size"].items():
        print(f"  {build:<13} {size['instructions']:>5} instructions ({size['text_bytes']} bytes of RV32 code)")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick dataset, fewer launches; *.quick.json")
    p.add_argument("--data", type=Path, default=None, help="dataset folder (default: the benchmarks' own)")
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--images-per-dpu", type=int, default=4)
    p.add_argument("--tasklets", type=int, default=16)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.count, args.classes, args.images_per_dpu = QUICK["count"], QUICK["classes"], 2
    if args.data is None:
        args.data = DEFAULT_ROOT.parent / (DEFAULT_ROOT.name + "_quick") if args.quick else DEFAULT_ROOT
    if args.out is None:
        args.out = results_path("instruction_counts", args.quick)
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = run(args)
    report(results)
    if "skipped" not in results:
        slim = {k: v for k, v in results.items() if k != "pipelines"}
        slim["pipelines"] = [{k: v for k, v in e.items() if not k.startswith("tasklet_")} for e in results["pipelines"]]
        write_results(slim, args.out)
    return results


if __name__ == "__main__":
    main()
