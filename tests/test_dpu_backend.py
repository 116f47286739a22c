"""The DPU backend (dpu_src/crop_resize.c + csrc/dpu_driver.c) on pimloader's libdpu
emulator: bit-identical to the CPU backend (`resized_crop_batch`) on real photographs, for
NR_TASKLETS 1, 11, 16 and 1, 7, 64 DPUs; errors name the DPU and leave nothing behind; the
DMA bytes of a 224x224 training crop against the least possible."""
import math
import os

import numpy as np
import pytest
import torch
from skimage import data

from pimloader import _kernels_api as K
from pimloader._dpu_backend import DpuBackend, DpuFaultError, DpuKernelError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PHOTOS = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket(), data.immunohistochemistry(),
          data.hubble_deep_field(), data.retina()]


def rrc_boxes(images, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """RandomResizedCrop-style boxes (torchvision's sampling, with the centre-crop fallback)."""
    boxes = []
    for im in images:
        h, w = im.shape[:2]
        for _ in range(10):
            area = h * w * rng.uniform(*scale)
            r = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
            cw, ch = int(round(math.sqrt(area * r))), int(round(math.sqrt(area / r)))
            if 0 < cw <= w and 0 < ch <= h:
                boxes.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
                break
        else:
            s = min(h, w)
            boxes.append(((h - s) // 2, (w - s) // 2, s, s))
    return boxes


def batch(rng, n, tiny=True):
    """n photos of very different sizes (a few cut small: upsampling), with RRC boxes."""
    images = [PHOTOS[i % len(PHOTOS)] for i in range(n)]
    if tiny and n > 2:
        images[1] = images[1][:37, :53]     # tiny source: upsampled to 224
        images[2] = images[2][100:400, :9]  # 9 pixels wide
    boxes = rrc_boxes(images, rng)
    return images, boxes


def bits(t):
    return t.view(torch.uint8) if t.dtype == torch.uint8 else t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def check_same(backend, images, boxes, size, dtype, interpolation, layout, rng):
    n, (oh, ow) = len(images), size
    shape = (n, 3, oh, ow) if layout == "NCHW" else (n, oh, ow, 3)
    lut = None if dtype == torch.uint8 else K.normalize_lut(3, dtype, MEAN, STD)
    hflip, vflip = rng.integers(0, 2, n).astype(bool), rng.integers(0, 2, n).astype(bool)
    ref = torch.empty(shape, dtype=dtype)
    got = torch.full(shape, 7, dtype=dtype)
    K.resized_crop_batch(images, boxes, size, ref, hflip=hflip, vflip=vflip, interpolation=interpolation,
                         layout=layout, lut=lut)
    backend.run(images, boxes, size, got, hflip, vflip, interpolation, layout, lut)
    assert torch.equal(bits(got), bits(ref)), f"{dtype} {interpolation} {layout}: DPU output differs from CPU"


CASES = [(torch.float32, "bilinear", "NCHW"), (torch.uint8, "bicubic", "NCHW"),
         (torch.float16, "bicubic", "NHWC"), (torch.float32, "bicubic", "NCHW")]


@pytest.mark.parametrize("nr_tasklets", [1, 11, 16])
@pytest.mark.parametrize("nr_dpus", [1, 7, 64])
def test_bit_identical_to_cpu_backend(nr_dpus, nr_tasklets):
    rng = np.random.default_rng(nr_dpus * 31 + nr_tasklets)
    with DpuBackend(nr_dpus, nr_tasklets) as dpus:
        assert dpus.nr_dpus == nr_dpus
        for k, (dtype, interpolation, layout) in enumerate(CASES):
            n = [3, 10, 9, 12][k]                 # fewer images than DPUs for 7 and 64
            images, boxes = batch(rng, n)
            size = (224, 224) if k != 2 else (61, 97)  # odd rows: padded MRAM pitch
            check_same(dpus, images, boxes, size, dtype, interpolation, layout, rng)
            assert dpus.run_info()["active_dpus"] == min(n, nr_dpus)


def test_grayscale_upscale_and_identity_axes():
    rng = np.random.default_rng(5)
    gray = [data.camera(), data.camera()[:40, :300], data.camera()[:224, :224]]
    boxes = [(10, 10, 300, 224), (0, 0, 40, 300), (0, 0, 224, 224)]  # width kept, height kept, both
    with DpuBackend(2, 11) as dpus:
        for dtype in (torch.uint8, torch.float32):
            ref = torch.empty((3, 1, 224, 224), dtype=dtype)
            got = torch.zeros_like(ref)
            lut = None if dtype == torch.uint8 else K.normalize_lut(1, dtype, [0.5], [0.25])
            flips = [True, False, True]
            K.resized_crop_batch(gray, boxes, (224, 224), ref, hflip=flips, vflip=flips, lut=lut)
            dpus.run(gray, boxes, (224, 224), got, flips, flips, "bilinear", "NCHW", lut)
            assert torch.equal(bits(got), bits(ref))


def test_extreme_downscale_is_refused_on_the_host():
    big = data.retina()
    with DpuBackend(1, 16) as dpus:
        out = torch.empty((1, 3, 4, 4), dtype=torch.float32)
        with pytest.raises(ValueError, match=r"sample 0: .*needs \d+ bytes of WRAM per tasklet"):
            dpus.run([big], [(0, 0, 1411, 1411)], (4, 4), out, interpolation="bicubic",
                     lut=K.normalize_lut(3, torch.float32, MEAN, STD))
        # the backend is still usable afterwards
        small = torch.empty((1, 3, 32, 32), dtype=torch.uint8)
        dpus.run([big], [(0, 0, 200, 200)], (32, 32), small)


def threads_and_fds():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def test_dpu_fault_mid_run_raises_naming_the_dpu_without_leaks():
    rng = np.random.default_rng(9)
    images, boxes = batch(rng, 12)
    out = torch.empty((12, 3, 224, 224), dtype=torch.uint8)
    # torch and the emulator start thread pools once per process and keep them: start them
    # before counting, so that only what this backend leaves behind is measured
    with DpuBackend(1, 1) as warm_up:
        check_same(warm_up, images[:1], boxes[:1], (224, 224), torch.uint8, "bilinear", "NCHW",
                   rng)
    before = threads_and_fds()
    dpus = DpuBackend(7, 11)
    try:
        check_same(dpus, images, boxes, (224, 224), torch.uint8, "bilinear", "NCHW", rng)
        with pytest.raises(DpuFaultError, match=r"DPU 3 faulted.*halt") as info:
            dpus.run(images, boxes, (224, 224), out, debug=dpus.lib.PIM_DPU_DEBUG_HALT, debug_dpu=3)
        assert info.value.dpu == 3 and "dpu_launch" in str(info.value)
        # a descriptor corrupted on its way to DPU 5: the kernel refuses it, nothing hangs; the
        # halt left DPU 3's barrier mid-round (the other tasklets had reached it or not, by timing):
        # the driver loads the program again before this run (which resets the counters)
        with pytest.raises(DpuKernelError, match=r"DPU 5 kernel refused its chunk: an invalid descriptor") as info:
            dpus.run(images, boxes, (224, 224), out, debug=dpus.lib.PIM_DPU_DEBUG_CORRUPT, debug_dpu=5)
        assert info.value.dpu == 5
        assert dpus.counters(3).launches == 1
        check_same(dpus, images, boxes, (224, 224), torch.uint8, "bilinear", "NCHW", rng)  # recovers
    finally:
        dpus.close()
    assert threads_and_fds() == before


def test_dma_bytes_of_a_training_crop_against_the_least_possible():
    """Per image of a RandomResizedCrop(224) + flip + float32 normalise batch: bytes the
    kernel moves between MRAM and WRAM against each crop byte read once + each output byte
    written once. The vertical pass streams every tap row (no row cache), so source rows
    are read about `vertical taps` times: the ratio is that, plus tables and descriptors."""
    rng = np.random.default_rng(2024)
    n = 16
    images = [PHOTOS[i % len(PHOTOS)] for i in range(n)]
    boxes = rrc_boxes(images, rng)
    lut = K.normalize_lut(3, torch.float32, MEAN, STD)
    out = torch.empty((n, 3, 224, 224), dtype=torch.float32)
    with DpuBackend(1, 16) as dpus:
        dpus.reset_counters()
        dpus.run(images, boxes, (224, 224), out, rng.integers(0, 2, n).astype(bool), None, "bilinear", "NCHW", lut)
        c = dpus.counters(0)
        info = dpus.run_info()
    least = sum(h * w * 3 for _, _, h, w in boxes) + n * 224 * 224 * 3 * 4
    dma = c.mram_read_bytes + c.mram_write_bytes
    ratio = dma / least
    host = (c.host_to_dpu_bytes + c.dpu_to_host_bytes) / least
    print(f"\nDMA per image: {dma / n / 1e3:.0f} kB moved (read {c.mram_read_bytes / n / 1e3:.0f} kB, "
          f"write {c.mram_write_bytes / n / 1e3:.0f} kB) vs {least / n / 1e3:.0f} kB least possible: "
          f"ratio {ratio:.2f}; host<->DPU bytes ratio {host:.3f}; WRAM arena {info['arena_bytes']} B/tasklet, "
          f"heap peak {c.wram_heap_peak} B, globals+stacks {c.wram_static_bytes} B")
    assert c.mram_write_bytes >= n * 224 * 224 * 3 * 4       # every output byte written
    assert 1.0 <= ratio < 12.0
    assert 1.0 <= host < 1.2                                  # only crop boxes and outputs travel
