"""The fused CPU audio feature kernel against torchaudio (pure-torch namesakes without it).

Oracle: torchaudio.transforms run per example (a waveform [L] -> features [C, T], as a
pipeline applies them to one sample), on a chirp, white noise, a clipped chirp, quiet noise,
speech (espeak-ng when installed, else a synthetic vowel) and silence, 16037 samples each
(not a multiple of any hop). Tolerances, asserted in every comparison:
  * features before the log: |mine - ref| <= REL_TOL * (the example's largest value);
  * dB: |mine - ref| <= DB_TOL over every cell whose power lies within 80 dB of the example's
    peak (every cell when top_db <= 80 floors the rest); deeper cells are float32 round-off
    in both (torch's float32 features differ from float64 there by as much as ours);
  * MFCC (dB mels, top_db 80, through the DCT): |mine - ref| <= DB_TOL.
Measured with `python -m benchmarks.audio_kernel --accuracy`: 0.0025 dB and 3.7e-7 (torch's
own float32 error against float64: 0.0015 dB and 3.4e-7).
"""
import numpy as np
import pytest
import torch

from benchmarks.audio_kernel import reference_signals
from pimloader import transforms as pim_transforms
from pimloader.backends.audio_features import (FeatureSpec, MaskSpec, cpu_features,
                                               draw_masks, ffi, lib, simd_level)

try:
    import torchaudio.transforms as REF
except Exception:  # not installed, or built for another torch: the pure-torch formulation
    REF = pim_transforms

DB_TOL = 0.01
REL_TOL = 2e-6
SR = 16000
LENGTH = 16037
SIGNALS = reference_signals(LENGTH)
WAVES = np.stack(list(SIGNALS.values())).astype(np.float32)

# Default MelSpectrogram arguments (n_mels=128, n_fft=400) leave some filters empty: torchaudio
# warns, and pimloader's transforms repeat that warning on purpose (asserted in
# test_audio_spectral_transforms.py::test_empty_filter_warning_is_torchaudios).
EMPTY_FILTERS = pytest.mark.filterwarnings("ignore:At least one mel filterbank has all zero values")


@pytest.fixture(params=[0, 1], ids=["portable", "avx2"])
def simd(request):
    if request.param > simd_level(-1):
        pytest.skip("no AVX2 + FMA on this CPU")
    simd_level(request.param)
    yield request.param
    simd_level(-1)


def reference(chain, waves: np.ndarray = WAVES) -> np.ndarray:
    outs = []
    for w in waves:
        y = torch.from_numpy(w)
        for t in chain:
            y = t(y)
        outs.append(y.numpy())
    return np.stack(outs)


def _per_example_max(x):
    return x.max(axis=tuple(range(1, x.ndim)), keepdims=True)


def assert_power_close(got, ref):
    peak = _per_example_max(ref)
    err = (np.abs(got - ref) / np.where(peak > 0, peak, 1)).max()
    assert err <= REL_TOL, f"relative error {err:.3g} > {REL_TOL}"


def assert_db_close(got, ref, spec: FeatureSpec):
    # cells whose power is within 80 dB of the example's peak: 4 * multiplier * power dB
    floor = _per_example_max(ref) - 4 * spec.multiplier * spec.power
    err = np.where(ref >= floor, np.abs(got - ref), 0).max()
    assert err <= DB_TOL, f"dB error {err:.3g} > {DB_TOL}"


MEL_CASES = [  # (MelSpectrogram kwargs, AmplitudeToDB kwargs or None)
    (dict(n_fft=400, hop_length=160), dict(top_db=80)),
    (dict(n_fft=512, hop_length=128, center=False, mel_scale="slaney", norm="slaney"), {}),
    (dict(n_fft=1024, hop_length=160, power=1.0, norm="slaney"),
     dict(stype="magnitude", top_db=80)),
    (dict(n_fft=400, hop_length=128, center=False, power=1.0, mel_scale="slaney"),
     dict(stype="magnitude")),
    (dict(n_fft=512, hop_length=160, n_mels=40), None),
    (dict(n_fft=1024, hop_length=128, center=False, mel_scale="slaney", norm="slaney",
          f_min=50.0, f_max=7000.0), dict(top_db=80)),
    (dict(n_fft=512, win_length=300, hop_length=160, pad=50, window_fn=torch.hamming_window,
          normalized=True, pad_mode="constant"), dict(top_db=80)),
]


@pytest.mark.parametrize("mel_args, db_args", MEL_CASES)
def test_mel_features_match_reference(simd, mel_args, db_args):
    chain = [REF.MelSpectrogram(SR, **dict(dict(n_mels=64), **mel_args))]
    if db_args is not None:
        chain.append(REF.AmplitudeToDB(**db_args))
    spec = FeatureSpec.from_transforms(chain)
    got, ref = cpu_features(WAVES, spec), reference(chain)
    assert got.shape == ref.shape == (len(WAVES),) + spec.out_shape(LENGTH)
    if db_args is None:
        assert_power_close(got, ref)
    else:
        assert_db_close(got, ref, spec)
        silence = list(SIGNALS).index("silence")
        assert np.all(got[silence] == ref[silence])   # log of amin, exactly


