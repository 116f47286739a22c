"""CPU time of each operation of the training transform, torchvision's and pimloader's.

On the same 500x375 photograph and the same RandomResizedCrop(224) boxes as kernel_speed,
one thread, this thread's CPU time, median over --repeats, interleaved:

- torchvision v2, each step alone on its input: `resized_crop` (antialias), `horizontal_flip`,
  `to_dtype(float32, scale=True)`, `normalize`, and ColorJitter's `adjust_brightness`,
  `adjust_contrast`, `adjust_saturation` (on uint8, as ColorJitter runs before ToDtype);
- pimloader's fused kernel, one call per batch, built up one operation at a time: crop +
  resize to uint8; + flip; + conversion to float32 (a table of scale only); + normalisation
  (the ImageNet table); + brightness, contrast and saturation. Each operation's cost is the
  increment over the call without it (conversion and normalisation are one table lookup per
  element, so normalising adds only what the table's values change; under load an increment
  can come out slightly negative: it is then within the noise of zero).

Results go to results/latest/op_costs.json, which benchmarks.viability reads.

    python -m benchmarks.op_costs [--batch 64] [--repeats 9] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torchvision.transforms import v2 as T
from torchvision.transforms.v2 import functional as F

from benchmarks.harness import RunWindow, local_date, results_path, write_results
from benchmarks.kernel_speed import photo_500x375
from benchmarks.pipelines import MEAN, STD
from pimloader.backends import kernels as K

COLOUR = (("brightness", 1.2), ("contrast", 0.8), ("saturation", 1.3))
OPS = ("crop + resize", "flip", "convert", "normalise", "colour")


def torchvision_steps(chw: torch.Tensor, boxes: list) -> dict:
    """Each step as a callable over the batch, on the input it gets in the pipeline."""
    crops = [F.resized_crop(chw, *box, [224, 224], antialias=True) for box in boxes]
    floats = [F.to_dtype(c, torch.float32, scale=True) for c in crops]

    def colour():
        for c in crops:
            F.adjust_saturation(F.adjust_contrast(F.adjust_brightness(c, 1.2), 0.8), 1.3)

    return {"crop + resize": lambda: [F.resized_crop(chw, *b, [224, 224], antialias=True)
                                      for b in boxes],
            "flip": lambda: [F.horizontal_flip(c) for c in crops],
            "convert": lambda: [F.to_dtype(c, torch.float32, scale=True) for c in crops],
            "normalise": lambda: [F.normalize(f, MEAN, STD) for f in floats],
            "colour": colour}


def pimloader_calls(image, boxes: list) -> dict:
    """The fused kernel with one more operation at each step (cumulative)."""
    n = len(boxes)
    u8 = torch.empty(n, 3, 224, 224, dtype=torch.uint8)
    f32 = torch.empty(n, 3, 224, 224, dtype=torch.float32)
    scale_only = K.normalize_lut(3, torch.float32, [0.0] * 3, [1.0] * 3)
    imagenet = K.normalize_lut(3, torch.float32, MEAN, STD)
    images, flips = [image] * n, [True] * n

    def call(out, **kwargs):
        return lambda: K.resized_crop_batch(images, boxes, (224, 224), out, **kwargs)

    return {"crop + resize": call(u8),
            "flip": call(u8, hflip=flips),
            "convert": call(f32, hflip=flips, lut=scale_only),
            "normalise": call(f32, hflip=flips, lut=imagenet),
            "colour": call(f32, hflip=flips, lut=imagenet, colours=[COLOUR] * n)}


def cpu_ms_per_image(timers: dict, batch: int, repeats: int) -> dict:
    """Median over repeats of this thread's CPU time per image, timers interleaved."""
    for fn in timers.values():
        fn()   # warm-up: tables, output pages
    times = {name: [] for name in timers}
    for _ in range(repeats):
        for name, fn in timers.items():
            start = time.thread_time()
            fn()
            times[name].append((time.thread_time() - start) / batch * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def increments(cumulative: dict) -> dict:
    """Each operation's cost: its cumulative call minus the one before it."""
    previous, out = 0.0, {}
    for op in OPS:
        out[op] = cumulative[op] - previous
        previous = cumulative[op]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.op_costs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="images per call")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats (median)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: batch 8, 3 repeats")
    parser.add_argument("--out", type=Path, help="JSON (default: results/latest/op_costs.json, or "
                        "op_costs.quick.json with --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.repeats = 8, 3
    torch.set_num_threads(1)
    image, source = photo_500x375()
    chw = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    torch.manual_seed(0)
    rrc = T.RandomResizedCrop(224)
    boxes = []
    for _ in range(args.batch):
        p = rrc.make_params([chw])
        boxes.append((p["top"], p["left"], p["height"], p["width"]))
    timers = {f"torchvision {op}": fn for op, fn in torchvision_steps(chw, boxes).items()}
    timers.update({f"pimloader {op}": fn for op, fn in pimloader_calls(image, boxes).items()})
    window = RunWindow()
    measured = cpu_ms_per_image(timers, args.batch, args.repeats)
    pim = {op: measured[f"pimloader {op}"] for op in OPS}
    results = {"benchmark": "op_costs", "date": local_date(),
               "source": source, "batch": args.batch, "repeats": args.repeats, **window.load(),
               "torchvision_cpu_ms": {op: measured[f"torchvision {op}"] for op in OPS},
               "pimloader_cumulative_cpu_ms": pim, "pimloader_cpu_ms": increments(pim)}
    print(f"CPU ms per image, one thread, median of {args.repeats} ({source}, batch "
          f"{args.batch}, load {window.load_before[0]:.1f} -> {results['loadavg_after'][0]:.1f}); "
          "pimloader: the fused call's increment for each operation")
    print(f"{'operation':<14} {'torchvision':>11} {'pimloader':>9} {'pim cumulative':>14}")
    for op in OPS:
        print(f"{op:<14} {results['torchvision_cpu_ms'][op]:11.3f} "
              f"{results['pimloader_cpu_ms'][op]:9.3f} {pim[op]:14.3f}")
    write_results(results, args.out or results_path("op_costs", args.quick))
    return results


if __name__ == "__main__":
    main()
