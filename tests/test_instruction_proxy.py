"""The instruction counts of pimloader.costmodel.proxy: DPU kernels compiled for RV32IM and
RV32EM, run by csrc/proxy/rv32sim.c from the MRAM the emulator traced, must leave MRAM equal
to the emulator's (the host build of the same source); rule violations and hangs end the
replay with a clear error; the cost model's counted figures still describe today's kernel.
Skipped without riscv64-unknown-elf-gcc (Debian: gcc-riscv64-unknown-elf)."""
import os

import numpy as np
import pytest
import torch

from pimloader import costmodel as cm
from pimloader.backends import kernels as K
from pimloader.backends.dpu import emulator as E
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.costmodel import proxy

pytestmark = pytest.mark.skipif(proxy.find_cross_compiler() is None,
                                reason=f"{proxy.CROSS_COMPILER} is not installed")

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulator_kernels")
HEAP = E.HEAP_POINTER_NAME
EDGES = [0, 1, 2, 3, 7, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE,
         0xFFFFFFFF, 31, 32, 33]


@pytest.fixture
def trace(tmp_path, monkeypatch):
    folder = tmp_path / "trace"
    folder.mkdir()
    monkeypatch.setenv("DPUEMU_TRACE_DIR", str(folder))
    return folder


def arith_input(n_pairs, rng):
    a = rng.integers(0, 2**32, n_pairs, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n_pairs, dtype=np.uint64).astype(np.uint32)
    edges = np.array([(x, y) for x in EDGES for y in EDGES], dtype=np.uint32)[:n_pairs]
    a[:len(edges)], b[:len(edges)] = edges[:, 0], edges[:, 1]
    return np.concatenate([np.array([n_pairs, 0], np.uint32), np.stack([a, b], axis=1).ravel()])


@pytest.mark.parametrize("nr_tasklets", [1, 5, 16])
def test_simulator_computes_what_the_emulator_computes(trace, nr_tasklets):
    source = os.path.join(KERNELS, "arith.c")
    rng = np.random.default_rng(nr_tasklets)
    with E.DpuSet(2) as dpus:
        dpus.load(E.compile_kernel(source, nr_tasklets=nr_tasklets))
        dpus.push(HEAP, [arith_input(8 * 16 * 3, rng), arith_input(8 * 16 * 3, rng)])
        dpus.launch()
    launches = proxy.traced_launches(str(trace))
    assert len(launches) == 2 and all(launch.nr_tasklets == nr_tasklets for launch in launches)
    for isa in proxy.ISAS:
        elf = proxy.build_kernel(source, nr_tasklets=nr_tasklets, isa=isa)
        for launch in launches:
            replay = proxy.replay(elf, launch)  # raises unless MRAM equals the emulator's
            assert replay.kernel.shape == (nr_tasklets,) and replay.total > 0
            assert replay.classes["mul"] > 0 and replay.classes["div"] > 0
            assert int(replay.dma_calls.sum()) == int(replay.classes["dma"]) > 0


def test_a_wrong_result_is_caught(trace):
    source = os.path.join(KERNELS, "arith.c")
    data = arith_input(8 * 16, np.random.default_rng(0))
    with E.DpuSet(1) as dpus:
        dpus.load(E.compile_kernel(source, nr_tasklets=4))
        dpus.push(HEAP, [data])
        dpus.launch()
    launch, = proxy.traced_launches(str(trace))
    expected = bytearray(launch.mram_out.read_bytes())
    expected[-5] ^= 1
    launch.mram_out.write_bytes(bytes(expected))
    with pytest.raises(proxy.ProxyMismatch, match="differs from the emulator's"):
        proxy.replay(proxy.build_kernel(source, nr_tasklets=4), launch)


@pytest.mark.parametrize("rule, message", [(6, "mram_read: WRAM and MRAM addresses must be 8-byte aligned"),
                                           (7, "size must be a multiple of 8 from 8 to 2048 bytes")])
def test_rule_violations_end_the_replay_naming_the_rule(trace, rule, message):
    source = os.path.join(KERNELS, "bad_rules.c")
    with E.DpuSet(1) as dpus:
        dpus.load(E.compile_kernel(source, nr_tasklets=2, defines={"RULE": rule}))
        with pytest.raises(E.DpuFaultError):
            dpus.launch()
    launch, = proxy.traced_launches(str(trace))
    with pytest.raises(proxy.ProxyMismatch, match=message):
        proxy.replay(proxy.build_kernel(source, nr_tasklets=2, defines={"RULE": rule}), launch)


def test_a_hang_ends_at_the_instruction_budget(trace):
    source = os.path.join(KERNELS, "deadlock.c")
    with E.DpuSet(1) as dpus:
        dpus.load(E.compile_kernel(source, nr_tasklets=3))
        with pytest.raises(E.DpuFaultError):
            dpus.launch()
    launch, = proxy.traced_launches(str(trace))
    with pytest.raises(proxy.ProxyMismatch, match="instruction budget exhausted"):
        proxy.replay(proxy.build_kernel(source, nr_tasklets=3), launch, budget=200_000)


def test_the_kernel_fits_iram_and_its_counts_match_the_cost_model(trace):
    """The crop/resize kernel's replay equals the emulator on real photographs, its code fits
    the DPU's IRAM, and the cost model's counted figures (assumptions.py, measured by
    benchmarks.instruction_counts) predict its count within 15%: if the kernel changes, the
    figures must be counted again."""
    from skimage import data
    from pimloader.costmodel.counted import BRACKETS, WANTED, class_weights
    images = [data.astronaut(), data.chelsea(), data.coffee()]
    boxes = [(30, 40, 400, 380), (10, 0, 290, 400), (0, 100, 400, 500)]
    kwargs = dict(hflip=[True, False, True], vflip=[False] * 3, interpolation="bilinear", layout="NCHW")
    out = torch.empty((3, 3, 224, 224), dtype=torch.float32)
    lut = K.normalize_lut(3, torch.float32, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    source = os.path.join(os.path.dirname(KERNELS), "..", "dpu_src", "crop_resize.c")
    with DpuDriver(1, 16) as driver:
        driver.reset_counters()
        driver.run(images, boxes, (224, 224), out, lut=lut, **kwargs)
        packed, _ = K.pack_batch(images, boxes, (224, 224), out_dtype=torch.float32, **kwargs)
        run = cm.DpuRun.from_backend(driver, packed)
    launch, = proxy.traced_launches(str(trace))
    elf = proxy.build_kernel(source, nr_tasklets=16)
    assert proxy.static_size(elf)["instructions"] < 4096
    replay = proxy.replay(elf, launch)
    per, = proxy.by_source_function(elf, [replay], WANTED)
    counted = sum((table @ class_weights(BRACKETS["nominal"])).sum() for table in per.values())
    predicted = cm.model.compute_cycles(run.work[0], float(run.read_calls[0] + run.write_calls[0]),
                                        cm.Assumptions(), "nominal")[1]
    assert abs(predicted / counted - 1) < 0.15, (predicted, counted)
