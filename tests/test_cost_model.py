"""pimloader.costmodel: its arithmetic against hand computations, its monotonicity, the work it
counts against a literal walk of the kernel's loops, the least-possible bytes against numpy
sizes of real batches, and the emulator counters it reads against what the host sent."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from skimage import data
from torchvision.transforms import v2

from pimloader.backends import kernels as K
from pimloader import costmodel as cm
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.transforms import lower

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PHOTOS = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket()]
A = cm.Assumptions()
COL = {name: i for i, name in enumerate(cm.WORK)}


def synthetic_run(*, tasklet_work=None, read_calls=10, read_bytes=20480, write_calls=4,
                  write_bytes=4096, xfer=1 << 20, out_xfer=1 << 19, images=2):
    """A one-DPU run with the given counts (work: [tasklets, WORK] array)."""
    work = np.zeros((16, len(cm.WORK))) if tasklet_work is None else np.asarray(tasklet_work, float)
    one = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    return cm.DpuRun(1, work.shape[0], images, 1, xfer, out_xfer, xfer, out_xfer, one(read_calls),
                     one(read_bytes), one(write_calls), one(write_bytes), one(xfer), one(out_xfer),
                     one(0), [cm.KernelWork(work)], 1, 1)


# ---- arithmetic against hand computations -------------------------------------------------

def test_dma_cycles_by_hand():
    # 10 reads of 2,048 B and 4 writes of 1,024 B: 10*77 + 4*61 + 0.5*(20,480 + 4,096)
    assert cm.dma_cycles(10, 20480, 4, 4096, A, "nominal") == 770 + 244 + 12288
    assert cm.dma_cycles(10, 20480, 4, 4096, A, "best") == 12288  # latencies hidden
    assert cm.dma_cycles(10, 20480, 4, 4096, A, "worst") == 13302


def test_one_dpu_projection_by_hand():
    work = np.zeros((16, len(cm.WORK)))
    work[:, COL["h_mac"]] = 1000          # 16 balanced tasklets, 1,000 h taps each
    run = synthetic_run(tasklet_work=work)
    system = cm.System("one rank", 64, 350e6)
    p = cm.project(run, system, A, "nominal")
    tap, call = A.h_mac.nominal, A.dma_call.nominal  # instructions per h tap, per DMA call
    instr = 16 * 1000 * tap
    instr *= 1 + call * 14 / instr        # + the DMA calls' instructions, 14 calls
    assert instr == pytest.approx(16 * 1000 * tap + 14 * call)
    assert p.t_compute == pytest.approx(instr / 350e6)  # 16 tasklets > 11: pipeline full
    dma = 10 * 77 + 4 * 61 + 0.5 * (20480 + 4096)
    assert p.t_dma == pytest.approx(dma / 350e6)
    assert p.t_dpu == pytest.approx(max(instr, dma) / 350e6)  # overlapped (nominal)
    assert p.t_in == pytest.approx(64 * (1 << 20) / 6.7e9)    # 64 DPUs x 1 MiB at 6.7 GB/s
    assert p.t_out == pytest.approx(64 * (1 << 19) / 4.7e9)
    assert p.t_launch == pytest.approx(p.t_in + p.t_dpu + p.t_out)  # serial on one rank
    assert p.images_per_launch == 128                         # 2 images per DPU x 64 DPUs
    assert p.images_per_s == pytest.approx(128 / p.t_launch)
    assert p.bound == "host->DPU transfer"    # 10 ms of push against 0.27 ms of compute
    worst = cm.project(run, system, A, "worst")
    worst_instr = 16 * A.h_mac.worst * 1000 + 14 * A.dma_call.worst
    assert worst.t_dpu == pytest.approx((worst_instr + dma) / 350e6)  # no overlap


def test_few_tasklets_cannot_fill_the_pipeline():
    one = np.zeros((1, len(cm.WORK)))
    one[0, COL["emit"]] = 1000
    emit = A.emit.nominal
    cycles, instr = cm.compute_cycles(cm.KernelWork(one), 0, A, "nominal")
    assert instr == pytest.approx(1000 * emit) and cycles == pytest.approx(11 * 1000 * emit)  # one issue per 11 cycles
    unbalanced = np.zeros((16, len(cm.WORK)))
    unbalanced[0, COL["emit"]], unbalanced[1:, COL["emit"]] = 1000, 10
    cycles, instr = cm.compute_cycles(cm.KernelWork(unbalanced), 0, A, "nominal")
    assert instr == pytest.approx(1150 * emit) and cycles == pytest.approx(11 * 1000 * emit)


def test_overlapped_transfers_need_two_ranks():
    run = synthetic_run(tasklet_work=np.full((16, len(cm.WORK)), 1000.0))
    for n in (64, 128):
        p = cm.project(run, cm.System("s", n, 350e6), A, "best")
        if n == 64:
            assert p.t_launch == pytest.approx(p.t_in + p.t_dpu + p.t_out)
        else:
            assert p.t_launch == pytest.approx(max(p.t_in + p.t_out, p.t_dpu))


def test_rank_scaling_worst_case_shares_one_rank():
    run = synthetic_run()
    p = cm.project(run, cm.System("s", 640, 267e6), A, "worst")     # 10 ranks, one rank's bandwidth
    assert p.t_in == pytest.approx(640 * (1 << 20) / 6.7e9)
    assert cm.project(run, cm.System("s", 640, 267e6), A, "nominal").t_in == pytest.approx(64 * (1 << 20) / 6.7e9)


def test_end_to_end_takes_the_slower_side():
    e = cm.end_to_end(5000.0, 0.001, 2)
    assert e["host_images_per_s"] == 2000.0 and e["images_per_s"] == 2000.0 and e["bound"] == "host decode"
    assert cm.end_to_end(500.0, 0.001, 2)["bound"] == "DPU path"


def test_every_parameter_has_a_source_and_ordered_cases():
    for row in A.table():
        assert row["source"] and row["why"] and row["unit"]
        if row["name"] not in ("dma_latency_hidden", "overlap_dma_compute", "rank_scaling", "overlap_transfers"):
            assert row["best"] <= row["nominal"] <= row["worst"], row["name"]  # costs: best is lowest
    with pytest.raises(ValueError):
        A.h_mac.at("typical")


# ---- monotonicity ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", cm.CASES)
def test_more_dpus_are_never_slower(case):
    run = synthetic_run(tasklet_work=np.full((16, len(cm.WORK)), 500.0))
    rates = [cm.project(run, cm.System("s", n, 350e6), A, case) for n in (64, 128, 640, 2560, 5120)]
    assert all(b.images_per_launch / b.t_dpu > a.images_per_launch / a.t_dpu for a, b in zip(rates, rates[1:]))
    assert all(b.images_per_s >= a.images_per_s * (1 - 1e-12) for a, b in zip(rates, rates[1:]))


counts = st.integers(min_value=0, max_value=10 ** 6)


@settings(max_examples=60, deadline=None)
@given(base=st.tuples(counts, counts, counts, counts, counts, counts, counts),
       extra=st.tuples(counts, counts, counts, counts, counts, counts, counts),
       case=st.sampled_from(cm.CASES), n=st.sampled_from([64, 640, 2560]))
def test_more_bytes_or_work_are_never_faster(base, extra, case, n):
    def run(c):
        rc, rb, wc, wb, x, o, w = c
        work = np.zeros((16, len(cm.WORK)))
        work[:, COL["v_mac"]] = w
        return synthetic_run(tasklet_work=work, read_calls=rc, read_bytes=8 * rb, write_calls=wc,
                             write_bytes=8 * wb, xfer=8 * x + 72, out_xfer=8 * o + 16)
    system = cm.System("s", n, 350e6)
    small = cm.project(run(base), system, A, case)
    big = cm.project(run(tuple(b + e for b, e in zip(base, extra))), system, A, case)
    assert big.t_launch >= small.t_launch * (1 - 1e-12)
    for stage in ("t_in", "t_compute", "t_dma", "t_out"):
        assert getattr(big, stage) >= getattr(small, stage) * (1 - 1e-12)


def test_worse_cases_are_never_faster():
    run = synthetic_run(tasklet_work=np.full((16, len(cm.WORK)), 300.0))
    for system in cm.SYSTEMS:
        best, nominal, worst = (cm.project(run, system, A, c).images_per_s for c in cm.CASES)
        assert best >= nominal >= worst


# ---- the work counted from tables ------------------------------------------------------------

def test_work_of_an_8x8_to_4x4_bilinear_by_hand():
    # 8 -> 4 with antialias: scale 2, support 2; outputs' windows [0,3) [1,5) [3,7) [5,8):
    # 3 + 4 + 4 + 3 = 14 taps per axis
    image = np.zeros((8, 8, 3), np.uint8)
    packed, _ = K.pack_batch([image], [(0, 0, 8, 8)], (4, 4), out_dtype=torch.float32)
    # with the ring: the 8 source rows are each resampled once (3 + 2 + 2 + 1 new per window)
    w = cm.sample_work(packed.samples[0], packed.tables)
    total = w.ops.sum(axis=0)
    assert list(w.ops[:, COL["h_mac"]]) == [3 * 3 * 14, 3 * 2 * 14, 3 * 2 * 14, 3 * 1 * 14]
    assert total[COL["h_out"]] == 3 * 8 * 4
    assert total[COL["v_mac"]] == 3 * 4 * 14
    assert total[COL["v_init"]] == total[COL["v_finish"]] == total[COL["emit"]] == 3 * 16
    # a band starting at row 2 resamples its whole window (4 rows), not just the 2 new ones
    assert w.band_start[2, COL["h_mac"]] == 3 * (4 - 2) * 14 and w.band_start[0].sum() == 0
    # without the ring (the kernel before it, or a ring that does not fit WRAM): per tap
    old = cm.sample_work(packed.samples[0], packed.tables, ring=False).ops.sum(axis=0)
    assert old[COL["h_mac"]] == 3 * 14 * 14   # C x (sum of vertical taps) x (sum of horizontal taps)
    assert old[COL["h_out"]] == 3 * 14 * 4
    assert old[COL["v_mac"]] == total[COL["v_mac"]]
    assert w.least_in_bytes == 8 * 8 * 3 and w.out_bytes == 16 * 3 * 4


def walk_kernel(sample, tables, ring, band_starts=(0,)):
    """The MAC count of crop_resize.c's loops, by literally walking them (an oracle): with the
    ring, the window's rows not resampled yet since the band started; without, every tap."""
    _, _, _, xf, xc = cm.read_axis(tables, int(sample["xtab_offset"]))
    _, _, _, yf, yc = cm.read_axis(tables, int(sample["ytab_offset"]))
    C, h_mac, v_mac = int(sample["channels"]), 0, 0
    resampled = set()
    for y in range(int(sample["out_h"])):
        if y in band_starts:
            resampled = set()
        rows = range(int(yf[y]), int(yf[y] + yc[y])) if yc is not None else [y]
        for r in rows:
            if xc is not None and not (ring and yc is not None and r in resampled):
                h_mac += C * int(xc.sum())
                resampled.add(r)
            if yc is not None:
                v_mac += C * int(sample["out_w"])
    return h_mac, v_mac


