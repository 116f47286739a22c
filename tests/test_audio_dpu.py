"""The DPU log-mel kernel (dpu_src/audio_features.c) on the emulator.

- the emulator's output equals the bit-exact integer model (audio_model.py) bit for bit, over
  settings, tasklet and DPU counts, masks, top_db, odd and mixed lengths;
- the model is within the stated tolerance of the float reference (torchaudio's
  MelSpectrogram + AmplitudeToDB, or the torch formulation where torchaudio will not import):
  TOLERANCE_DB below, docs/audio.md "DPU kernel";
- edge cases: silence, full-scale square waves and louder-than-full-scale input, clips shorter
  than one frame, refused clips named; rule violations on the DPU fail loudly, naming the DPU.
"""
import re

import numpy as np
import pytest
import torch

from pimloader.backends.dpu import audio as A
from benchmarks import audio_reference
from pimloader.backends.dpu.audio_model import model_features
from pimloader.backends.dpu.audio_tables import (DpuMelSpec, DpuMelTables, pack_masks, quantize_waveforms)
from pimloader.errors import DpuFaultError, DpuKernelError

# |DPU dB - float dB| over every value of synthetic clips, with top_db=80 (the setting the DPU
# path is for: without top_db, values 90 dB and more below a frame's peak are the two
# arithmetics' noise floors). benchmarks/audio_fixed_point.py measures the distribution over
# speech and synthetic clips (docs/audio.md, "DPU kernel"): largest and mean
TOLERANCE_DB = {"max": 1.5, "mean": 0.03}
RATE = 16000


