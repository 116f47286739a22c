"""The DPU backend's submit/wait (csrc/dpu_driver.c over libdpu's asynchronous calls), on
pimloader's libdpu emulator: batches in flight are bit-identical to the CPU backend; the
host is free while the DPUs work; a fault in a batch in flight is reported at wait naming
the DPU, the batch queued behind it on the same rank is reported as not run, and the
backend is usable afterwards; closing with a batch in flight neither hangs nor leaks."""
import os

import numpy as np
import pytest
import torch

from pimloader.backends import kernels as K
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.errors import DpuBackendError, DpuFaultError
from test_dpu_backend import MEAN, STD, batch, bits

SIZE = (96, 112)


def job(rng, n, dtype=torch.float32, layout="NCHW", interpolation="bilinear"):
    """One batch: photos with RandomResizedCrop boxes and flips, its output and the CPU's."""
    images, boxes = batch(rng, n)
    shape = (n, 3, *SIZE) if layout == "NCHW" else (n, *SIZE, 3)
    lut = None if dtype == torch.uint8 else K.normalize_lut(3, dtype, MEAN, STD)
    hflip, vflip = rng.integers(0, 2, n).astype(bool), rng.integers(0, 2, n).astype(bool)
    args = dict(hflip=hflip, vflip=vflip, interpolation=interpolation, layout=layout, lut=lut)
    ref = torch.empty(shape, dtype=dtype)
    K.resized_crop_batch(images, boxes, SIZE, ref, **args)
    return images, boxes, torch.full(shape, 7, dtype=dtype), ref, args


def submit(dpus, work, **debug):
    images, boxes, out, _, args = work
    return dpus.submit(images, boxes, SIZE, out, args["hflip"], args["vflip"], args["interpolation"],
                       args["layout"], args["lut"], **debug)


def same(work):
    _, _, out, ref, _ = work
    return torch.equal(bits(out), bits(ref))


@pytest.mark.parametrize("nr_tasklets", [1, 11, 16])
@pytest.mark.parametrize("nr_dpus", [1, 7, 64])
def test_two_batches_in_flight_are_bit_identical_to_the_cpu(nr_dpus, nr_tasklets):
    rng = np.random.default_rng(nr_dpus * 31 + nr_tasklets)
    # 7 and 64 DPUs in ranks of 4: each batch spans several ranks
    profile = "backend=emulator" if nr_dpus == 1 else "backend=emulator,nrDpusPerRank=4"
    with DpuDriver(nr_dpus, nr_tasklets, profile) as dpus:
        works = [job(rng, 9, torch.float32), job(rng, 5, torch.uint8, "NHWC", "bicubic"),
                 job(rng, 11, torch.float16)]
        first, second = submit(dpus, works[0]), submit(dpus, works[1])
        assert dpus.pending() == 2
        with pytest.raises(DpuBackendError, match="2 batches are already in flight"):
            submit(dpus, works[2])
        second.wait()                       # out of order: the first one is settled too
        third = submit(dpus, works[2])
        first.wait()
        third.wait()
        assert dpus.pending() == 0
        assert all(same(w) for w in works)


def test_sources_may_go_once_submitted_and_out_is_written_by_wait_only():
    rng = np.random.default_rng(5)
    with DpuDriver(7, 11) as dpus:
        work = job(rng, 12)
        images = [im.copy() for im in work[0]]
        launches = dpus.counters().launches
        handle = dpus.submit(images, work[1], SIZE, work[2], **work[4])
        for im in images:                   # packed into the driver's staging by submit
            im[...] = 0
        del images
        # the emulator's counters drain the rank queues (without consuming anything, unlike
        # dpu_sync): the launch and the gather into staging are done; `out` is still untouched
        assert dpus.counters().launches > launches
        assert torch.all(work[2] == 7)
        assert handle.wait() is work[2] and same(work)


def test_the_host_is_free_while_the_dpus_work():
    """submit queues the batch and returns before the DPUs have run it. The driver's test
    hook PIM_DPU_DEBUG_HOLD queues a waiting callback ahead of the batch on every rank, so
    the batch cannot run before pim_dpu_release_hold: a submit that waited for the DPUs
    would never return by itself (a watchdog then releases the hold, and the test fails).
    What is checked is an order of events, not a duration."""
    import threading
    rng = np.random.default_rng(6)
    with DpuDriver(1, 1) as dpus:          # one DPU, one tasklet
        work = job(rng, 6)
        returned, released_by_watchdog = threading.Event(), threading.Event()

        def watchdog():
            if not returned.wait(60):
                released_by_watchdog.set()
                dpus.lib.pim_dpu_release_hold(dpus._driver())

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            handle = submit(dpus, work, debug=dpus.lib.PIM_DPU_DEBUG_HOLD)
        finally:
            returned.set()
        assert not released_by_watchdog.is_set(), "submit waited for the DPUs"
        assert dpus.pending() == 1 and torch.all(work[2] == 7)
        dpus.lib.pim_dpu_release_hold(dpus._driver())
        assert handle.wait() is work[2] and same(work)
        assert dpus.counters().launches == 1  # it ran once, after the release


