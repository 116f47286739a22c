"""The one backend interface: what runs where, and who frees the DPU sets.

The oracle for "no DPU set allocated" is the emulator's own count of the DPUs a process
has allocated and not freed (dpu_alloc minus dpu_free, counted inside libdpu's emulation),
not pimloader's bookkeeping.
"""
import os
import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2

from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader.backends.base import IMAGES, Backend, Done, ImageKernel, KernelRun
from pimloader.backends.registry import register_kernel
from pimloader.backends.cpu import CpuBackend
from pimloader.backends.dpu.backend import DpuBackend
from pimloader.backends.dpu.driver import emulator_live_dpus
from pimloader.backends.select import CPU, BackendSpec, Backends, resolve
from pimloader.datasets import ImageFolder
from pimloader.options import PipelineOptions
from pimloader.pipelines.runs import RunBatcher
from pimloader.transforms import lower

TRAIN = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                    v2.ToDtype(torch.float32, scale=True)])
EMULATOR = dict(backend="emulator", nr_dpus=2, nr_tasklets=2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("backends") / "set", count=8, classes=2)


def test_a_hundred_loaders_leave_no_dpu_set_allocated(folder):
    assert emulator_live_dpus() == 0
    for cycle in range(100):
        loader = PIMDataLoader(ImageFolder(folder), batch_size=4, transform=TRAIN, **EMULATOR)
        batches = 0
        for images, _ in loader:
            batches += 1
            assert emulator_live_dpus() == 2, f"cycle {cycle}: the loader's set is not open"
        assert batches == 2
        loader.close()
        assert emulator_live_dpus() == 0, f"cycle {cycle}: close() left DPUs allocated"


def test_a_dropped_loader_frees_its_dpu_set(folder):
    import gc
    loader = PIMDataLoader(ImageFolder(folder), batch_size=4, transform=TRAIN, **EMULATOR)
    assert len(list(loader)) == 2 and emulator_live_dpus() == 2
    del loader
    gc.collect()
    assert emulator_live_dpus() == 0


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_free_their_dpu_sets_when_they_exit(folder, tmp_path, monkeypatch, persistent):
    """Workers are forked: the recording close() below runs in them, and writes what the
    emulator counts in the worker after the worker's backends are closed."""
    log = tmp_path / "closed.txt"
    original = Backends.close

    def recording(self):
        opened = emulator_live_dpus()
        original(self)
        if os.getpid() != parent:
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {opened} {emulator_live_dpus()}\n")

    parent = os.getpid()
    monkeypatch.setattr(Backends, "close", recording)
    loader = PIMDataLoader(ImageFolder(folder), batch_size=2, transform=TRAIN, num_workers=2,
                           persistent_workers=persistent, multiprocessing_context="fork",
                           **EMULATOR)
    for _ in range(2):
        assert len(list(loader)) == 4
    loader.close()
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == (2 if persistent else 4), lines  # each worker, once as it exits
    assert all(opened == "2" and left == "0" for _, opened, left in lines), lines
    assert emulator_live_dpus() == 0  # the main process never opened one


def test_samples_the_dpu_kernel_cannot_run_go_to_the_cpu_backend():
    backends = Backends()
    try:
        router = backends.router(BackendSpec("emulator", 2, 2))
        plain = lower(TRAIN).draw(40, 50).geometry
        padded = lower(v2.Compose([v2.Pad(3), v2.RandomCrop(32)])).draw(40, 50).geometry
        coloured = lower(v2.Compose([v2.RandomCrop(32), v2.ColorJitter(0.5)])).draw(40, 50).geometry
        assert isinstance(router.backend_for(IMAGES, plain), DpuBackend)
        with pytest.warns(UserWarning, match="the DPU kernel does not pad; such samples "
                                             "run on the CPU kernel"):
            assert isinstance(router.backend_for(IMAGES, padded), CpuBackend)
        with pytest.warns(UserWarning, match="the DPU kernel does not adjust colours"):
            assert isinstance(router.backend_for(IMAGES, coloured), CpuBackend)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once per router
            assert isinstance(router.backend_for(IMAGES, coloured), CpuBackend)
        assert router.primary.unsupported(IMAGES, coloured) == "adjust colours"
        assert backends.router(CPU).chain == [backends.get(CPU)]
    finally:
        backends.close()
    assert emulator_live_dpus() == 0


