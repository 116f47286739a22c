"""How close the fused kernel's hue is to torchvision's: every 24-bit RGB value and the
photographs bundled with scikit-image, under a set of hue factors, for torchvision v2's
`adjust_hue` and v1's tensor `adjust_hue`, on uint8 images.

    python scripts/measure_hue.py            # all 2^24 colours x 9 factors, v1 and v2
    python scripts/measure_hue.py --quick    # 2^20 colours, 3 factors
    python scripts/measure_hue.py --simd 0   # the scalar code (default: the CPU's best)

Prints, per case, how many values differ from torchvision's and by how many levels at most.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torchvision.transforms import functional as F1  # noqa: E402
from torchvision.transforms.v2 import functional as F2  # noqa: E402

from pimloader.backends import kernels as K  # noqa: E402

FACTORS = (-0.5, -0.31, -0.1, -0.0371, 0.0, 0.013, 0.1, 0.25, 0.5)
SIDE = 2048      # the colours go through the kernel as SIDE x SIDE images


def kernel_hue(image_hwc: np.ndarray, factor: float, v1: bool) -> np.ndarray:
    """The fused kernel's hue on a whole image (no resampling)."""
    height, width, channels = image_hwc.shape
    out = np.empty((1, height, width, channels), np.uint8)
    K.resized_crop_batch([image_hwc], [(0, 0, height, width)], (height, width), out,
                         layout="NHWC", colours=[[("hue", factor)]], colour_v1=v1)
    return out[0]


def torchvision_hue(image_hwc: np.ndarray, factor: float, v1: bool) -> np.ndarray:
    chw = torch.from_numpy(image_hwc).permute(2, 0, 1)
    adjusted = (F1 if v1 else F2).adjust_hue(chw, factor)
    return adjusted.permute(1, 2, 0).numpy()


def compare(image_hwc: np.ndarray, factor: float, v1: bool) -> tuple[int, int]:
    """(values that differ, largest difference in levels)"""
    difference = np.abs(kernel_hue(image_hwc, factor, v1).astype(np.int16)
                        - torchvision_hue(image_hwc, factor, v1))
    return int(np.count_nonzero(difference)), int(difference.max(initial=0))


def all_colours(count: int) -> list[np.ndarray]:
    """`count` colours (every one of 2^24 when count is 2^24, else a random sample), as
    SIDE x SIDE images."""
    if count >= 1 << 24:
        values = np.arange(1 << 24, dtype=np.uint32)
    else:
        values = np.random.default_rng(0).integers(0, 1 << 24, count, dtype=np.uint32)
    rgb = np.stack([(values >> 16) & 255, (values >> 8) & 255, values & 255], 1)
    rgb = rgb.astype(np.uint8)
    step = SIDE * SIDE
    return [rgb[k:k + step].reshape(-1, min(SIDE, len(rgb)), 3)
            for k in range(0, len(rgb), step)]


def photographs() -> dict[str, np.ndarray]:
    import skimage.data as data
    photos = {}
    for name in ("astronaut", "chelsea", "coffee", "rocket", "coins", "hubble_deep_field",
                 "immunohistochemistry", "retina", "skin"):
        try:
            photo = getattr(data, name)()
        except Exception:  # a data file this scikit-image build does not ship
            continue
        if photo.ndim == 3 and photo.shape[2] == 3:
            photos[name] = np.ascontiguousarray(photo)
    return photos


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2^20 colours, 3 factors")
    parser.add_argument("--simd", type=int, default=-1,
                        help="kernel SIMD level: 0 scalar, 1 SSSE3, 2 AVX2, 3 AVX2 + "
                             "AVX-512 VBMI output (default: best)")
    args = parser.parse_args(argv)
    print(f"kernel SIMD level {K.lib.pim_cpu_simd(args.simd)}")
    factors = (-0.31, 0.013, 0.5) if args.quick else FACTORS
    colours = all_colours(1 << 20 if args.quick else 1 << 24)
    photos = photographs()
    worst = 0
    for v1 in (False, True):
        version = "v1" if v1 else "v2"
        for factor in factors:
            start = time.perf_counter()
            results = [compare(image, factor, v1) for image in colours]
            differ = sum(r[0] for r in results)
            largest = max(r[1] for r in results)
            photo_results = {name: compare(photo, factor, v1) for name, photo in photos.items()}
            photo_differ = sum(r[0] for r in photo_results.values())
            largest = max([largest] + [r[1] for r in photo_results.values()])
            worst = max(worst, largest)
            print(f"{version} hue {factor:+.4f}: {differ} of {3 * sum(c.size // 3 for c in colours)} "
                  f"colour values and {photo_differ} values of {len(photos)} photographs "
                  f"differ; largest difference {largest} levels "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"largest difference over every case: {worst} levels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