def test_work_matches_a_walk_of_the_kernel_loops():
    rng = np.random.default_rng(5)
    images = [PHOTOS[0][:120, :90], PHOTOS[1][:40, :30], PHOTOS[2][:64, :64], PHOTOS[3][:300, :300]]
    boxes = [(3, 5, 100, 70), (0, 0, 40, 30), (0, 0, 64, 32), (0, 0, 300, 300)]
    packed, _ = K.pack_batch(images, boxes, (24, 32), hflip=rng.integers(0, 2, 4).astype(bool),
                             out_dtype=torch.uint8, interpolation="bicubic")
    for s in packed.samples:
        for ring in (True, False):
            w = cm.sample_work(s, packed.tables, ring=ring)
            total = w.ops.sum(axis=0)
            assert (total[COL["h_mac"]], total[COL["v_mac"]]) == walk_kernel(s, packed.tables, ring)
            # bands starting at rows 0, 7 and 13 of the sample
            banded = cm.dpu_work([w], 3, 0, [range(0, 7), range(7, 13), range(13, 24)]).total
            assert banded[COL["h_mac"]] == walk_kernel(s, packed.tables, ring, (0, 7, 13))[0]


def test_split_and_bands_as_the_driver_and_kernel_cut():
    assert cm.split_samples([1, 1, 1, 1], 2) == [range(0, 2), range(2, 4)]
    assert cm.split_samples([4, 1, 1, 1, 1], 2) == [range(0, 1), range(1, 5)]
    assert cm.split_samples([5, 5], 4) == [range(0, 1), range(1, 2)]        # 2 active DPUs
    # one heavy sample at the end: by work it runs alone; by pixels (all equal) it shares
    assert cm.split_samples([1, 1, 1, 1, 1, 1, 6], 2) == [range(0, 6), range(6, 7)]
    assert cm.split_by_pixels([1] * 7, 2) == [range(0, 4), range(4, 7)]
    # the least largest run: 9 (3+3+3 | 4+5 | 6 or similar), every DPU gets a sample
    runs = cm.split_samples([3, 3, 3, 4, 5, 6], 3)
    assert max(sum([3, 3, 3, 4, 5, 6][i] for i in r) for r in runs) == 9
    assert [len(r) for r in cm.split_samples([100, 1, 1, 1], 4)] == [1, 1, 1, 1]
    assert cm.bands(10, 4) == [range(0, 2), range(2, 5), range(5, 7), range(7, 10)]
    assert sum(len(b) for b in cm.bands(7, 16)) == 7
    # bands by work: 8 rows, the first 4 three times heavier than the last 4 (work 16 in all)
    assert cm.cut_bands([3, 3, 3, 3, 1, 1, 1, 1], 2) == [range(0, 3), range(3, 8)]
    assert cm.cut_bands([5], 3) == [range(0, 1), range(1, 1), range(1, 1)]
    assert sum(len(b) for b in cm.cut_bands([1] * 7, 16)) == 7


