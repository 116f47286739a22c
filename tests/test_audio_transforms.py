"""pimloader's audio transforms against their oracles.

- Resample against torchaudio's (skipped where torchaudio does not import): equal outputs.
  (The spectral transforms' tests are tests/test_audio_spectral_transforms.py.)
- The waveform augmentations against references written from their documented torch RNG
  calls, replayed under the same seed, with the noise mixed by torchaudio.functional.add_noise.
"""
from __future__ import annotations

import pytest
import torch

from pimloader import transforms as T

try:
    import torchaudio
    import torchaudio.functional as AF
    import torchaudio.transforms as AT
except Exception:  # torchaudio pins an older torch; it may not import
    torchaudio = None

needs_torchaudio = pytest.mark.skipif(torchaudio is None, reason="torchaudio does not import")


def clip(length=4000, channels=1, seed=0):
    return torch.rand(channels, length, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@needs_torchaudio
@pytest.mark.parametrize("orig, new", [(8000, 16000), (44100, 16000), (11025, 16000),
                                       (16000, 8000), (16000, 16000)])
def test_resample_equals_torchaudio(orig, new):
    from pimloader.transforms.resample import resample
    kaiser = dict(resampling_method="sinc_interp_kaiser", lowpass_filter_width=4,
                  rolloff=0.9, beta=8.0)
    ours, theirs = T.Resample(orig, new), AT.Resample(orig, new)
    ours_kaiser, theirs_kaiser = T.Resample(orig, new, **kaiser), AT.Resample(orig, new, **kaiser)
    for length in (1, 7, 3001):
        x = clip(length, channels=2)
        assert torch.equal(ours(x), theirs(x))
        assert torch.equal(ours_kaiser(x), theirs_kaiser(x))
        assert torch.equal(resample(x, orig, new), AF.resample(x, orig, new))


def test_resample_argument_errors():
    with pytest.raises(ValueError, match="whole numbers"):
        T.Resample(44100.5, 16000)
    with pytest.raises(ValueError, match="Invalid resampling method"):
        T.Resample(8000, 16000, resampling_method="linear")
    with pytest.raises(ValueError, match="Low pass filter width"):
        T.Resample(8000, 16000, lowpass_filter_width=0)


def replay(seed, reference):
    """reference() under torch.manual_seed(seed), and the next number the generator gives
    (so that a transform drawing more or less than documented fails)."""
    torch.manual_seed(seed)
    result = reference()
    return result, torch.rand(1)


def run(seed, transform, x):
    return replay(seed, lambda: transform(x))


@pytest.mark.parametrize("length", [900, 1000, 1700])
@pytest.mark.parametrize("pad_position", ["end", "start", "center", "random"])
def test_random_crop_or_pad_replays(length, pad_position):
    x = clip(1000, channels=2)

    def reference():
        if length < 1000:
            offset = int(torch.randint(0, 1000 - length + 1, (1,)))
            return x[:, offset:offset + length]
        out = torch.zeros(2, length)
        before = {"end": 0, "start": length - 1000, "center": (length - 1000) // 2}.get(
            pad_position)
        if before is None and length > 1000:
            before = int(torch.randint(0, length - 1000 + 1, (1,)))
        before = before or 0
        out[:, before:before + 1000] = x
        return out

    for seed in range(4):
        got, got_next = run(seed, T.RandomCropOrPad(length, pad_position), x)
        want, want_next = replay(seed, reference)
        assert torch.equal(got, want) and torch.equal(got_next, want_next)


def test_crop_or_pad_positions():
    x = torch.arange(1.0, 11.0)[None]
    assert T.CropOrPad(4, "start")(x).tolist() == [[7, 8, 9, 10]]
    assert T.CropOrPad(4, "center")(x).tolist() == [[4, 5, 6, 7]]
    assert T.CropOrPad(4, "end")(x).tolist() == [[1, 2, 3, 4]]
    assert T.CropOrPad(13, "center", fill=-1)(x).tolist() == [[-1, *range(1, 11), -1, -1]]
    with pytest.raises(ValueError, match="length"):
        T.RandomCropOrPad(0)
    with pytest.raises(ValueError, match="pad_position"):
        T.RandomCropOrPad(10, "left")


@pytest.mark.parametrize("rollover", [False, True])
def test_random_time_shift_replays(rollover):
    x = clip(500)

    def reference():
        if torch.rand(1) >= 0.7:
            return x
        shift = int(torch.randint(-40, 41, (1,)))
        if rollover:
            return torch.roll(x, shift, -1)
        out = torch.zeros_like(x)
        if shift >= 0:
            out[:, shift:] = x[:, :500 - shift]
        else:
            out[:, :500 + shift] = x[:, -shift:]
        return out

    for seed in range(8):
        got, got_next = run(seed, T.RandomTimeShift(40, rollover=rollover, p=0.7), x)
        want, want_next = replay(seed, reference)
        assert torch.equal(got, want) and torch.equal(got_next, want_next)


def test_random_gain_replays_and_does_not_clip():
    x = clip(300)
    for seed in range(4):
        got, got_next = run(seed, T.RandomGain(-3.0, 12.0), x)
        want, want_next = replay(seed, lambda: x * 10 ** ((-3 + 15 * float(torch.rand(1))) / 20))
        assert torch.allclose(got, want, rtol=1e-6, atol=0) and torch.equal(got_next, want_next)
    torch.manual_seed(0)
    assert T.RandomGain(12.0, 12.0)(torch.ones(1, 4)).max() > 3.9
    with pytest.raises(ValueError, match="min_gain_db"):
        T.RandomGain(6.0, -6.0)


@needs_torchaudio
@pytest.mark.parametrize("channels, noise_length", [(1, 9000), (2, 2500), (1, 4000)])
def test_add_background_noise_replays_with_torchaudio_mixing(channels, noise_length):
    x = clip(4000, channels=channels)
    noises = [clip(noise_length, seed=1)[0], clip(noise_length, channels=1, seed=2)]

    def reference():
        if torch.rand(1) >= 0.9:
            return x
        noise = noises[int(torch.randint(0, 2, (1,)))].reshape(1, -1)
        noise = noise.repeat(1, -(-4000 // noise.shape[1]))
        offset = 0
        if noise.shape[1] > 4000:
            offset = int(torch.randint(0, noise.shape[1] - 4000 + 1, (1,)))
        snr = 3.0 + 12.0 * float(torch.rand(1))
        stretch = noise[:, offset:offset + 4000].expand(channels, -1)
        return AF.add_noise(x, stretch, torch.full((channels,), snr))

    for seed in range(6):
        got, got_next = run(seed, T.AddBackgroundNoise(noises, snr=(3.0, 15.0), p=0.9), x)
        want, want_next = replay(seed, reference)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert torch.equal(got_next, want_next)


def test_add_background_noise_edges():
    noise = [clip(100)[0]]
    torch.manual_seed(0)
    assert torch.equal(T.AddBackgroundNoise(noise)(torch.zeros(1, 400)), torch.zeros(1, 400))
    loud = torch.ones(2, 400)  # clipped at full scale: the SNR still holds, finite
    mixed = T.AddBackgroundNoise(noise, snr=(10.0, 10.0))(loud)
    ratio = (loud ** 2).sum(-1) / ((mixed - loud) ** 2).sum(-1)
    torch.testing.assert_close(10 * torch.log10(ratio), torch.full((2,), 10.0), rtol=0, atol=1e-3)
    with pytest.raises(ValueError, match="silent"):
        T.AddBackgroundNoise([torch.zeros(50)])
    with pytest.raises(ValueError, match="at least one noise"):
        T.AddBackgroundNoise([])
    with pytest.raises(ValueError, match="channels cannot be mixed"):
        T.AddBackgroundNoise([clip(100, channels=3)])(clip(50, channels=2))
