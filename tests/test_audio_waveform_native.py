"""The audio pipeline's native waveform steps (backends/audio_waveform.py, csrc/audio_waveform.c)
and native PCM decoding against their torch references, under the same seed.

Oracle: pimloader's waveform transforms run in torch, clip by clip (their draws are replayed
against hand-written torch references in tests/test_audio_transforms.py). The native route
must draw exactly the same random numbers (the generator's state after a run is compared)
and give, asserted:
- crop, pad, time shift (fill or rollover) and gain: torch's floats exactly (torch.equal);
- noise mixing: within NOISE_TOLERANCE of torch's output, relative to the clip's peak after
  mixing: the only difference is how the two energies are summed (double here, float32 in
  torch's order), which moves the noise's scale by a few float32 ulps;
- resampling: within RESAMPLE_TOLERANCE of torchaudio.functional.resample, relative to the
  output's peak (the same float32 products, summed in another order than conv1d's, and the
  filters' ~1e-24 window tails left out).
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
import torch

from pimloader import transforms as T
from pimloader.transforms import waveform as wave

audio_waveform = pytest.importorskip("pimloader.backends.audio_waveform",
                                     reason="the native audio module is not built")
WaveformSteps = audio_waveform.WaveformSteps

NOISE_TOLERANCE = 1e-6   # max |native - torch| / max |torch| over a clip, with noise mixed
RESAMPLE_TOLERANCE = 1e-6  # max |native - torchaudio| / max |torchaudio| (measured 2.6e-7)

try:
    import torchaudio.functional as AF
except Exception:  # torchaudio pins an older torch; it may not import
    AF = None


def clip(length, channels=1, seed=0, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(channels, length, generator=generator) * 2 - 1) * scale


def sources(channels=1):
    """Clips longer and shorter than the 1000-sample crop, exactly as long, one sample,
    silence, and clipping (full scale, then louder than full scale)."""
    return [clip(1700, channels, 1), clip(640, channels, 2), clip(1000, channels, 3),
            clip(1, channels, 4), torch.zeros(channels, 1200),
            clip(900, channels, 5).sign(), clip(1300, channels, 6, scale=3.0)]


def run_both(steps, clips, seed):
    """(torch outputs, native outputs [N, C, L], each one's generator state after)."""
    torch.manual_seed(seed)
    want = [T.Compose(steps)(x) for x in clips]
    want_state = torch.get_rng_state()
    native = WaveformSteps.lower(steps)
    assert native is not None
    torch.manual_seed(seed)
    operations = [native.draw(tuple(x.shape))[0] for x in clips]
    got_state = torch.get_rng_state()
    return torch.stack(want), torch.from_numpy(native.run(clips, operations)), want_state, got_state


NOISES = [clip(700, seed=10)[0], clip(2500, seed=11), clip(5000, 2, seed=12)]


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("pad_position", ["random", "center"])
@pytest.mark.parametrize("rollover", [False, True])
def test_crop_pad_shift_gain_equal_torch(channels, pad_position, rollover):
    steps = [T.RandomCropOrPad(1000, pad_position=pad_position, fill=0.25),
             T.RandomTimeShift(300, fill=-0.5, rollover=rollover, p=0.7),
             T.RandomGain(-12.0, 12.0, p=0.8), T.CropOrPad(800, "start")]
    for seed in range(6):
        want, got, want_state, got_state = run_both(steps, sources(channels), seed)
        assert torch.equal(got, want), seed
        assert torch.equal(got_state, want_state), seed   # the same draws, no more


def test_shifts_longer_than_the_clip_without_a_crop():
    """No crop first: each clip keeps its own length through shifts of up to 300 samples,
    more than the shorter clips hold (rollover wraps around them several times)."""
    for rollover in (False, True):
        steps = [T.RandomTimeShift(300, fill=0.5, rollover=rollover), T.RandomGain(-3.0, 3.0)]
        for length in (1, 7, 100, 2000):
            for seed in range(3):
                want, got, want_state, got_state = run_both(steps, [clip(length, 2, seed)], seed)
                assert torch.equal(got, want) and torch.equal(got_state, want_state)


@pytest.mark.parametrize("channels", [1, 2])
def test_noise_mix_within_tolerance_of_torch(channels):
    noises = NOISES if channels == 2 else NOISES[:2]
    steps = [T.RandomCropOrPad(1000, pad_position="random"), T.RandomTimeShift(100),
             T.RandomGain(-6.0, 6.0, p=0.8), T.AddBackgroundNoise(noises, (-5.0, 30.0), p=0.8),
             T.AddBackgroundNoise(noises[:1], (10.0, 10.0))]
    worst = 0.0
    for seed in range(8):
        want, got, want_state, got_state = run_both(steps, sources(channels), seed)
        assert torch.equal(got_state, want_state), seed
        peak = want.abs().amax(dim=(1, 2)).clamp_min(1e-30)
        error = ((got - want).abs().amax(dim=(1, 2)) / peak).max().item()
        worst = max(worst, error)
    assert worst <= NOISE_TOLERANCE, worst
    silent = sources(channels)[4]   # a silent clip stays silent
    torch.manual_seed(0)
    native = WaveformSteps.lower(steps)
    out = native.run([silent], [native.draw(tuple(silent.shape))[0]])
    assert not out.any()


def test_noise_shorter_than_the_clip_repeats_and_mono_noise_fills_every_channel():
    steps = [T.AddBackgroundNoise([clip(37, seed=20)[0]], (0.0, 0.0))]
    for seed in range(4):
        want, got, _, _ = run_both(steps, [clip(1000, 2, seed)], seed)
        assert (got - want).abs().max() <= NOISE_TOLERANCE * want.abs().max()
        added = (got[0] - clip(1000, 2, seed)).double()
        unit = added / added.norm(dim=1, keepdim=True)  # the same noise, scaled per channel
        torch.testing.assert_close(unit[0], unit[1], rtol=0, atol=1e-5)
        torch.testing.assert_close(added[:, 37:], added[:, :-37], rtol=0, atol=1e-5)  # repeated


def test_errors_and_what_is_not_lowered():
    noise_steps = [T.AddBackgroundNoise([clip(100, 3)])]
    native = WaveformSteps.lower(noise_steps)
    with pytest.raises(ValueError, match="3 channels cannot be mixed"):
        native.draw((2, 400))

    class Louder(T.RandomGain):
        pass
    assert WaveformSteps.lower([T.RandomGain(), Louder()]) is None
    assert WaveformSteps.lower([T.RandomGain(), lambda x: x]) is None
    assert not WaveformSteps.takes(torch.zeros(400))             # 1-D: the torch route
    assert not WaveformSteps.takes(torch.zeros(1, 400, dtype=torch.float64))
    crop = WaveformSteps.lower([T.CropOrPad(500)])
    x = clip(300)
    with pytest.raises(ValueError, match="clip 1 ends 300 samples long, its slot holds 500"):
        crop.run([x, x], [crop.draw((1, 300))[0], []])
    with pytest.raises(ValueError, match="clip 0, operation 0: unknown kind 9"):
        crop.run([x], [[(9, 0, 0, 0, 0.0)]])
    with pytest.raises(ValueError, match="clip 0, operation 0: noise 0 from sample 0, of 0"):
        crop.run([x], [[(audio_waveform.lib.PIM_WAVE_NOISE, 0, 0, 0, 1.0), *crop.draw((1, 300))[0]]])


def test_the_coin_compares_in_float32_as_torch_does(monkeypatch):
    """RandomGain(p=0.7) etc. skip when torch.rand(1) >= p, which torch compares in float32:
    at u = float32(0.7) (below 0.7) the step is skipped; the native route's draws agree."""
    boundary = torch.tensor([np.float32(0.7)])
    monkeypatch.setattr(wave, "rand1", lambda *args, **kwargs: boundary.item())
    assert bool(boundary >= 0.7) is True
    assert wave._skipped(0.7) is True
    assert wave._skipped(0.7000001) is False


def wav_bytes(subtype, channels, frames=777, rate=16000, seed=0):
    encoded = io.BytesIO()
    signal = np.random.default_rng(seed).uniform(-1, 1, (frames, channels))
    soundfile.write(encoded, signal, rate, format="WAV", subtype=subtype)
    return encoded.getvalue()


@pytest.mark.parametrize("subtype, channels", [("PCM_16", 1), ("PCM_16", 2), ("PCM_24", 2),
                                               ("FLOAT", 3)])
def test_decoding_without_the_native_module_is_the_same(monkeypatch, subtype, channels):
    """A build without pimloader._audio reads 16-bit WAVs with numpy and the rest with
    libsndfile: the same floats, and the same channel mean, as the native path."""
    from pimloader.decode import audio as decoding
    data = wav_bytes(subtype, channels)
    native = [decoding.decode_audio(data, "a.wav", downmix=d)[0] for d in (False, True)]
    monkeypatch.setattr(decoding, "_audio", None)
    fallback = [decoding.decode_audio(data, "a.wav", downmix=d)[0] for d in (False, True)]
    for got, want in zip(native, fallback):
        np.testing.assert_array_equal(got, want)


def test_pipeline_takes_the_native_steps_and_a_subclass_runs_in_torch():
    """FusedFeatures lowers pimloader's own augmentations to the native steps; one subclass
    among them sends every waveform step through torch; both give the same features (no
    noise mixed: exactly)."""
    from pimloader.backends.cpu import CpuBackend
    from pimloader.backends.select import Router
    from pimloader.pipelines.audio_features import FusedFeatures

    class MyGain(T.RandomGain):
        pass
    features = [T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=40),
                T.AmplitudeToDB(top_db=80.0), T.TimeMasking(10)]
    native = FusedFeatures.lower(T.Compose([T.RandomCropOrPad(4000, pad_position="random"),
                                            T.RandomGain(p=0.5)] + features))
    in_torch = FusedFeatures.lower(T.Compose([T.RandomCropOrPad(4000, pad_position="random"),
                                              MyGain(p=0.5)] + features))
    if native is None:
        pytest.skip("the fused feature kernel is not built")
    assert native.native_steps is not None and in_torch.native_steps is None
    clips = [clip(n, seed=n) for n in (3000, 4000, 6000, 5000)]
    results = []
    for fused in (native, in_torch):
        torch.manual_seed(5)
        results.append(torch.stack(fused.finish([fused.prepare(x) for x in clips],
                                                Router([CpuBackend()]))))
    assert torch.equal(results[0], results[1])