# ---- real batches on the emulator -------------------------------------------------------------

def training_batch(n, seed=0, dtype=torch.float32):
    """n photos with RandomResizedCrop(224) + flip draws from pimloader's lowering."""
    torch.manual_seed(seed)
    plan = lower(v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                             v2.ToDtype(dtype, scale=True), v2.Normalize(MEAN, STD)]))
    images = [PHOTOS[i % len(PHOTOS)] for i in range(n)]
    geometries = [plan.draw(*im.shape[:2]).geometry for im in images]
    return images, [g.box for g in geometries], [g.hflip for g in geometries]


@pytest.fixture(scope="module")
def emulated():
    """One run of 10 training crops on 8 DPUs x 16 tasklets, and one of 3 crops on 8 DPUs
    (5 of them idle), float32 NCHW."""
    results = []
    lut = K.normalize_lut(3, torch.float32, MEAN, STD)
    with DpuDriver(8, 16) as dpus:
        for n, seed in ((10, 1), (3, 2)):
            images, boxes, hflip = training_batch(n, seed)
            out = torch.empty((n, 3, 224, 224))
            dpus.reset_counters()
            dpus.run(images, boxes, (224, 224), out, hflip, None, "bilinear", "NCHW", lut)
            packed, _ = K.pack_batch(images, boxes, (224, 224), hflip=hflip, out_dtype=torch.float32)
            counters = [dpus.counters(d) for d in range(dpus.nr_dpus)]
            tasklets = [dpus.tasklet_counters(d) for d in range(dpus.nr_dpus)]
            results.append((images, boxes, out, packed, counters, dpus.run_info(),
                            cm.DpuRun.from_backend(dpus, packed, counters), tasklets))
    return results