def signals(n: int, length: int = RATE, seed: int = 0) -> np.ndarray:
    """Chirps, noise, decaying tones and AM tones at levels from -40 to 0 dBFS."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / RATE
    out = []
    for i in range(n):
        level = 10 ** (rng.uniform(-40, 0) / 20)
        kind = i % 4
        if kind == 0:
            x = np.sin(2 * np.pi * (rng.uniform(50, 400) + rng.uniform(1000, 3900) * t) * t)
        elif kind == 1:
            x = np.clip(rng.standard_normal(length) * 0.3, -1, 1)
        elif kind == 2:
            x = np.sin(2 * np.pi * rng.uniform(100, 4000) * t) * np.exp(-rng.uniform(1, 8) * t)
        else:
            x = np.sin(2 * np.pi * rng.uniform(200, 2000) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
        out.append(level * x)
    return np.stack(out)


def model_of(spec, pcm, gains, lengths=None, freq_masks=None, time_masks=None):
    n = len(pcm)
    lengths = np.full(n, pcm.shape[1]) if lengths is None else lengths
    return model_features(pcm, gains, lengths, DpuMelTables.build(spec), pack_masks(freq_masks, n, "f"),
                          pack_masks(time_masks, n, "t"))


def assert_bit_exact(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.int32 and g.shape == w.shape, (i, g.shape, w.shape)
        diff = np.flatnonzero(g != w)
        assert diff.size == 0, f"clip {i}: {diff.size} values differ, first at {diff[0]}: {g.ravel()[diff[0]]} != {w.ravel()[diff[0]]}"


def assert_within_tolerance(db, ref):
    err = np.abs(np.asarray(db, np.float64) - ref)
    assert err.max() <= TOLERANCE_DB["max"], err.max()
    assert err.mean() <= TOLERANCE_DB["mean"], err.mean()


@pytest.fixture(scope="module")
def mel40():
    with A.DpuMelFeatures(DpuMelSpec(n_fft=400, hop_length=160, n_mels=40, top_db=80.0), nr_dpus=3,
                          nr_tasklets=16) as mel:
        yield mel


def test_struct_layouts_match_the_header():
    cffi = pytest.importorskip("cffi")
    with open(A.KERNEL_INCLUDES[0] + "/pim_audio_dpu.h") as f:
        text = f.read().replace("PIM_AUDIO_MAX_MASKS", str(A.MAX_MASKS))
    ffi = cffi.FFI()
    ffi.cdef("\n".join(re.findall(r"typedef struct \w+ \{.*?\} \w+;", text, flags=re.S)))
    for ctype, dtype in (("pim_audio_args_t", A.ARGS_DTYPE), ("pim_audio_chunk_t", A.CHUNK_DTYPE),
                         ("pim_audio_sample_t", A.SAMPLE_DTYPE), ("pim_audio_status_t", A.STATUS_DTYPE)):
        assert ffi.sizeof(ctype) == dtype.itemsize, ctype
        for name in dtype.names:
            assert ffi.offsetof(ctype, name) == dtype.fields[name][1], (ctype, name)


@pytest.mark.parametrize("kwargs, tasklets, dpus", [
    (dict(n_fft=400, hop_length=160, n_mels=40, top_db=80.0), 16, 3),
    (dict(n_fft=512, hop_length=128, n_mels=64), 11, 2),
    (dict(n_fft=480, win_length=400, hop_length=160, n_mels=32, norm="slaney", mel_scale="slaney",
          pad_mode="constant", top_db=60.0), 3, 4),
    (dict(n_fft=256, hop_length=100, n_mels=24, center=False, f_min=100.0, f_max=6000.0), 16, 7),
])
def test_emulator_equals_the_model_bit_for_bit(kwargs, tasklets, dpus):
    spec = DpuMelSpec(**kwargs)
    rng = np.random.default_rng(1)
    waves = signals(5, 8000, seed=2)
    pcm, gains = quantize_waveforms(waves)
    lengths = np.array([8000, 7777, 4001, 8000, 5555])           # odd and mixed lengths
    freq, time = rng.integers(0, 30, (5, 2, 2)), rng.integers(0, 40, (5, 1, 2))
    with A.DpuMelFeatures(spec, nr_dpus=dpus, nr_tasklets=tasklets) as mel:
        got = mel.run_pcm(pcm, gains, lengths, freq_masks=freq, time_masks=time)
    assert_bit_exact(got, model_of(spec, pcm, gains, lengths, freq, time))
    assert [len(g) for g in got] == [spec.frames(n) for n in lengths]


def test_model_and_emulator_within_tolerance_of_the_float_reference(mel40):
    waves = signals(8)
    pcm, gains = quantize_waveforms(waves)
    feats = mel40(waves)                                           # float32 [N, n_mels, frames]
    assert feats.dtype == np.float32 and feats.shape == (8, 40, 101)
    model = model_of(mel40.spec, pcm, gains)
    assert np.array_equal(feats, np.stack([m.T / np.float32(65536) for m in model]).astype(np.float32))
    assert_within_tolerance(feats, audio_reference.reference_db(waves.astype(np.float32), mel40.spec))


def test_masks_and_top_db_follow_the_reference(mel40):
    waves = signals(4, seed=5)
    freq = np.array([[[3, 9], [30, 34]], [[0, 0], [0, 0]], [[39, 40], [0, 5]], [[10, 20], [12, 15]]])
    time = np.array([[[0, 10]], [[50, 101]], [[7, 7]], [[99, 100]]])
    feats = mel40(waves, freq_masks=freq, time_masks=time)
    ref = audio_reference.reference_db(waves.astype(np.float32), mel40.spec, freq, time)
    assert (feats[0, 3:9] == 0).all() and (feats[1, :, 50:] == 0).all() and (feats[3, :, 99] == 0).all()
    assert_within_tolerance(feats, ref)


def test_silence_gives_the_amin_floor(mel40):
    waves = np.zeros((2, RATE))
    waves[1, 4000:4100] = 0.5                                      # a click in silence
    feats = mel40(waves)
    ref = audio_reference.reference_db(waves.astype(np.float32), mel40.spec)
    assert np.abs(feats[0] - (-100.0)).max() < 1e-3                 # 10 log10(amin = 1e-10)
    assert_within_tolerance(feats, ref)


def test_full_scale_and_louder_input_neither_overflow_nor_clip(mel40):
    t = np.arange(RATE) / RATE
    square = np.where(np.sin(2 * np.pi * 1000 * t) >= 0, 32767, -32768) / 32768.0   # full-scale int16
    waves = np.stack([square, 3.0 * np.sin(2 * np.pi * 440 * t), square * 0.999])
    pcm, gains = quantize_waveforms(waves)
    assert list(gains) == [0, -2, 0]                               # 3.0 x full scale: 2 bits shifted out
    feats = mel40(waves)
    assert_bit_exact(mel40.run_pcm(pcm, gains), model_of(mel40.spec, pcm, gains))
    assert_within_tolerance(feats, audio_reference.reference_db(waves.astype(np.float32), mel40.spec))


def test_a_clip_shorter_than_one_frame():
    spec = DpuMelSpec(n_fft=400, hop_length=160, n_mels=40, top_db=80.0)
    waves = signals(2, 250, seed=3)                                # 200 < 250 < n_fft
    with A.DpuMelFeatures(spec, nr_dpus=2, nr_tasklets=3) as mel:
        feats = mel(waves)
        assert feats.shape == (2, 40, 2)
        assert_within_tolerance(feats, audio_reference.reference_db(waves.astype(np.float32), spec))
        pcm, gains = quantize_waveforms(signals(3, 400, seed=4))
        with pytest.raises(ValueError, match="sample 1 has 150 samples.*reflect padding of 200"):
            mel.run_pcm(pcm, gains, lengths=[400, 150, 400])      # torch.stft refuses it too
    with A.DpuMelFeatures(DpuMelSpec(n_fft=400, n_mels=40, center=False), nr_dpus=1, nr_tasklets=3) as mel:
        with pytest.raises(ValueError, match="sample 0 has 399 samples, shorter than one frame"):
            mel(signals(1, 399))


def test_arguments_are_checked_before_any_dpu_work(mel40):
    with pytest.raises(ValueError, match="n_fft=401"):
        DpuMelSpec(n_fft=401)
    with pytest.raises(ValueError, match="power=1.0"):
        DpuMelSpec(power=1.0)
    with pytest.raises(ValueError, match="pcm must be int16"):
        mel40.run_pcm(np.zeros((2, 1000), np.float32))
    with pytest.raises(ValueError, match="freq_masks must be"):
        mel40(signals(2), freq_masks=np.zeros((3, 1, 2)))
    with pytest.raises(ValueError, match="sample 1 has non-finite"):
        mel40(np.stack([np.zeros(RATE), np.full(RATE, np.nan)]))
    with pytest.raises(ValueError, match=r"4 clips need \d+ B of MRAM per DPU on 3 DPUs: use more DPUs"):
        mel40.run_pcm(np.zeros((4, 12_000_000), np.int16))           # 24 MB of PCM each, 2 on one DPU
    with pytest.raises(ValueError, match=r"sample 0: length 16777217 .* at most 16777216 samples"):
        mel40.run_pcm(np.zeros((1, (1 << 24) + 1), np.int16))
    with pytest.raises(ValueError, match=r"need \d+ B of WRAM .* use fewer tasklets"):
        A.DpuMelFeatures(DpuMelSpec(n_fft=2048, n_mels=128), nr_dpus=1, nr_tasklets=16)


def test_rule_violations_fail_loudly_naming_the_dpu_then_it_recovers(mel40):
    pcm, gains = quantize_waveforms(signals(6))
    with pytest.raises(DpuFaultError, match=r"DPU 1 \(clips 2..3\) faulted.*MRAM address not 8-byte aligned") as info:
        mel40.run_pcm(pcm, gains, debug=A.DEBUG_BAD_DMA, debug_dpu=1)
    assert info.value.dpu == 1
    with pytest.raises(DpuFaultError, match=r"DPU 2 \(clips 4..5\) faulted.*halt"):
        mel40.run_pcm(pcm, gains, debug=A.DEBUG_HALT, debug_dpu=2)
    assert_bit_exact(mel40.run_pcm(pcm, gains), model_of(mel40.spec, pcm, gains))


def test_the_kernel_refuses_a_corrupted_descriptor_naming_dpu_and_clip(mel40):
    pcm, gains = quantize_waveforms(signals(6))
    frames = np.full(6, mel40.spec.frames(RATE))
    runs = A.split_clips(frames, mel40.nr_dpus)
    chunks, layout = mel40._pack(pcm, gains, np.full(6, RATE), frames, (pack_masks(None, 6, ""),) * 2, runs, 0, -1)
    desc = chunks[1][A.CHUNK_DTYPE.itemsize:A.CHUNK_DTYPE.itemsize + 2 * A.SAMPLE_DTYPE.itemsize].view(A.SAMPLE_DTYPE)
    desc[1]["frames"] += 1                                         # clip 3: frames that its length does not give
    gathered = mel40._launch(chunks, layout, runs)
    with pytest.raises(DpuKernelError, match=r"DPU 1 \(clips 2..3\) refused its chunk: clip 3: .*frame count") as info:
        mel40._unpack(gathered, layout, runs, frames)
    assert info.value.dpu == 1


def test_clips_are_spread_over_dpus_by_frames():
    assert A.split_clips(np.array([10, 10, 10, 10]), 2) == [(0, 2), (2, 4)]
    assert A.split_clips(np.array([40, 10, 10, 10, 10]), 2) == [(0, 1), (1, 5)]
    runs = A.split_clips(np.array([5, 5]), 4)
    assert runs[0][0] == 0 and runs[-1][1] == 2 and all(a <= b for a, b in runs)


def test_the_torch_formulation_equals_torchaudio(monkeypatch):
    """The reference's fallback (no torchaudio) computes what torchaudio does."""
    if audio_reference.which() != "torchaudio":
        pytest.skip("torchaudio does not import here")
    spec = DpuMelSpec(n_fft=480, win_length=400, hop_length=160, n_mels=40, norm="slaney", mel_scale="slaney",
                      top_db=80.0)
    waves = signals(3, 8000, seed=9).astype(np.float32)
    with_torchaudio = audio_reference.reference_db(waves, spec)
    monkeypatch.setattr(audio_reference, "_torchaudio", lambda: None)
    assert audio_reference.which() == "torch formulation"
    assert np.abs(audio_reference.reference_db(waves, spec) - with_torchaudio).max() < 1e-3


