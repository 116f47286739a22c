"""PIMDataLoader(AudioFolder, backend="emulator"): the spectral steps on the DPU log-mel kernel.

Oracles:
- the bit-exact integer model of the kernel (backends/dpu/audio_model.py, itself tested
  against the emulator and torchaudio in test_audio_dpu.py) on the waveforms torch's
  DataLoader makes from the same dataset and seed, with torchaudio's FrequencyMasking /
  TimeMasking drawing and applying the masks: the loader's batches equal it bit for bit.
  The reference makes its waveforms with the loader's own arithmetic (`loaders_waveforms`:
  its native resampling and waveform steps, which are within float32 rounding of torch's,
  tests/test_audio_waveform_native.py, but rounding to int16 can turn that into one LSB),
  so that what is compared bit for bit is the DPU path alone;
- the CPU path (backend="cpu"): within the DPU path's documented tolerance (docs/audio.md);
- clips the DPU kernel cannot take run on the CPU backend, equal to backend="cpu"'s rows;
- the emulator's own count of allocated DPUs for leaks.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import soundfile
import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from pimloader import DpuFaultError, PIMDataLoader
from pimloader import transforms as T
from pimloader.backends.base import FEATURES
from pimloader.backends.cpu import CpuBackend
from pimloader.backends.dpu import audio as dpu_audio
from pimloader.backends.dpu.audio_model import model_features
from pimloader.backends.dpu.audio_tables import DpuMelSpec, DpuMelTables, pack_masks, quantize_waveforms
from pimloader.backends.dpu.backend import DpuBackend
from pimloader.backends.dpu.driver import emulator_live_dpus
from pimloader.backends.select import Router, upmem_available
from pimloader.datasets import AudioFolder
from pimloader.errors import DpuBackendError
from pimloader.pipelines.audio_features import kernel_module, native_waveform_steps

try:
    import torchaudio.transforms as AT
except Exception:  # torchaudio pins an older torch; pimloader's namesakes equal it (tested)
    AT = T

pytestmark = pytest.mark.skipif(kernel_module() is None, reason="the fused audio kernel is not built")

RATE = 16000
MEL = dict(sample_rate=RATE, n_fft=480, hop_length=160, n_mels=40)
TOP_DB = 80.0
DPUS = dict(backend="emulator", nr_dpus=3, nr_tasklets=4)
# docs/audio.md, "What fixed point costs": |DPU dB - float dB| with top_db=80
TOLERANCE_DB = {"max": 1.5, "mean": 0.03}
CLIPS = {  # name: (rate, channels, frames, kind)
    "go/tone_nohash_0.wav": (16000, 1, 12000, "tone"),
    "go/noise_nohash_0.wav": (22050, 1, 30000, "noise"),
    "go/short_nohash_0.wav": (16000, 1, 700, "noise"),
    "go/silence_nohash_0.wav": (16000, 1, 9000, "silence"),
    "go/stereo_nohash_0.wav": (44100, 2, 50000, "noise"),
    "stop/clipped_nohash_0.wav": (16000, 1, 20000, "clipped"),
    "stop/eight_nohash_0.wav": (8000, 1, 7000, "tone"),
    "stop/long_nohash_0.wav": (16000, 1, 24000, "noise"),
    "stop/quiet_nohash_0.wav": (16000, 1, 16000, "quiet"),
}


def content(kind, frames, channels, rate, rng):
    t = np.arange(frames) / rate
    wave = {"tone": lambda: 0.5 * np.sin(2 * np.pi * 440 * t),
            "noise": lambda: rng.uniform(-0.3, 0.3, frames),
            "clipped": lambda: np.clip(3 * np.sin(2 * np.pi * 300 * t), -1, 1),
            "quiet": lambda: 1e-3 * np.sin(2 * np.pi * (200 + 3000 * t) * t),
            "silence": lambda: np.zeros(frames)}[kind]()
    return np.repeat(wave[:, None], channels, 1).astype(np.float32)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech_dpu")
    rng = np.random.default_rng(3)
    for name, (rate, channels, frames, kind) in CLIPS.items():
        (root / name).parent.mkdir(exist_ok=True)
        soundfile.write(root / name, content(kind, frames, channels, rate, rng), rate, subtype="PCM_16")
    (root / "_background_noise_").mkdir()
    soundfile.write(root / "_background_noise_" / "hiss.wav",
                    rng.uniform(-0.5, 0.5, 30000).astype(np.float32), RATE, subtype="PCM_16")
    return root


@pytest.fixture(autouse=True)
def no_dpu_left():
    assert emulator_live_dpus() == 0
    yield
    assert emulator_live_dpus() == 0, "a test left DPUs allocated"


class ModelFeatures:
    """The reference's spectral step: the DPU path's arithmetic as the integer model
    specifies it (int16 with a power-of-two gain, then the kernel), no masks, as float32."""

    def __init__(self) -> None:
        self.tables = DpuMelTables.build(DpuMelSpec(**MEL, top_db=TOP_DB))

    def __call__(self, waveform):
        pcm, gains = quantize_waveforms(waveform.numpy())
        (rows,) = model_features(pcm, gains, [pcm.shape[1]], self.tables, pack_masks(None, 1, "f"),
                                 pack_masks(None, 1, "t"))
        return torch.from_numpy(rows.T.astype(np.float64) / 65536.0).float()[None]


def loaders_waveforms(dataset: AudioFolder, steps: list):
    """(the dataset resampling as the loader does, its waveform steps run as the loader runs
    them): natively where built, else as they are."""
    native = native_waveform_steps(steps)
    if native is None:
        return dataset, steps
    from pimloader.backends.audio_waveform import resample
    dataset.decoding = dataclasses.replace(dataset.decoding, resample=resample)
    return dataset, [functools.partial(_run_natively, native)]


def _run_natively(native, waveform):
    operations, _ = native.draw(tuple(waveform.shape))
    return torch.from_numpy(native.run([waveform], [operations])[0])


def waveform_steps(root):
    noise = AudioFolder(root, sample_rate=RATE, downmix=True).background_noise()
    return [T.RandomCropOrPad(RATE, pad_position="random"), T.RandomTimeShift(800),
            T.RandomGain(-6.0, 6.0, p=0.8), T.AddBackgroundNoise(noise, snr=(5.0, 20.0), p=0.7)]


def spectral(module=T, masks=True):
    steps = [module.MelSpectrogram(**MEL), module.AmplitudeToDB(top_db=TOP_DB)]
    return steps + ([module.FrequencyMasking(8), module.TimeMasking(20)] if masks else [])


def batches(cls, dataset, workers=0, batch_size=4, seed=5, **kwargs):
    torch.manual_seed(seed)
    loader = cls(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                 generator=torch.Generator().manual_seed(seed), **kwargs)
    got = list(loader)
    if cls is PIMDataLoader:
        loader.close()
    return got


def assert_bit_exact(got, want):
    assert len(got) == len(want) > 0
    for i, ((features, labels), (features_want, labels_want)) in enumerate(zip(got, want)):
        assert torch.equal(labels, labels_want), f"batch {i}: labels"
        assert features.dtype == features_want.dtype and features.shape == features_want.shape
        differ = (features != features_want).sum().item()
        assert differ == 0, f"batch {i}: {differ} values differ from the integer model"


@pytest.mark.parametrize("workers", [0, 2])
def test_emulator_batches_equal_the_integer_model(root, workers):
    steps = waveform_steps(root)
    reference, reference_steps = loaders_waveforms(AudioFolder(root, sample_rate=RATE, downmix=True),
                                                   steps)
    reference.transform = T.Compose(
        reference_steps + [ModelFeatures(), AT.FrequencyMasking(8), AT.TimeMasking(20)])
    want = batches(DataLoader, reference, workers)
    got = batches(PIMDataLoader, AudioFolder(root, sample_rate=RATE, downmix=True), workers,
                  transform=T.Compose(steps + spectral()), **DPUS)
    assert_bit_exact(got, want)
    assert got[0][0].shape == (4, 1, 40, RATE // 160 + 1)


def test_emulator_loader_is_within_tolerance_of_the_cpu_path(root):
    """backend="cpu" is the float path (itself within 0.01 dB of torchaudio): the DPU path
    stays within the fixed point's documented tolerance, the masks on the same cells."""
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    transform = T.Compose(waveform_steps(root) + spectral())
    cpu = torch.cat([f for f, _ in batches(PIMDataLoader, dataset, transform=transform, backend="cpu")])
    dpu = torch.cat([f for f, _ in batches(PIMDataLoader, dataset, transform=transform, **DPUS)])
    assert torch.equal(cpu == 0, dpu == 0), "masks differ"
    error = (cpu.double() - dpu.double()).abs()
    assert error.max() <= TOLERANCE_DB["max"] and error.mean() <= TOLERANCE_DB["mean"], \
        (error.max().item(), error.mean().item())
    assert error.max() > 0, "the DPU path was not taken"