@pytest.mark.skipif(AF is None, reason="torchaudio (the oracle) does not import")
@pytest.mark.parametrize("orig, new", [(8000, 16000), (44100, 16000), (11025, 16000),
                                       (22050, 16000), (12000, 16000), (16000, 8000),
                                       (48000, 44100), (16000, 16000)])
def test_resample_within_tolerance_of_torchaudio(orig, new):
    for length, channels, scale in ((1, 1, 1.0), (7, 2, 1.0), (3001, 2, 3.0), (orig, 1, 1.0)):
        x = clip(length, channels, seed=length, scale=scale)   # scale 3: past full scale
        want = AF.resample(x, orig, new)
        got = audio_waveform.resample(x, orig, new)
        assert got.shape == want.shape and got.dtype == torch.float32
        error = (got - want).abs().max() / want.abs().max().clamp_min(1e-30)
        assert error <= RESAMPLE_TOLERANCE, (length, error.item())
    silence = torch.zeros(1, 999)
    assert not audio_waveform.resample(silence, orig, new).any()


def test_the_loader_resamples_natively_the_dataset_exactly(tmp_path):
    """PIMDataLoader's decoding takes the native resampler on the native route; indexing the
    AudioFolder keeps torchaudio's (transforms/resample.py, bit-identical to it)."""
    from pimloader.datasets import AudioFolder
    from pimloader.pipelines.audio import build
    from pimloader.options import PipelineOptions
    from pimloader.transforms.resample import resample as exact
    (tmp_path / "word").mkdir()
    soundfile.write(tmp_path / "word" / "a.wav", np.zeros((800, 1)), 8000, subtype="PCM_16")
    dataset = AudioFolder(tmp_path, sample_rate=16000)
    assert dataset.decoding.resample is exact
    steps = [T.CropOrPad(16000), T.MelSpectrogram(16000, n_fft=400, n_mels=40)]
    pipeline = build(dataset, T.Compose(steps), PipelineOptions(backend="cpu"))
    built = pipeline.fused is not None
    assert (pipeline.decoding.resample is audio_waveform.resample) == built


def test_single_draws_without_a_tensor_each_are_torchs():
    """transforms/_rng.py: rand1 and randint1 give torch.rand(1) and torch.randint's numbers
    and leave the generator where they leave it (default and explicit generators)."""
    from pimloader.transforms._rng import rand1, randint1
    for generator in (None, torch.Generator()):
        seeded = (lambda: torch.manual_seed(9)) if generator is None else (
            lambda: generator.manual_seed(9))
        seeded()
        want = [float(torch.rand(1, generator=generator)) for _ in range(20)]
        want += [int(torch.randint(-7, 50, (1,), generator=generator)) for _ in range(20)]
        want.append(float(torch.rand(1, generator=generator)))
        seeded()
        got = [rand1(generator) for _ in range(20)] + [randint1(-7, 50, generator) for _ in range(20)]
        got.append(float(torch.rand(1, generator=generator)))
        assert got == want