def threads_and_fds():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("settle", ["sleep", "at_once"])
def test_a_fault_in_a_batch_in_flight_is_raised_at_wait_and_the_backend_recovers(settle):
    rng = np.random.default_rng(7)
    with DpuDriver(8, 11, "backend=emulator,nrDpusPerRank=4") as dpus:   # ranks: DPUs 0-3, 4-7
        bad, behind, later = job(rng, 8), job(rng, 8), job(rng, 8)
        failing = submit(dpus, bad, debug=dpus.lib.PIM_DPU_DEBUG_HALT, debug_dpu=5)
        queued = submit(dpus, behind)
        if settle == "sleep":
            # the launch fails before anyone waits: libdpu keeps the rank's error, so the
            # driver must allocate the DPUs again; "at_once": a dpu_sync was waiting for it.
            # The emulator's counters wait for the rank queues to run out (an event, where a
            # sleep could end too early on a loaded machine) and consume no error.
            dpus.counters()
        with pytest.raises(DpuFaultError, match=r"dpu_launch: DPU 5 faulted.*rule 'halt'") as info:
            failing.wait()
        assert info.value.dpu == 5
        with pytest.raises(DpuFaultError):
            failing.wait()                  # the same error again, nothing hangs
        # the next batch ran on rank 0 but libdpu dropped it on rank 1, behind the fault
        with pytest.raises(DpuBackendError, match=r"was not run on DPUs 4\.\.7 \(rank 1\).*failed there") as info:
            queued.wait()
        assert info.value.dpu == 5 and dpus.pending() == 0
        submit(dpus, later).wait()          # usable again, and right
        assert same(later)
        recoveries = dpus.recoveries()
        assert recoveries["reloads"] == 1
        if settle == "sleep":
            assert recoveries["reallocs"] == 1


def test_a_fault_in_the_second_batch_leaves_the_first_one_right():
    rng = np.random.default_rng(8)
    with DpuDriver(7, 16) as dpus:
        good, bad = job(rng, 7), job(rng, 7)
        first = submit(dpus, good)
        second = submit(dpus, bad, debug=dpus.lib.PIM_DPU_DEBUG_HALT, debug_dpu=0)
        with pytest.raises(DpuFaultError, match="DPU 0 faulted"):
            second.wait()
        assert first.wait() is good[2] and same(good)


def test_close_with_batches_in_flight_neither_hangs_nor_leaks():
    rng = np.random.default_rng(9)
    works = [job(rng, 10) for _ in range(3)]
    with DpuDriver(7, 11) as warm_up:     # thread pools of torch start once per process
        submit(warm_up, works[2]).wait()
    before = threads_and_fds()
    for debug in (0, 1):                   # a plain batch, and one that faults, left in flight
        dpus = DpuDriver(7, 11)
        first = submit(dpus, works[0], debug=debug, debug_dpu=2)
        second = submit(dpus, works[1])
        dpus.close()
        for handle in (first, second):
            with pytest.raises(DpuBackendError, match="closed with batch .* in flight"):
                handle.wait()
    assert threads_and_fds() == before


def test_a_dropped_handle_cancels_its_batch():
    rng = np.random.default_rng(10)
    with DpuDriver(7, 11) as dpus:
        work = job(rng, 9)
        handle = submit(dpus, work)
        del handle                          # cancelled: run out, nothing written
        assert dpus.pending() == 0 and torch.all(work[2] == 7)
        handle = submit(dpus, work)
        handle.cancel()
        with pytest.raises(DpuBackendError, match="cancelled"):
            handle.wait()
        assert submit(dpus, work).wait() is work[2] and same(work)


def test_loader_runs_are_at_least_one_row_per_dpu_and_at_most_half_the_batch():
    from pimloader.backends.dpu.backend import DpuBackend
    run = DpuBackend.run_rows_for
    assert run(64, 256) == 64 and run(8, 64) == 32 and run(2048, 256) == 128 and run(7, 4) == 2
    assert run(1, 1) == 1


def test_the_loader_decodes_the_next_run_while_the_dpus_work(tmp_path, monkeypatch):
    """Event order of the producer with backend='emulator': a run is submitted, rows of the
    next run are decoded, and only then is the first run waited for."""
    from benchmarks.make_dataset import make_imagenet_like
    import torchvision.transforms.v2 as v2
    from pimloader import PIMDataLoader
    from pimloader.backends.dpu import driver as B
    from pimloader.pipelines import images as I
    from pimloader.datasets import ImageFolder

    root = make_imagenet_like(tmp_path / "set", count=16, classes=2)
    events = []

    def logged(name, function):
        def call(*args, **kwargs):
            events.append(name)
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(I.ImagePipeline, "decoded_box", logged("decode", I.ImagePipeline.decoded_box))
    monkeypatch.setattr(B.DpuDriver, "submit", logged("submit", B.DpuDriver.submit))
    monkeypatch.setattr(B.DpuBatch, "wait", logged("wait", B.DpuBatch.wait))
    transform = v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    torch.manual_seed(0)
    got = list(PIMDataLoader(ImageFolder(root), batch_size=8, transform=transform, backend="emulator",
                             nr_dpus=2, nr_tasklets=11))
    dpu_events = list(events)               # the emulator's run only
    torch.manual_seed(0)
    want = list(PIMDataLoader(ImageFolder(root), batch_size=8, transform=transform, backend="cpu"))
    assert len(got) == len(want) == 2, (len(got), len(want))  # 16 photos, batches of 8
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, want, strict=True))
    # batches of 8 on 2 DPUs: runs of 4 rows, two per batch
    per_batch = ["decode"] * 4 + ["submit"] + ["decode"] * 4 + ["wait", "submit", "wait"]
    assert dpu_events == per_batch * 2