@pytest.mark.parametrize("spec_args", [
    dict(n_fft=400, hop_length=160),
    dict(n_fft=441, hop_length=128, normalized="frame_length", pad_mode="replicate", pad=30),
    dict(n_fft=294, hop_length=100, window_fn=torch.blackman_window, pad_mode="circular"),
    dict(n_fft=320, hop_length=160, win_length=250, pad=20, window_fn=torch.bartlett_window),
    dict(n_fft=256, hop_length=64, center=False, power=0.7, window_fn=torch.ones),
])
def test_linear_spectrogram_matches_reference(simd, spec_args):
    chain = [REF.Spectrogram(**spec_args), REF.AmplitudeToDB(top_db=80)]
    spec = FeatureSpec.from_transforms(chain)
    assert spec.n_mels is None and spec.rows == spec.n_fft // 2 + 1
    assert_power_close(cpu_features(WAVES, FeatureSpec.from_transforms(chain[:1])),
                       reference(chain[:1]))
    assert_db_close(cpu_features(WAVES, spec), reference(chain), spec)


@pytest.mark.parametrize("mfcc_args", [
    dict(n_mfcc=40, melkwargs=dict(n_fft=400, hop_length=160, n_mels=64)),
    dict(n_mfcc=13, log_mels=True, melkwargs=dict(n_fft=512, hop_length=128, n_mels=40,
                                                  center=False)),
    dict(n_mfcc=20, norm=None, melkwargs=dict(n_fft=400, hop_length=160, n_mels=40,
                                              mel_scale="slaney", norm="slaney")),
])
def test_mfcc_matches_reference(simd, mfcc_args):
    chain = [REF.MFCC(SR, **mfcc_args)]
    got, ref = cpu_features(WAVES, FeatureSpec.from_transforms(chain)), reference(chain)
    assert got.shape == ref.shape
    err = np.abs(got - ref).max()
    assert err <= DB_TOL, f"MFCC error {err:.3g} > {DB_TOL}"