@pytest.mark.parametrize("kwargs", [dict(n_fft=400, hop_length=160, n_mels=40, top_db=80.0),
                                    dict(n_fft=480, hop_length=160, n_mels=64)])
def test_the_cost_model_counts_the_work_the_kernel_does(kwargs):
    """costmodel.audio.frame_work walks the kernel's loops: a build that counts each unit as it
    runs (-DPIM_AUDIO_COUNT_WORK) agrees with it exactly."""
    from pimloader.costmodel import audio as cost
    spec = DpuMelSpec(**kwargs)
    waves = signals(3, 5000, seed=11)
    with A.DpuMelFeatures(spec, nr_dpus=2, nr_tasklets=4, count_work=True) as mel:
        mel(waves)
        counted = mel.work_counts().sum(axis=(0, 1))
    frames = 3 * spec.frames(5000)
    expected = cost.frame_work(DpuMelTables.build(spec))
    assert dict(zip(A.WORK_UNITS, (int(c) for c in counted))) == {u: n * frames for u, n in expected.items()}


def test_a_torchaudio_chain_runs_on_the_dpu_as_on_the_cpu_backend():
    """FeatureSpec.from_transforms (the CPU kernel's description of the work) drives the DPU
    kernel too; with the same drawn masks both backends agree within the DPU's tolerance."""
    from pimloader import transforms as T
    from pimloader.backends.audio_features import FeatureSpec, cpu_features, draw_masks
    chain = [T.MelSpectrogram(RATE, n_fft=400, hop_length=160, n_mels=40), T.AmplitudeToDB(top_db=80),
             T.FrequencyMasking(8), T.TimeMasking(20)]
    spec = FeatureSpec.from_transforms(chain, mask_value=-7.5)
    waves = signals(4, seed=12)
    generator = torch.Generator().manual_seed(0)
    drawn = [draw_masks(spec, RATE, generator=generator) for _ in range(len(waves))]
    freq, time = np.stack([f for f, _ in drawn]), np.stack([t for _, t in drawn])
    cpu = cpu_features(waves.astype(np.float32), spec, freq, time)
    with A.DpuMelFeatures(spec, nr_dpus=2, nr_tasklets=16) as mel:
        assert mel.spec == DpuMelSpec(n_fft=400, hop_length=160, n_mels=40, top_db=80.0)
        dpu = mel(waves, freq_masks=freq, time_masks=time)
    assert (dpu == -7.5).sum() == (cpu == -7.5).sum() > 0
    assert_within_tolerance(dpu, cpu)
    with pytest.raises(ValueError, match="does not compute MFCC, features not in dB"):
        A.DpuMelFeatures(FeatureSpec(n_mfcc=13, n_mels=40), nr_dpus=1)
    with pytest.raises(ValueError, match="does not compute window='hamming'"):
        DpuMelSpec.from_feature_spec(FeatureSpec(window="hamming", to_db=True))


def test_the_kernel_refuses_tables_outside_their_block():
    spec = DpuMelSpec(n_fft=256, hop_length=128, n_mels=16)
    with A.DpuMelFeatures(spec, nr_dpus=2, nr_tasklets=3) as mel:
        good = mel._args.copy()
        mel._args["log2_off"] = mel._args["tables_bytes"]           # the log table past the block's end
        with pytest.raises(DpuKernelError, match=r"DPU 0 \(clips 0..0\) refused its chunk: inconsistent arguments"):
            mel(signals(2, 2000))
        mel._args, mel._needs_load = good, True
        pcm, gains = quantize_waveforms(signals(2, 2000))
        assert_bit_exact(mel.run_pcm(pcm, gains), model_of(spec, pcm, gains))
