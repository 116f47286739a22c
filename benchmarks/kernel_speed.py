"""Time per image of the fused CPU kernel against torchvision v2, one thread.

The training transform after decoding: a RandomResizedCrop(224) box of a 500x375 RGB
photograph, resized (bilinear, antialias), horizontally flipped half the time, converted to
float32 with scale and normalised with the ImageNet statistics, NCHW.

- torchvision: per image, `resized_crop` on the CHW uint8 tensor, `horizontal_flip`,
  `to_dtype(float32, scale=True)`, `normalize` (what a torch DataLoader worker runs);
- pimloader: one `pimloader.backends.kernels` call per batch writing every image into its slot
  of a preallocated [batch, 3, 224, 224] float32 tensor; "kernel" excludes, "call" includes
  the Python-side packing of the batch's descriptors.

Both run in this process with `torch.set_num_threads(1)`, interleaved repeat by repeat over
the same crop boxes; figures are medians over the repeats, of wall time and of the thread's
CPU time (the steadier figure on a shared machine). Also checks that both produce the same
numbers.

    python -m benchmarks.kernel_speed [--batch 64] [--repeats 15] [--simd 0] [--quick]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from torchvision.transforms import v2 as T
from torchvision.transforms.v2 import functional as F

from benchmarks.harness import RunWindow, local_date, results_path, write_results
from pimloader.backends import kernels as K

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def photo_500x375() -> tuple[np.ndarray, str]:
    from PIL import Image
    try:
        import skimage.data
        src, name = skimage.data.coffee(), "skimage.data.coffee"
    except ImportError:
        rng = np.random.default_rng(0)
        yy, xx = np.mgrid[0:400, 0:600]
        src = np.stack([128 + 90 * np.sin(xx / (13 + 7 * c) + yy / 29 + c) for c in range(3)], 2)
        src = np.clip(src + rng.normal(0, 8, src.shape), 0, 255).astype(np.uint8)
        name = "synthetic"
    img = Image.fromarray(src).resize((500, 375), Image.Resampling.BICUBIC)
    return np.asarray(img).copy(), name + " resized to 500x375"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="images per kernel call")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats (median)")
    parser.add_argument("--interpolation", default="bilinear", choices=["bilinear", "bicubic"])
    parser.add_argument("--simd", type=int, default=-1, choices=[-1, 0, 1, 2, 3],
                        help="row loops: -1 best available, 0 portable C only (the code the "
                             "DPU kernels share), 1 SSSE3, 2 AVX2, 3 AVX2 + an AVX-512 VBMI "
                             "output step")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--out", help="JSON file for the results (default: results/latest/"
                                      "kernel_speed[.simdN][.quick].json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.repeats = 8, 3

    torch.set_num_threads(1)
    simd = K.lib.pim_cpu_simd(args.simd)
    img, source = photo_500x375()
    chw = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    torch.manual_seed(0)
    rrc = T.RandomResizedCrop(224)
    params = [rrc.make_params([chw]) for _ in range(args.batch)]
    boxes = [(p["top"], p["left"], p["height"], p["width"]) for p in params]
    flips = [bool(i % 2) for i in range(args.batch)]
    interp = T.InterpolationMode(args.interpolation)
    n = args.batch

    def torchvision_batch() -> list:
        outs = []
        for (top, left, h, w), flip in zip(boxes, flips):
            x = F.resized_crop(chw, top, left, h, w, [224, 224], interpolation=interp,
                               antialias=True)
            if flip:
                x = F.horizontal_flip(x)
            x = F.to_dtype(x, torch.float32, scale=True)
            outs.append(F.normalize(x, MEAN, STD))
        return outs

    window = RunWindow()
    results, cpu_results = {}, {}
    for dtype in (torch.float32, torch.float16):
        lut = K.normalize_lut(3, dtype, MEAN, STD)
        out = torch.empty(n, 3, 224, 224, dtype=dtype)
        images = [img] * n

        def pim_call():
            K.resized_crop_batch(images, boxes, (224, 224), out, hflip=flips,
                                 interpolation=args.interpolation, lut=lut)

        packed, arrays = K.pack_batch(images, boxes, (224, 224), hflip=flips,
                                      interpolation=args.interpolation, out_dtype=dtype)

        def pim_kernel():
            K.run_packed(packed, arrays, out, lut)

        timers = {"pimloader call": pim_call, "pimloader kernel": pim_kernel}
        if dtype == torch.float32:
            timers["torchvision v2"] = torchvision_batch
        for fn in timers.values():  # warm-up: page in the output, build tables
            fn()
        wall = {name: [] for name in timers}
        cpu = {name: [] for name in timers}
        for _ in range(args.repeats):
            for name, fn in timers.items():
                c0, t0 = time.thread_time(), time.perf_counter()
                fn()
                wall[name].append((time.perf_counter() - t0) / n * 1e3)
                cpu[name].append((time.thread_time() - c0) / n * 1e3)
        for name in timers:
            key = f"{name} {str(dtype).replace('torch.', '')}"
            results[key] = statistics.median(wall[name])
            cpu_results[key] = statistics.median(cpu[name])

        if dtype == torch.float32:
            ref = torch.stack(torchvision_batch())
            pim_call()
            d = (out - ref).abs()
            results["max abs diff vs torchvision (float32)"] = float(d.max())
            results["fraction identical vs torchvision (float32)"] = float((d == 0).float().mean())

    tv, tv_cpu = results["torchvision v2 float32"], cpu_results["torchvision v2 float32"]
    report = {
        "date": local_date(), **window.load(),
        "source": source, "batch": n, "repeats": args.repeats,
        "interpolation": args.interpolation, "threads": torch.get_num_threads(),
        "simd_level": int(simd),
        "cpu": platform.processor() or platform.machine(),
        "mean_crop_area_px": float(np.mean([b[2] * b[3] for b in boxes])),
        "ms_per_image": {k: round(v, 4) for k, v in results.items() if "diff" not in k
                         and "identical" not in k},
        "cpu_ms_per_image": {k: round(v, 4) for k, v in cpu_results.items()},
        "speedup_vs_torchvision": {k: round(tv / v, 2) for k, v in results.items()
                                   if k.startswith("pimloader")},
        "cpu_speedup_vs_torchvision": {k: round(tv_cpu / v, 2) for k, v in cpu_results.items()
                                       if k.startswith("pimloader")},
        "max_abs_diff_float32": results["max abs diff vs torchvision (float32)"],
        "fraction_identical_float32": results["fraction identical vs torchvision (float32)"],
    }
    print(f"row loops: SIMD level {simd}")
    print(f"{source}; {n} RandomResizedCrop(224) boxes (mean crop {report['mean_crop_area_px']:.0f}"
          f" px), {args.interpolation}, flip 1/2, ImageNet normalisation, 1 thread, "
          f"median of {args.repeats}, load {report['loadavg_before'][0]:.1f} -> "
          f"{report['loadavg_after'][0]:.1f}")
    print(f"{'pipeline':26s} {'wall ms/img':>11s} {'speedup':>8s} {'CPU ms/img':>11s} {'speedup':>8s}")
    for name, ms in report["ms_per_image"].items():
        speed = report["speedup_vs_torchvision"].get(name)
        cms = report["cpu_ms_per_image"][name]
        cspeed = report["cpu_speedup_vs_torchvision"].get(name)
        print(f"{name:26s} {ms:11.3f} {(f'{speed:.2f}x' if speed else ''):>8s} "
              f"{cms:11.3f} {(f'{cspeed:.2f}x' if cspeed else ''):>8s}")
    print(f"float32 outputs identical to torchvision's: {report['fraction_identical_float32']:.4%}"
          f" (max abs diff {report['max_abs_diff_float32']:g})")
    stem = "kernel_speed" + ("" if args.simd < 0 else f".simd{simd}")
    write_results(report, args.out or results_path(stem, args.quick))
    return report


if __name__ == "__main__":
    main()