class Recorder(Backend):
    """A backend that records its runs and completes them with a constant."""

    name = "recorder"
    kernel = "the recorder"

    def __init__(self, rows: int, refuses: str = "") -> None:
        self.rows, self.refuses, self.runs, self.closed = rows, refuses, [], False

    def close(self):
        super().close()
        self.closed = True


@register_kernel(IMAGES, Recorder)
class RecorderKernel(ImageKernel):
    def unsupported(self, geometry):
        return self.backend.refuses if geometry.padding is not None else ""

    def submit(self, run: KernelRun):
        self.backend.runs.append(len(run.sources))
        run.out.fill_(len(self.backend.runs))
        return Done(run.out)

    def run_rows(self, batch_rows):
        return self.backend.rows


class Chain:
    def __init__(self, *chain):
        self.chain = list(chain)

    def kernel_for(self, kind, geometry):
        return next(b for b in self.chain if not b.unsupported(kind, geometry)).kernel_for(kind)


def test_the_run_batcher_cuts_runs_at_the_backends_run_size_and_at_any_change():
    geometry = lower(v2.RandomCrop(4)).draw(8, 8).geometry
    padded = lower(v2.Compose([v2.Pad(1), v2.RandomCrop(4)])).draw(8, 8).geometry
    dpu_like, cpu_like = Recorder(3, refuses="pad"), Recorder(32)
    out = torch.zeros(10, 3, 4, 4)
    runs = RunBatcher(Chain(dpu_like, cpu_like), batch_rows=10)
    source = np.zeros((8, 8, 3), np.uint8)
    for row in range(10):
        runs.add(out, row, source, geometry.box, padded if row in (4, 5) else geometry)
    # rows 0-2 (full), 3 (cut by the padded row 4), 4-5 (cut by the change back), 6-8
    assert dpu_like.runs == [3, 1, 3] and cpu_like.runs == [2]
    runs.flush()
    assert dpu_like.runs == [3, 1, 3, 1]  # row 9
    assert [int(v) for v in out[:, 0, 0, 0]] == [1, 1, 1, 2, 1, 1, 3, 3, 3, 4]


def test_closing_backends_closes_every_one_and_raises_the_first_error():
    class Failing(Recorder):
        def close(self):
            super().close()
            raise RuntimeError("cannot free")

    backends = Backends()
    first, second = Failing(1), Recorder(1)
    backends._open = {BackendSpec("emulator"): first, CPU: second}
    with pytest.raises(RuntimeError, match="cannot free"):
        backends.close()
    assert first.closed and second.closed and len(backends) == 0


def test_backend_arguments_are_checked_once_with_clear_errors():
    with pytest.raises(ValueError, match="backend must be one of"):
        PipelineOptions(backend="gpu")
    with pytest.raises(TypeError, match="dpu_profile"):
        PipelineOptions(backend="emulator", dpu_profile=3)
    with pytest.raises(ValueError, match="nr_tasklets 1..24"):
        resolve(PipelineOptions(backend="emulator", nr_tasklets=25))
    assert resolve(PipelineOptions(backend="cpu")) == CPU
    options = PipelineOptions(backend="emulator", nr_dpus=3, nr_tasklets=4, dpu_profile="x=1")
    assert resolve(options) == BackendSpec("emulator", 3, 4, "x=1", decode=True)  # "auto": on
    assert resolve(options, "no JPEGs here") == BackendSpec("emulator", 3, 4, "x=1")


def test_backend_kinds_are_opened_through_their_registered_openers():
    from pimloader.backends.openers import opener, register_opener
    with pytest.raises(ValueError, match="a backend opener for kind 'emulator' is already registered"):
        register_opener("emulator", lambda spec: None)
    with pytest.raises(ValueError, match="no backend of kind 'gpu' is registered"):
        BackendSpec("gpu").open()
    assert opener("emulator").available()            # built with the package
    assert isinstance(CPU.open(), CpuBackend)