def test_least_possible_bytes_against_numpy_sizes(emulated):
    for images, boxes, out, _, _, _, run, _ in emulated:
        crops = sum(im[t:t + h, l:l + w].nbytes for im, (t, l, h, w) in zip(images, boxes))
        assert run.least_in_bytes == crops      # a training crop's every pixel feeds the output
        assert run.least_out_bytes == out.numpy().nbytes


def test_counters_are_consistent_with_what_the_host_sent(emulated):
    for images, boxes, out, packed, counters, info, run, tasklets in emulated:
        active = info["active_dpus"]
        assert active == min(len(images), 8)
        # bytes pushed: the header to every DPU, the common padded chunk length to the active ones
        assert sum(c.host_to_dpu_bytes for c in counters) == active * info["xfer_bytes"] + (8 - active) * cm.HEADER_BYTES
        assert sum(c.dpu_to_host_bytes for c in counters) == active * info["out_xfer_bytes"]
        assert info["in_real_bytes"] <= active * info["xfer_bytes"]
        # every DPU runs the kernel, so the idle ones write their status block too
        assert sum(c.mram_write_bytes for c in counters) == info["out_real_bytes"] + (8 - active) * cm.STATUS_BYTES
        # each DPU writes exactly its samples' outputs (224 float32 = 896 B rows) + its status,
        # and each tasklet its band's rows: this checks that split_samples and cut_bands (with
        # plan_sample and row_work) cut the batch as the driver does
        plans = [cm.plan_sample(s, packed.tables, info["arena_bytes"]) for s in packed.samples]
        rows = [cm.row_work(s, packed.tables, p) for s, p in zip(packed.samples, plans)]
        for d, run_d in enumerate(cm.split_samples([int(r.sum()) for r in rows], 8)):
            assert counters[d].mram_write_bytes == len(run_d) * 3 * 224 * 896 + cm.STATUS_BYTES
            cut = cm.cut_bands(np.concatenate([rows[i] for i in run_d]), 16)
            per_tasklet = [c.mram_write_bytes for c in tasklets[d]]
            assert per_tasklet == [3 * 896 * len(b) + (cm.STATUS_BYTES if t == 0 else 0) for t, b in enumerate(cut)]
        # the emulator's own DMA cycle model is the model's nominal formula
        assert np.array_equal(run.dma_cycles_model,
                              cm.dma_cycles(run.read_calls, run.read_bytes, run.write_calls,
                                            run.write_bytes, A, "nominal").astype(np.int64))
        # every crop byte reaches MRAM at least once; reads cover the crops
        assert sum(c.mram_read_bytes for c in counters) >= run.least_in_bytes
        per = run.per_image()
        assert per["dma_ratio"] >= 1.0


