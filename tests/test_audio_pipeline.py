"""PIMDataLoader over an AudioFolder against torch's DataLoader over a reference dataset:
the files read by soundfile, resampled by torchaudio.functional.resample, features by
torchaudio's transforms (MelSpectrogram, AmplitudeToDB, FrequencyMasking, TimeMasking),
the waveform augmentations replayed from the same seed.

Tolerance, asserted: every feature within FEATURE_TOLERANCE_DB of the reference's, and the
masked cells (mask value 0 dB, where no feature of these clips falls) exactly where the
reference masks. Edge cases run through the same comparison: a clip shorter than one
STFT frame, silence, full-scale clipping, stereo, 8 / 11.025 / 12 / 22.05 / 44.1 kHz
files, FLAC; broken files are named (or skipped with on_error="skip").
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from torch.utils.data import DataLoader, Dataset

from pimloader import DecodeError, PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import AudioFolder

try:
    import torchaudio.functional as AF
    import torchaudio.transforms as AT
except Exception:  # torchaudio pins an older torch; it may not import
    AF = AT = None

pytestmark = pytest.mark.skipif(AT is None, reason="torchaudio (the oracle) does not import")
# the spectral steps of the loader's pipelines: pimloader's torch namesakes of torchaudio's
# transforms where this tree has them, else torchaudio's own objects (accepted as well)
SPECTRAL = T if hasattr(T, "MelSpectrogram") else AT

FEATURE_TOLERANCE_DB = 0.01
RATE = 16000
MEL = dict(sample_rate=RATE, n_fft=480, hop_length=160, n_mels=40)
# name: (rate, channels, frames, content)
CLIPS = {
    "go/tone_nohash_0.wav": (16000, 1, 12000, "tone"),
    "go/noise_nohash_0.flac": (22050, 1, 30000, "noise"),
    "go/short_nohash_0.wav": (16000, 1, 100, "noise"),       # shorter than one frame
    "go/tiny_nohash_0.wav": (8000, 1, 40, "tone"),
    "go/silence_nohash_0.wav": (16000, 1, 9000, "silence"),
    "go/stereo_nohash_0.wav": (44100, 2, 50000, "noise"),
    "stop/clipped_nohash_0.wav": (16000, 1, 20000, "clipped"),
    "stop/odd_nohash_0.wav": (11025, 1, 9000, "tone"),
    "stop/twelve_nohash_0.flac": (12000, 2, 15000, "tone"),
    "stop/long_nohash_0.wav": (16000, 1, 24000, "noise"),
    "stop/eight_nohash_0.wav": (8000, 1, 7000, "noise"),
    "stop/loud_nohash_0.wav": (16000, 2, 16000, "clipped"),
}


def content(kind, frames, channels, rate, rng):
    t = np.arange(frames) / rate
    if kind == "tone":
        wave = 0.5 * np.sin(2 * np.pi * 440 * t)[:, None].repeat(channels, 1)
    elif kind == "noise":
        wave = rng.uniform(-0.3, 0.3, (frames, channels))
    elif kind == "clipped":
        wave = np.clip(3 * np.sin(2 * np.pi * 300 * t), -1, 1)[:, None].repeat(channels, 1)
    else:
        wave = np.zeros((frames, channels))
    return wave.astype(np.float32)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    rng = np.random.default_rng(0)
    for name, (rate, channels, frames, kind) in CLIPS.items():
        path = root / name
        path.parent.mkdir(exist_ok=True)
        soundfile.write(path, content(kind, frames, channels, rate, rng), rate,
                        subtype="PCM_16")
    (root / "_background_noise_").mkdir()
    soundfile.write(root / "_background_noise_" / "hiss.wav",
                    rng.uniform(-0.5, 0.5, 30000).astype(np.float32), RATE, subtype="PCM_16")
    return root


class ReferenceClips(Dataset):
    """The reference: soundfile reads, torchaudio resamples, the transform as given."""

    def __init__(self, root: Path, transform, downmix: bool) -> None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name[0] != "_")
        self.files = sorted((path, cls) for cls, name in enumerate(classes)
                            for path in (root / name).iterdir())
        self.transform = transform
        self.downmix = downmix

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        path, target = self.files[index]
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
        waveform = torch.from_numpy(samples.T.copy())
        if self.downmix:
            waveform = waveform.mean(0, keepdim=True)
        return self.transform(AF.resample(waveform, rate, RATE)), target


def augmentations(noise):
    return [T.RandomCropOrPad(RATE, pad_position="random"), T.RandomTimeShift(800),
            T.RandomGain(-6.0, 6.0, p=0.8), T.AddBackgroundNoise(noise, snr=(5.0, 20.0), p=0.7)]


def features(module, masks=True):
    steps = [module.MelSpectrogram(**MEL), module.AmplitudeToDB(top_db=80.0)]
    if masks:
        steps += [module.FrequencyMasking(8), module.TimeMasking(20)]
    return steps


def assert_close_features(got, want, what):
    assert got.shape == want.shape, what
    masked = want == 0
    assert torch.equal(got == 0, masked), f"{what}: masks differ"
    error = (got - want).abs().max().item()
    assert error <= FEATURE_TOLERANCE_DB, f"{what}: max error {error} dB"


def compare(root, workers, loader_steps, reference_steps, downmix=True, batch_size=5):
    def loaded(cls, dataset, transform):
        torch.manual_seed(11)
        kwargs = dict(transform=transform) if cls is PIMDataLoader else {}
        loader = cls(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                     generator=torch.Generator().manual_seed(7), **kwargs)
        batches = list(loader)
        if cls is PIMDataLoader:
            loader.close()
        return batches

    want = loaded(DataLoader, ReferenceClips(root, T.Compose(reference_steps), downmix), None)
    got = loaded(PIMDataLoader, AudioFolder(root, sample_rate=RATE, downmix=downmix),
                 T.Compose(loader_steps))
    assert len(got) == len(want) > 0
    assert sum(len(labels) for _, labels in got) == sum(len(labels) for _, labels in want)
    for i, ((features_got, labels_got), (features_want, labels_want)) in enumerate(zip(got, want)):
        assert torch.equal(labels_got, labels_want)
        assert_close_features(features_got, features_want, f"batch {i}")
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_keyword_pipeline_matches_torchaudio(root, workers):
    noise = AudioFolder(root, sample_rate=RATE, downmix=True).background_noise()
    got = compare(root, workers, augmentations(noise) + features(SPECTRAL),
                  augmentations(noise) + features(AT))
    assert got[0][0].shape == (5, 1, 40, RATE // 160 + 1)
    assert torch.isfinite(torch.cat([batch[0] for batch in got])).all()


@pytest.fixture(scope="module")
def stereo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("stereo")
    rng = np.random.default_rng(1)
    for i, rate in enumerate((16000, 44100, 8000, 22050, 16000)):
        (root / "word").mkdir(exist_ok=True)
        soundfile.write(root / "word" / f"{i}.wav",
                        content("noise", rate // 2 + 300 * i, 2, rate, rng), rate)
    return root


def test_torchaudio_objects_are_accepted_stereo_kept(stereo_root):
    got = compare(stereo_root, 2, [T.CropOrPad(RATE)] + features(AT),
                  [T.CropOrPad(RATE)] + features(AT), downmix=False, batch_size=2)
    assert got[0][0].shape == (2, 2, 40, RATE // 160 + 1)


def test_the_dataset_transform_is_taken_over(root):
    steps = [T.RandomCropOrPad(8000)] + features(SPECTRAL)
    dataset = AudioFolder(root, T.Compose(steps), sample_rate=RATE, downmix=True)
    torch.manual_seed(3)
    got = list(PIMDataLoader(dataset, batch_size=6, num_workers=0))
    torch.manual_seed(3)
    want = list(DataLoader(dataset, batch_size=6, num_workers=0))
    for i, ((a, la), (b, lb)) in enumerate(zip(got, want)):
        assert torch.equal(la, lb)
        assert_close_features(a, b, f"batch {i}")
    with pytest.raises(ValueError, match="given twice"):
        PIMDataLoader(dataset, transform=T.Compose(steps))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_encoded_sample_cache_serves_clips(root, workers):
    """cache_bytes=: the clips' bytes come from the shared cache from the second epoch on
    (persistent workers), and the batches stay those of the dataset."""
    transform = T.Compose([T.CropOrPad(RATE)] + features(SPECTRAL, masks=False))
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    loader = PIMDataLoader(dataset, transform=transform, batch_size=4, num_workers=workers,
                           persistent_workers=workers > 0, cache_bytes=8 << 20)
    first, second = list(loader), list(loader)
    stats = loader.stats()
    loader.close()
    assert stats[0].cache_misses == len(CLIPS) and stats[1].cache_hits == len(CLIPS)
    for (a, la), (b, lb) in zip(first, second):
        assert torch.equal(a, b) and torch.equal(la, lb)


class LouderFolder(AudioFolder):
    def load(self, index):
        waveform, target = super().load(index)
        return waveform * 2, target


def test_a_subclass_that_loads_its_own_way_is_indexed(root):
    """The loader calls a subclass's own load (or __getitem__), as torch's DataLoader."""
    got = list(PIMDataLoader(LouderFolder(root, sample_rate=RATE, downmix=True),
                             transform=T.CropOrPad(RATE), batch_size=6))
    want = list(DataLoader(LouderFolder(root, T.CropOrPad(RATE), sample_rate=RATE,
                                        downmix=True), batch_size=6))
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(a, b) and torch.equal(la, lb)
    assert max(batch.abs().max() for batch, _ in got) > 1.5  # the clipped clips, doubled


@pytest.fixture
def broken_root(root, tmp_path):
    broken = tmp_path / "broken"
    for name in CLIPS:
        (broken / name).parent.mkdir(parents=True, exist_ok=True)
        (broken / name).write_bytes((root / name).read_bytes())
    (broken / "stop" / "zz_broken.wav").write_bytes(b"RIFF....WAVEjunk" * 4)
    return broken


@pytest.mark.parametrize("workers", [0, 2])
def test_broken_file_is_named_or_skipped(broken_root, workers):
    transform = T.Compose([T.CropOrPad(RATE)] + features(SPECTRAL, masks=False))
    dataset = AudioFolder(broken_root, sample_rate=RATE, downmix=True)
    with pytest.raises(DecodeError, match="zz_broken.wav"):
        list(PIMDataLoader(dataset, transform=transform, batch_size=4, num_workers=workers))
    loader = PIMDataLoader(dataset, transform=transform, batch_size=5, num_workers=workers,
                           on_error="skip")
    count = sum(len(labels) for _, labels in loader)
    assert count == len(CLIPS) and loader.stats()[-1].skipped_samples == 1
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_clip_too_short_for_its_frames_names_the_sample(root, workers):
    """Without a crop or pad, a clip shorter than half a frame cannot be reflect-padded:
    torch.stft's RuntimeError (the feature kernel's check raises a ValueError that says
    why), naming the sample."""
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    short = next(i for i, (path, _) in enumerate(dataset.samples) if "short" in path)
    loader = PIMDataLoader(dataset, transform=SPECTRAL.MelSpectrogram(**MEL), batch_size=1,
                           num_workers=workers)
    with pytest.raises((RuntimeError, ValueError), match="pad") as raised:
        list(loader)
    described = "\n".join([str(raised.value), *getattr(raised.value, "__notes__", [])])
    assert f"sample {short}" in described
    loader.close()


def test_which_clips_the_feature_kernel_takes(root, stereo_root):
    """With the fused kernel built, [channels, L] clips run through it, mono or stereo
    (counted in stats); a 1-D waveform and a chain that does not lower run in torch.
    Without the kernel, nothing is counted and everything runs in torch."""
    from pimloader.pipelines.audio_features import FusedFeatures, kernel_module
    built = kernel_module() is not None

    def counted(folder, steps, downmix):
        loader = PIMDataLoader(AudioFolder(folder, sample_rate=RATE, downmix=downmix),
                               transform=T.Compose(steps), batch_size=4)
        total = sum(len(labels) for _, labels in loader)
        return total, loader.stats()[-1].kernel_samples

    steps = [T.CropOrPad(RATE)] + features(SPECTRAL)
    assert counted(root, steps, True) == (len(CLIPS), len(CLIPS) if built else 0)
    assert counted(stereo_root, steps, False) == (5, 5 if built else 0)
    assert counted(root, [T.CropOrPad(RATE), first_channel] + features(SPECTRAL),
                   True) == (len(CLIPS), 0)
    unlowered = steps + [halved]
    assert FusedFeatures.lower(T.Compose(unlowered)) is None
    assert counted(root, unlowered, True) == (len(CLIPS), 0)


def test_a_fixed_normalization_after_the_masks(root):
    """torchvision's Normalize with one mean and std after the masks: on the fused route it
    lowers into the kernel (counted), and the features stay within the tolerance, scaled."""
    from pimloader.pipelines.audio_features import kernel_module
    from torchvision.transforms import v2
    steps = [T.CropOrPad(RATE)] + features(SPECTRAL) + [v2.Normalize([-30.0], [20.0])]
    reference = [T.CropOrPad(RATE)] + features(AT) + [v2.Normalize([-30.0], [20.0])]
    dataset = AudioFolder(root, sample_rate=RATE, downmix=True)
    torch.manual_seed(4)
    loader = PIMDataLoader(dataset, transform=T.Compose(steps), batch_size=6)
    got = list(loader)
    torch.manual_seed(4)
    want = list(DataLoader(ReferenceClips(root, T.Compose(reference), True), batch_size=6))
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(la, lb)
        assert (a - b).abs().max() <= FEATURE_TOLERANCE_DB / 20.0
    built = kernel_module() is not None
    assert loader.stats()[-1].kernel_samples == (len(CLIPS) if built else 0)


def first_channel(waveform):
    return waveform[0]


def halved(features):
    return features / 2