def test_a_normalisation_after_the_masks_runs_on_the_host(root):
    """torchvision's Normalize with one mean and std: the DPU kernel stops at the masks and
    the host normalises, so batches equal the model's features normalised by torchvision."""
    norm = v2.Normalize([-40.0], [20.0])
    reference, crop = loaders_waveforms(AudioFolder(root, sample_rate=RATE, downmix=True),
                                        [T.CropOrPad(RATE)])
    reference.transform = T.Compose(
        crop + [ModelFeatures(), AT.FrequencyMasking(8), AT.TimeMasking(20), norm])
    want = batches(DataLoader, reference)
    got = batches(PIMDataLoader, AudioFolder(root, sample_rate=RATE, downmix=True),
                  transform=T.Compose([T.CropOrPad(RATE)] + spectral() + [norm]), **DPUS)
    assert_bit_exact(got, want)


def test_stereo_clips_run_on_the_cpu_backend_mono_ones_on_the_dpus(root):
    """Kept stereo (downmix=False), a clip's channels share one top_db floor, which the
    kernel keeps per mono clip: such clips go to the CPU backend (said once, as a warning)
    and equal backend="cpu"'s; the mono ones equal the integer model."""
    dataset = AudioFolder(root, sample_rate=RATE, downmix=False)
    transform = T.Compose([T.CropOrPad(RATE)] + spectral(masks=False))
    in_order = dict(transform=transform, batch_size=4, collate_fn=lambda samples: samples)
    loader = PIMDataLoader(dataset, **in_order, **DPUS)
    with pytest.warns(UserWarning, match="the DPU kernel does not take clips of more than one "
                                         "channel; such clips run on the CPU kernel"):
        got = [sample for batch in loader for sample in batch]
    loader.close()
    cpu = [sample for batch in PIMDataLoader(dataset, backend="cpu", **in_order) for sample in batch]
    model = ModelFeatures()
    assert len(got) == len(cpu) == len(CLIPS)
    as_loaded, _ = loaders_waveforms(AudioFolder(root, sample_rate=RATE, downmix=False),
                                     [T.CropOrPad(RATE)])
    for (features, _), (cpu_features, _), (path, _), (waveform, _) in zip(got, cpu, dataset.samples,
                                                                        as_loaded):
        if "stereo" in path:
            assert features.shape[0] == 2 and torch.equal(features, cpu_features)
        else:
            assert torch.equal(features, model(T.CropOrPad(RATE)(waveform))), path