def test_projection_of_a_real_run_labels_and_orders(emulated):
    run = emulated[0][-2]
    projections = cm.project_all(run)
    assert len(projections) == len(cm.SYSTEMS) * len(cm.CASES)
    for p in projections:
        assert p.t_dpu >= max(p.t_compute, p.t_dma) * (1 - 1e-12)
        assert p.images_per_s > 0 and p.dpu_imbalance >= 1.0 and p.tasklet_imbalance >= 1.0
    # a heavier kernel (e.g. the h-pass costing twice as much) is never faster
    slower = replace(A, h_mac=replace(A.h_mac, nominal=12))
    assert cm.project(run, cm.SYSTEMS[0], slower).images_per_s < cm.project(run, cm.SYSTEMS[0]).images_per_s


def test_balanced_what_if_keeps_the_work_and_is_never_slower(emulated):
    run = emulated[0][-2]
    even = cm.balanced(run)
    assert np.allclose(sum(w.total for w in even.work), sum(w.total for w in run.work))
    assert even.read_bytes[:run.active_dpus].sum() == pytest.approx(run.read_bytes.sum())
    for system in cm.SYSTEMS:
        for case in cm.CASES:
            assert cm.project(even, system, A, case).images_per_s >= cm.project(run, system, A, case).images_per_s * (1 - 1e-9)


def test_dpu_work_follows_the_tasklet_bands():
    # two samples of 4 output rows, the second twice as heavy per row; 2 tasklets take rows
    # 0-3 (sample 0) and 4-7 (sample 1); tasklet 1 loads both samples in phase 2
    def sample(cost):
        ops = np.zeros((4, len(cm.WORK)), dtype=np.int64)
        ops[:, COL["emit"]] = cost
        return cm.SampleWork(3, 4, 5, ops, 0, 0)
    work = cm.dpu_work([sample(10), sample(20)], 2, row_segments=16).per_tasklet
    assert list(work[:, COL["emit"]]) == [40, 80]
    assert list(work[:, COL["sample_load"]]) == [1 + 1, 1 + 2]
    assert list(work[:, COL["column"]]) == [5, 5]
    assert list(work[:, COL["row"]]) == [8, 8]


def test_counted_units_fit_agrees_with_scipy_nnls():
    nnls = pytest.importorskip("scipy.optimize").nnls
    from pimloader.costmodel.counted import nnls_fit
    rng = np.random.default_rng(0)
    for _ in range(100):
        design = rng.random((30, 2)) * rng.choice([1.0, 1000.0], 2)
        counted = design @ rng.normal(size=2) + rng.normal(size=30)
        np.testing.assert_allclose(nnls_fit(design, counted)[0], nnls(design, counted)[0], rtol=1e-6, atol=1e-9)
