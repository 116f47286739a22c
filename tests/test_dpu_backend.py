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

from pimloader.backends import kernels as K
from pimloader import costmodel as cm
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.errors import DpuFaultError, DpuKernelError

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
    with DpuDriver(nr_dpus, nr_tasklets) as dpus:
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
    with DpuDriver(2, 11) as dpus:
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
    with DpuDriver(1, 16) as dpus:
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
    with DpuDriver(1, 1) as warm_up:
        check_same(warm_up, images[:1], boxes[:1], (224, 224), torch.uint8, "bilinear", "NCHW",
                   rng)
    before = threads_and_fds()
    dpus = DpuDriver(7, 11)
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
    written once. The WRAM ring reads each source row once per segment and tasklet band (the
    segments' spans overlap by the filter's reach); tables and descriptors add a little.
    Before the ring (every source row read once per vertical tap) this was 1.61."""
    rng = np.random.default_rng(2024)
    n = 16
    images = [PHOTOS[i % len(PHOTOS)] for i in range(n)]
    boxes = rrc_boxes(images, rng)
    lut = K.normalize_lut(3, torch.float32, MEAN, STD)
    out = torch.empty((n, 3, 224, 224), dtype=torch.float32)
    with DpuDriver(1, 16) as dpus:
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
    assert 1.0 <= ratio < 1.25
    assert 1.0 <= host < 1.2                                  # only crop boxes and outputs travel


def plan_of(image, box, size, tasklets, interpolation="bilinear", dtype=torch.float32):
    packed, _ = K.pack_batch([image], [box], size, out_dtype=dtype, interpolation=interpolation)
    return cm.plan_sample(packed.samples[0], packed.tables, cm.arena_bytes(tasklets))


@pytest.mark.parametrize("nr_tasklets", [1, 16])
def test_row_ring_upscales_downscales_near_the_wram_limit_tiny_outputs_and_windows(nr_tasklets):
    """The ring of resampled rows: bit-identical to the CPU backend where it is used, where
    it does not fit (the old per-tap path) and at the edges: upscales (windows of 2 rows that
    advance every other output row), 1-pixel outputs, a 1-row window, outputs wider than a
    segment, crops of resized images (windows). At 16 tasklets, retina 1411 -> 70 does not fit
    the ring even 8 pixels wide (it falls back) and 1411 -> 71 just does."""
    rng = np.random.default_rng(77 + nr_tasklets)
    big = data.retina()
    cases = [  # (image, box, size)
        (big, (0, 0, 1411, 1411), (70, 70)),      # 16 tasklets: no ring (fallback)
        (big, (0, 0, 1411, 1411), (71, 71)),      # 16 tasklets: the ring, at seg_w 8
        (PHOTOS[1][:37, :53], (0, 0, 37, 53), (224, 224)),  # upscale
        (PHOTOS[0], (5, 7, 12, 10), (1, 1)),      # one output pixel
        (PHOTOS[0], (5, 7, 6, 100), (1, 57)),     # one output row
        (PHOTOS[0], (5, 7, 100, 6), (57, 1)),     # one output column
        (PHOTOS[2], (0, 0, 1, 300), (9, 40)),     # one source row upscaled
        (PHOTOS[3], (100, 0, 200, 512), (150, 513)),
    ]
    plans = [plan_of(im, box, size, nr_tasklets) for im, box, size in cases]
    with DpuDriver(1, nr_tasklets) as probe:
        probe.run([PHOTOS[0]], [(0, 0, 8, 8)], (8, 8), torch.empty((1, 3, 8, 8), dtype=torch.uint8))
        assert probe.run_info()["arena_bytes"] == cm.arena_bytes(nr_tasklets)
    if nr_tasklets == 16:
        assert plans[0].ring_rows == 0 and plans[1].ring_rows > 0 and plans[1].seg_w == 8
    assert all(p is not None and p.ring_rows > 0 for p in plans[2:])  # both axes resampled
    with DpuDriver(3, nr_tasklets) as dpus:
        for (image, box, size), plan in zip(cases, plans):
            for dtype, interp in ((torch.float32, "bilinear"), (torch.uint8, "bicubic")):
                if plan_of(image, box, size, nr_tasklets, interp, dtype) is None:
                    continue
                check_same(dpus, [image] * 2, [box] * 2, size, dtype, interp, "NCHW", rng)
        # windows: crops of a resized image (Resize + CenterCrop lowering)
        images = [PHOTOS[0], PHOTOS[3], PHOTOS[1]]
        ref = torch.empty((3, 3, 64, 48))
        got = torch.zeros_like(ref)
        windows = [(100, 90, 20, 30), (80, 200, 10, 100), (300, 300, 200, 180)]
        lut = K.normalize_lut(3, torch.float32, MEAN, STD)
        boxes = [(0, 0, *im.shape[:2]) for im in images]
        K.resized_crop_batch(images, boxes, (64, 48), ref, hflip=[True, False, True], lut=lut, windows=windows)
        dpus.run(images, boxes, (64, 48), got, [True, False, True], None, "bilinear", "NCHW", lut, windows)
        assert torch.equal(bits(got), bits(ref))


def test_the_ring_reads_each_source_row_once_and_the_fallback_once_per_tap():
    """MRAM reads per source byte on one DPU x 16 tasklets, from the emulator's counters: the
    1411 -> 71 downscale (ring at seg_w 8) reads each row of a segment's span once; 1411 -> 70
    (no ring) reads it once per vertical window that holds it (bilinear at scale ~20: windows of
    ~40 rows, 20 apart, so about twice). float32 outputs (the uint8 ones need
    less WRAM: 1411 -> 70 fits the ring too)."""
    big = data.retina()
    per_byte = {}
    with DpuDriver(1, 16) as dpus:
        for out in (70, 71):
            assert (plan_of(big, (0, 0, 1411, 1411), (out, out), 16).ring_rows > 0) == (out == 71)
            dest = torch.empty((1, 3, out, out), dtype=torch.float32)
            dpus.reset_counters()
            dpus.run([big], [(0, 0, 1411, 1411)], (out, out), dest, lut=K.normalize_lut(3, torch.float32, MEAN, STD))
            per_byte[out] = dpus.counters(0).mram_read_bytes / big.nbytes
    # segments of 8 outputs (~160 source pixels) overlap by the filter's reach (~40): ~1.3
    assert per_byte[71] < 2.0
    assert per_byte[70] > 1.5 * per_byte[71]


def balance(values):
    values = np.asarray(values, dtype=np.float64)
    return values.max() / values.mean()


def test_work_split_balances_one_huge_and_many_small_crops_better_than_pixels():
    """One full 1411x1411 photo and 23 small crops, all to 224x224 on 6 DPUs. The driver's
    split by estimated work gives the huge crop a DPU to itself; the split by output pixels
    (the driver before, all samples equal) gave it 3 small neighbours. Measured on the
    emulator: the new split's per-DPU MRAM read bytes (source rows resampled, ~ the
    horizontal work) and the model's per-DPU instructions, against each old run executed on
    a DPU of its own."""
    rng = np.random.default_rng(11)
    images = [PHOTOS[i % 4] for i in range(24)]
    images[0] = data.retina()
    boxes = [(0, 0, 1411, 1411)] + [(int(rng.integers(0, 200)), int(rng.integers(0, 200)), 60, 80)
                                    for _ in range(23)]
    out = torch.empty((24, 3, 224, 224), dtype=torch.uint8)
    packed, _ = K.pack_batch(images, boxes, (224, 224), out_dtype=torch.uint8)

    def per_dpu(backend, counters, runs):
        plans = [cm.plan_sample(s, packed.tables, backend.run_info()["arena_bytes"]) for s in packed.samples]
        works = [cm.sample_work(s, packed.tables, ring=p.ring_rows > 0) for s, p in zip(packed.samples, plans)]
        instr = [float((sum(works[i].ops.sum(axis=0) for i in run) @ cm.instruction_costs(cm.Assumptions(),
                                                                                         "nominal"))) for run in runs]
        return [c.mram_read_bytes for c in counters], instr

    with DpuDriver(6, 16) as dpus:
        dpus.reset_counters()
        dpus.run(images, boxes, (224, 224), out)
        ref = torch.empty_like(out)
        K.resized_crop_batch(images, boxes, (224, 224), ref)
        assert torch.equal(out, ref)
        rows = [cm.row_work(s, packed.tables, cm.plan_sample(s, packed.tables, dpus.run_info()["arena_bytes"]))
                for s in packed.samples]
        new_runs = cm.split_samples([int(r.sum()) for r in rows], 6)
        assert new_runs[0] == range(0, 1)                   # the huge crop alone
        new_reads, new_instr = per_dpu(dpus, [dpus.counters(d) for d in range(6)], new_runs)
    old_runs = cm.split_by_pixels([224 * 224] * 24, 6)
    assert old_runs[0] == range(0, 4)
    with DpuDriver(1, 16) as one:
        old_counters = []
        for run in old_runs:
            one.reset_counters()
            one.run(images[run.start:run.stop], boxes[run.start:run.stop], (224, 224), out[run.start:run.stop])
            old_counters.append(one.counters(0))
        old_reads, old_instr = per_dpu(one, old_counters, old_runs)
    print(f"\nslowest / mean DPU: reads {balance(old_reads):.2f} -> {balance(new_reads):.2f}, "
          f"instructions {balance(old_instr):.2f} -> {balance(new_instr):.2f}; max reads "
          f"{max(old_reads)} -> {max(new_reads)}")
    assert max(new_reads) < max(old_reads) and max(new_instr) < max(old_instr)
    assert balance(new_instr) < balance(old_instr)
