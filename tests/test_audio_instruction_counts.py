"""The DPU log-mel kernel on the instruction-counting proxy (pimloader.costmodel.proxy).

Its arguments are a `__host` WRAM variable (DPU_AUDIO_ARGS): the emulator's trace
(DPUEMU_TRACE_DIR) records what the host wrote into WRAM symbols, as each run starts with it,
and the replay writes it into the proxy build's same symbols. Oracles: the bytes the host
broadcast (read back from the DPU with dpu_copy_from), and the emulator's MRAM after the run,
which the replay must equal byte for byte. The replays need riscv64-unknown-elf-gcc.
"""
import numpy as np
import pytest

from pimloader.backends.dpu.audio import KERNEL_SOURCE, DpuMelFeatures, DpuMelSpec
from pimloader.costmodel import proxy

needs_proxy = pytest.mark.skipif(proxy.find_cross_compiler() is None,
                                 reason=f"{proxy.CROSS_COMPILER} is not installed")
TASKLETS = 4


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """One launch of two short clips on one emulated DPU, traced: (launches, the args)."""
    folder = tmp_path / "trace"
    folder.mkdir()
    monkeypatch.setenv("DPUEMU_TRACE_DIR", str(folder))
    clips = np.random.default_rng(0).uniform(-0.3, 0.3, (2, 3000)).astype(np.float32)
    spec = DpuMelSpec(n_fft=400, hop_length=160, n_mels=40, top_db=80.0)
    with DpuMelFeatures(spec, nr_dpus=1, nr_tasklets=TASKLETS) as mel:
        mel(clips, freq_masks=[[3, 9], [0, 0]], time_masks=[[2, 5], [4, 6]])
        args = mel._live().copy_from("DPU_AUDIO_ARGS", mel._args.nbytes)
    return proxy.traced_launches(str(folder)), args.tobytes()


def test_the_trace_records_what_the_host_wrote_into_wram(traced):
    launches, args = traced
    assert len(launches) == 1 and launches[0].wram is not None
    (line,) = launches[0].wram.read_text().splitlines()
    name, offset, data = line.split(" ")
    assert (name, int(offset), bytes.fromhex(data)) == ("DPU_AUDIO_ARGS", 0, args)


@needs_proxy
@pytest.mark.parametrize("isa", sorted(proxy.ISAS))
def test_an_audio_launch_replays_to_the_emulators_mram(traced, isa):
    launches, _ = traced
    elf = proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=TASKLETS, isa=isa,
                             defines={"STACK_SIZE_DEFAULT": 1024})
    replay = proxy.replay(elf, launches[0])   # raises ProxyMismatch unless MRAM is equal
    assert replay.kernel.shape == (TASKLETS,) and (replay.kernel > 0).all()
    assert replay.classes["mul"] > 0 and replay.classes["dma"] > 0


@needs_proxy
def test_without_the_wram_arguments_the_replay_fails(traced):
    launches, _ = traced
    launch = launches[0]
    launch.wram = None
    elf = proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=TASKLETS, defines={"STACK_SIZE_DEFAULT": 1024})
    with pytest.raises(proxy.ProxyMismatch):
        proxy.replay(elf, launch)


@needs_proxy
def test_a_wram_symbol_the_proxy_build_lacks_is_refused(traced, tmp_path):
    launches, _ = traced
    launches[0].wram.write_text("NOT_A_SYMBOL 0 00000000\n")
    elf = proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=TASKLETS, defines={"STACK_SIZE_DEFAULT": 1024})
    with pytest.raises(proxy.ProxyMismatch, match="NOT_A_SYMBOL"):
        proxy.replay(elf, launches[0])


@needs_proxy
def test_the_cost_models_counted_figures_still_describe_the_kernel():
    """AudioCosts holds instructions per unit counted by benchmarks.audio_instruction_counts;
    a launch outside that fit (n_fft 400, 64 mels, top_db, masks), counted now, is within 10%
    of what they give in each case. If the kernel changes, count again."""
    from dataclasses import fields

    from benchmarks.audio_instruction_counts import STACK_BYTES, TASKLETS as FIT_TASKLETS, count_launch
    from pimloader.costmodel import audio as cost
    from pimloader.costmodel import audio_counted as ac
    elves = {isa: proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=FIT_TASKLETS, isa=isa,
                                     defines={"STACK_SIZE_DEFAULT": STACK_BYTES}) for isa in proxy.ISAS}
    launch = count_launch((400, 64, 80.0, True), elves, seed=11)
    for case in ("best", "nominal", "worst"):
        units = {f.name: getattr(cost.AudioCosts(), f.name).at(case) for f in fields(cost.AudioCosts)}
        counted = sum(launch["parts"][case].values())
        model = ac.predicted(launch["work"], units)
        assert abs(model / counted - 1) < 0.10, (case, counted, model)