@pytest.mark.parametrize("chain, refusal", [
    (lambda: [T.MFCC(RATE, n_mfcc=13, melkwargs=dict(n_fft=480, hop_length=160, n_mels=40))], "MFCC"),
    (lambda: [T.Spectrogram(n_fft=480, hop_length=160), T.AmplitudeToDB(top_db=TOP_DB)], "n_mels=None"),
    (lambda: spectral(masks=False) + [T.TimeMasking(5) for _ in range(5)], "more than 4 masks"),
    (lambda: [T.MelSpectrogram(RATE, n_fft=2048, hop_length=512, n_mels=128),
              T.AmplitudeToDB(top_db=TOP_DB)], "WRAM"),
])
def test_specs_the_dpu_kernel_does_not_compute_run_on_the_cpu_backend(root, chain, refusal):
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    transform = T.Compose([T.CropOrPad(RATE)] + chain())
    with pytest.warns(UserWarning, match=f"the DPU kernel does not .*{refusal}.*; such clips run "
                                         f"on the CPU kernel"):
        got = batches(PIMDataLoader, dataset, transform=transform, backend="emulator",
                      nr_dpus=2, nr_tasklets=16)
    want = batches(PIMDataLoader, dataset, transform=transform, backend="cpu")
    for (features, _), (features_want, _) in zip(got, want, strict=True):
        assert torch.equal(features, features_want)