def test_fft_matches_numpy_for_every_radix(simd):
    rng = np.random.default_rng(3)
    for n_fft in (1, 2, 3, 7, 16, 30, 49, 121, 122, 400, 441, 512, 1000, 1024, 2310):
        frames = rng.standard_normal((11, n_fft)).astype(np.float32)
        re = np.empty((11, n_fft // 2 + 1), np.float32)
        im = np.empty_like(re)
        err = ffi.new("char[]", 128)
        assert lib.pim_audio_rfft(ffi.cast("float *", ffi.from_buffer(frames)), 11, n_fft,
                                  ffi.cast("float *", ffi.from_buffer(re)),
                                  ffi.cast("float *", ffi.from_buffer(im)), err, 128) == 0
        truth = np.fft.rfft(frames.astype(np.float64))
        assert np.abs(re + 1j * im - truth).max() <= 1e-6 * np.abs(truth).max(), n_fft


def _reference_with_masks(chain, waves, seed, normalize):
    torch.manual_seed(seed)
    outs = []
    for w in waves:
        y = torch.from_numpy(w).unsqueeze(0)            # [1, L]: one mono example
        for t in chain:
            y = t(y)
        y = y[0]
        if normalize == "per_sample":
            y = (y - y.mean()) / (y.std() + 1e-5)
        elif normalize is not None:
            y = (y - normalize[0]) / normalize[1]
        outs.append(y.numpy())
    return np.stack(outs)


@pytest.mark.parametrize("normalize", [None, "per_sample", (-40.0, 20.0)])
def test_masks_and_normalisation_follow_the_reference_draws(normalize):
    chain = [REF.MelSpectrogram(SR, n_fft=400, hop_length=160, n_mels=64),
             REF.AmplitudeToDB(top_db=80), REF.FrequencyMasking(12), REF.TimeMasking(30, p=0.2),
             REF.FrequencyMasking(8, iid_masks=True), REF.TimeMasking(500)]
    spec = FeatureSpec.from_transforms(chain, normalize=normalize)
    assert [m.axis for m in spec.masks] == ["frequency", "time", "frequency", "time"]
    for seed in (0, 7):
        torch.manual_seed(seed)
        drawn = [draw_masks(spec, LENGTH) for _ in WAVES]
        freq = np.stack([f for f, _ in drawn])
        time = np.stack([t for _, t in drawn])
        got = cpu_features(WAVES, spec, freq, time)
        ref = _reference_with_masks(chain, WAVES, seed, normalize)
        db = _reference_with_masks(chain, WAVES, seed, None)
        if normalize is None:
            tolerance = DB_TOL
        elif normalize == "per_sample":   # mean and std move by at most the dB error
            tolerance = 2 * DB_TOL / (db.reshape(len(db), -1).std(axis=1) + 1e-5)[:, None, None]
        else:
            tolerance = DB_TOL / normalize[1]
        masked = np.zeros(got.shape, bool)
        for i in range(len(WAVES)):
            for start, end in freq[i]:
                masked[i, start:end] = True
            for start, end in time[i]:
                masked[i, :, start:end] = True
        assert masked.any()
        assert np.all(np.abs(got - ref) <= tolerance)
        if normalize is None:
            assert np.all(got[masked] == 0.0) and np.all(ref[masked] == 0.0)


def test_stereo_examples_share_the_floor_and_draw_iid_masks_per_channel(simd):
    chain = [REF.MelSpectrogram(SR, n_fft=512, hop_length=160, n_mels=40),
             REF.AmplitudeToDB(top_db=80), REF.FrequencyMasking(10, iid_masks=True),
             REF.TimeMasking(20), REF.TimeMasking(15, iid_masks=True, p=0.3)]
    spec = FeatureSpec.from_transforms(chain, normalize="per_sample")
    stereo = np.stack([WAVES[:3], WAVES[:3] * 1e-3], axis=1)    # [3 examples, 2 channels, L]
    torch.manual_seed(11)
    drawn = [draw_masks(spec, LENGTH, channels=2) for _ in stereo]
    freq, time = (np.stack([d[axis] for d in drawn]) for axis in (0, 1))
    assert freq.shape == (3, 2, 1, 2) and time.shape == (3, 2, 2, 2)
    got = cpu_features(stereo, spec, freq, time)
    torch.manual_seed(11)
    ref, db = [], []
    for example in stereo:
        y = torch.from_numpy(example)
        for t in chain:
            y = t(y)
        db.append(y.numpy())
        ref.append(((y - y.mean()) / (y.std() + 1e-5)).numpy())
    ref, db = np.stack(ref), np.stack(db)
    tolerance = 2 * DB_TOL / (db.reshape(3, -1).std(axis=1) + 1e-5)[:, None, None, None]
    assert got.shape == ref.shape == (3, 2) + spec.out_shape(LENGTH)
    assert np.all(np.abs(got - ref) <= tolerance)
    unmasked = FeatureSpec.from_transforms(chain[:2])
    shared = reference(chain[:2], stereo)              # each [2, L] example: one floor
    assert_db_close(cpu_features(stereo, unmasked), shared, unmasked)
    per_channel = cpu_features(stereo.reshape(6, LENGTH), unmasked).reshape(shared.shape)
    assert np.abs(per_channel - shared).max() > 1      # a floor per channel would differ


def test_draw_masks_replay_torchaudio_on_one_example():
    spec = FeatureSpec(n_mels=40, hop_length=160, to_db=True, masks=(
        MaskSpec("frequency", 15), MaskSpec("time", 40, p=0.1), MaskSpec("time", 0),
        MaskSpec("frequency", 200), MaskSpec("time", 7, iid_masks=True)))
    steps = [REF.FrequencyMasking(15), REF.TimeMasking(40, p=0.1), REF.TimeMasking(0),
             REF.FrequencyMasking(200), REF.TimeMasking(7, iid_masks=True)]
    n_rows, n_frames = spec.out_shape(LENGTH)
    for seed in range(40):
        torch.manual_seed(seed)
        freq, time = draw_masks(spec, LENGTH)
        after_draws = torch.get_rng_state()
        torch.manual_seed(seed)
        ones = torch.ones(1, n_rows, n_frames)
        rows, cols = [], []
        for step in steps:   # each mask alone on a fresh tensor shows its interval
            hit = (step(ones) == 0)[0]
            rows.append(hit.all(dim=1).nonzero()), cols.append(hit.all(dim=0).nonzero())
        expected_freq = [rows[0], rows[3]]
        expected_time = [cols[1], cols[2], cols[4]]
        for got, want in zip(list(freq) + list(time), expected_freq + expected_time):
            assert list(range(got[0], got[1])) == want.flatten().tolist()
        assert time[1].tolist() == [0, 0]     # mask_param 0: nothing drawn
        assert torch.equal(torch.get_rng_state(), after_draws)   # as many draws, no more


@EMPTY_FILTERS
def test_short_long_and_odd_lengths():
    spec = FeatureSpec(n_fft=400, hop_length=160, n_mels=40, to_db=True, top_db=80)
    for length in (201, 399, 400, 401, 16000, 16159, 16161):
        waves = np.random.default_rng(length).standard_normal((2, length)).astype(np.float32)
        chain = [REF.MelSpectrogram(SR, n_fft=400, hop_length=160, n_mels=40),
                 REF.AmplitudeToDB(top_db=80)]
        assert_db_close(cpu_features(waves, spec), reference(chain, waves), spec)
    for length in (1, 100, 200):                      # reflect needs more than n_fft // 2
        short = np.zeros((1, length), np.float32)
        with pytest.raises(RuntimeError):
            REF.MelSpectrogram(SR, n_fft=400)(torch.from_numpy(short[0]))
        with pytest.raises(ValueError, match="too short"):
            cpu_features(short, spec)
    constant = FeatureSpec(n_fft=400, hop_length=160, n_mels=40, pad_mode="constant")
    short = np.random.default_rng(0).standard_normal((1, 100)).astype(np.float32)
    chain = [REF.MelSpectrogram(SR, n_fft=400, hop_length=160, n_mels=40, pad_mode="constant")]
    assert_power_close(cpu_features(short, constant), reference(chain, short))
    with pytest.raises(ValueError, match="shorter than n_fft"):
        cpu_features(short, FeatureSpec(n_fft=400, center=False))


def test_out_slots_and_argument_errors():
    spec = FeatureSpec(n_fft=400, hop_length=160, n_mels=40)
    waves = WAVES[:2]
    out = np.full((3,) + spec.out_shape(LENGTH), np.nan, np.float32)
    assert cpu_features(waves, spec, None, None, out[1:]) is not None
    assert np.isnan(out[0]).all() and not np.isnan(out[1:]).any()
    torch_out = torch.empty((2,) + spec.out_shape(LENGTH))
    no_masks = np.zeros((2, 0, 2), np.int32)                # K = 0, as draw_masks gives it
    cpu_features(waves, spec, no_masks, no_masks, torch_out)
    np.testing.assert_array_equal(torch_out.numpy(), out[1:])
    with pytest.raises(ValueError, match="float32"):
        cpu_features(waves.astype(np.float64), spec)
    with pytest.raises(ValueError, match="out must be"):
        cpu_features(waves, spec, None, None, np.empty((2, 40, 5), np.float32))
    with pytest.raises(ValueError, match="mask"):
        cpu_features(waves, spec, np.array([[[0, 41]], [[0, 1]]], np.int32))
    with pytest.raises(ValueError, match="int32"):
        cpu_features(waves, spec, None, np.zeros((2, 1, 2), np.int64))
    for bad in (np.nan, np.inf, -np.inf):
        broken = waves.copy()
        broken[1, 777] = bad
        out[:] = 5.0
        with pytest.raises(ValueError, match="waveform 1 has a NaN or infinite sample"):
            cpu_features(broken, spec, None, None, out[1:])
        assert np.all(out == 5.0)   # nothing written


def test_feature_spec_checks_its_arguments():
    assert FeatureSpec().out_shape(16000) == (128, 81)     # MelSpectrogram's defaults
    assert FeatureSpec(n_fft=512, win_length=400).hop_length == 200
    assert FeatureSpec(stype="magnitude", to_db=True).multiplier == 20.0
    for bad, message in [(dict(window="kaiser"), "window"), (dict(win_length=500), "win_length"),
                         (dict(pad_mode="symmetric"), "pad_mode"), (dict(power=0), "power"),
                         (dict(normalized="yes"), "normalized"), (dict(mel_scale="bark"), "mel"),
                         (dict(f_min=9000.0), "f_min"), (dict(top_db=-3.0), "top_db"),
                         (dict(n_mfcc=200), "MFCC"), (dict(normalize="global"), "normalize"),
                         (dict(normalize=(0.0, 0.0)), "normalize"),
                         (dict(masks=(MaskSpec("time", 3), "x")), "MaskSpec")]:
        with pytest.raises(ValueError, match=message):
            FeatureSpec(**bad)
    with pytest.raises(ValueError, match="axis"):
        MaskSpec("channel", 3)


@EMPTY_FILTERS
def test_unsupported_chains_are_refused_with_the_step():
    mel = REF.MelSpectrogram(SR)

    class MyMel(type(mel)):
        pass

    cases = [
        ([REF.AmplitudeToDB()], "start with"),
        ([MyMel(SR)], "start with"),
        ([REF.Spectrogram(power=None)], "complex"),
        ([REF.Spectrogram(window_fn=torch.kaiser_window)], "window"),
        ([mel, REF.FrequencyMasking(4), REF.AmplitudeToDB()], "step 2"),
        ([REF.MFCC(SR), REF.AmplitudeToDB()], "MFCC"),
        ([mel, torch.nn.Identity()], "step 1"),
        ([REF.Spectrogram(n_fft=998)], "prime factor"),
    ]
    for chain, message in cases:
        with pytest.raises(ValueError, match=message):
            FeatureSpec.from_transforms(chain)