def test_an_upmem_backend_sends_every_clip_to_the_cpu_backend():
    """The kernel's host module drives the emulator only: on an UPMEM backend (no SDK
    needed to ask, its DPU sets open on first use) every clip goes to the CPU backend."""
    from pimloader.transforms.audio_spec import FeatureSpec
    spec = FeatureSpec.from_transforms(spectral())
    router = Router([DpuBackend(2, 4, emulated=False), CpuBackend()])
    with pytest.warns(UserWarning, match="does not compute audio features on UPMEM DPUs yet"):
        assert isinstance(router.backend_for(FEATURES, (spec, (1, RATE))), CpuBackend)
    for backend in router.chain:
        backend.close()


@pytest.mark.parametrize("options, error, match", [
    (dict(backend="dpu"), ValueError, "backend must be one of"),
    (dict(backend="emulator", nr_tasklets=25), ValueError, "nr_tasklets"),
    (dict(backend="emulator", nr_dpus=0), ValueError, "nr_dpus"),
    (dict(backend="emulator", dpu_profile=3), TypeError, "dpu_profile"),
    (dict(backend="upmem"), DpuBackendError, "UPMEM SDK"),
])
def test_argument_errors(root, options, error, match):
    if options["backend"] == "upmem" and upmem_available():
        pytest.skip("the UPMEM SDK build is present")
    with pytest.raises(error, match=match):
        PIMDataLoader(AudioFolder(root, sample_rate=RATE), transform=T.Compose(spectral()), **options)


def test_a_dpu_fault_names_the_dpu_and_its_clips_and_the_next_epoch_recovers(root, monkeypatch):
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    with PIMDataLoader(dataset, batch_size=6, transform=T.Compose([T.CropOrPad(RATE)] + spectral()),
                       **DPUS) as loader:
        monkeypatch.setattr(dpu_audio.DpuMelFeatures, "run_pcm", functools.partialmethod(
            dpu_audio.DpuMelFeatures.run_pcm, debug=dpu_audio.DEBUG_HALT, debug_dpu=1))
        with pytest.raises(DpuFaultError, match=r"DPU 1 \(sample \d+ \(\S+_nohash_0\.wav\), "
                                                r"sample \d+ \(\S+\.wav\)\) faulted .* halt"):
            list(loader)
        assert emulator_live_dpus() == DPUS["nr_dpus"]
        monkeypatch.undo()
        assert sum(len(labels) for _, labels in loader) == len(CLIPS)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_clip_with_a_nan_sample_is_named(tmp_path, workers):
    (tmp_path / "word").mkdir()
    for i in range(3):
        wave = np.full(RATE, 0.1, np.float32)
        wave[100] = np.nan if i == 1 else 0.1
        soundfile.write(tmp_path / "word" / f"{i}.wav", wave, RATE, subtype="FLOAT")
    with PIMDataLoader(AudioFolder(tmp_path), batch_size=3, num_workers=workers,
                       transform=T.Compose(spectral()), **DPUS) as loader:
        with pytest.raises(ValueError, match=r"sample 1 \(\S+1\.wav\) has a NaN or infinite sample"):
            list(loader)


def test_close_frees_the_dpus_of_an_audio_loader(root):
    """The DPU set is open while the loader is (nr_dpus of the emulator's count), freed by
    close() and by a dropped loader's finalizer; no image DPU set is opened for clips."""
    import gc
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    for close in (True, False):
        loader = PIMDataLoader(dataset, batch_size=4, transform=T.Compose([T.CropOrPad(RATE)] + spectral()),
                               **DPUS)
        assert sum(len(labels) for _, labels in loader) == len(CLIPS)
        assert emulator_live_dpus() == DPUS["nr_dpus"]
        if close:
            loader.close()
        del loader
        gc.collect()
        assert emulator_live_dpus() == 0


@pytest.mark.parametrize("normalize", ["per_sample", (-30.0, 12.5)])
def test_the_hosts_normalisation_is_the_cpu_kernels(normalize):
    """What the DPU backend applies after its kernel (normalise_features) against the CPU
    kernel's own normalisation of the same features (float32; sums in another order)."""
    import dataclasses

    from pimloader.backends.audio_features import FeatureSpec, cpu_features
    from pimloader.transforms.audio_spec import normalise_features
    spec = FeatureSpec.from_transforms(spectral(masks=False))
    waves = np.random.default_rng(2).uniform(-0.5, 0.5, (3, 1, 5000)).astype(np.float32)
    want = cpu_features(waves, dataclasses.replace(spec, normalize=normalize))
    got = normalise_features(cpu_features(waves, spec), normalize)
    assert np.abs(got - want).max() <= 4 * np.finfo(np.float32).eps * np.abs(want).max()
