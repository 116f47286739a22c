"""pimloader.transforms' torchaudio namesakes (Spectrogram, MelScale, MelSpectrogram,
AmplitudeToDB, MFCC, FrequencyMasking, TimeMasking) against torchaudio itself: the same
attributes, tables and outputs, bit for bit (the same float32 operations in the same order),
and the same random masks under the same seed. Skipped where torchaudio does not import."""
import numpy as np
import pytest
import torch

from pimloader import transforms as P
from pimloader.backends.audio_features import FeatureSpec

ta = pytest.importorskip("torchaudio", exc_type=ImportError)
import torchaudio.functional as TF  # noqa: E402
import torchaudio.transforms as TA  # noqa: E402

from pimloader.transforms import spectral  # noqa: E402

WAVES = torch.randn(3, 1, 8000, generator=torch.Generator().manual_seed(5)) * 0.2

# Default MelSpectrogram arguments (n_mels=128, n_fft=400) leave some filters empty: torchaudio
# warns, and pimloader's transforms repeat that warning on purpose (asserted in
# test_audio_spectral_transforms.py::test_empty_filter_warning_is_torchaudios).
EMPTY_FILTERS = pytest.mark.filterwarnings("ignore:At least one mel filterbank has all zero values")


@pytest.mark.parametrize("args", [
    (201, 0.0, 8000.0, 64, 16000, None, "htk"),
    (257, 20.0, 7600.0, 40, 16000, "slaney", "slaney"),
    (513, 0.0, 11025.0, 128, 22050, "slaney", "htk"),
    (201, 300.0, 3000.0, 80, 8000, None, "slaney"),
])
def test_filter_banks_and_dct_are_torchaudios_bit_for_bit(args):
    assert torch.equal(spectral.melscale_fbanks(*args), TF.melscale_fbanks(*args))
    for norm in (None, "ortho"):
        assert torch.equal(spectral.create_dct(13, 40, norm), TF.create_dct(13, 40, norm))


CASES = [
    ("Spectrogram", dict()),
    ("Spectrogram", dict(n_fft=512, hop_length=128, power=1.0, normalized="frame_length")),
    ("Spectrogram", dict(n_fft=300, win_length=200, pad=7, center=False, normalized=True,
                         window_fn=torch.hamming_window)),
    ("MelSpectrogram", dict()),
    ("MelSpectrogram", dict(sample_rate=8000, n_fft=256, hop_length=80, n_mels=40, f_min=50.0,
                            f_max=3800.0, norm="slaney", mel_scale="slaney",
                            pad_mode="replicate")),
    ("AmplitudeToDB", dict()),
    ("AmplitudeToDB", dict(stype="magnitude", top_db=60.0)),
    ("MFCC", dict()),
    ("MFCC", dict(n_mfcc=13, norm=None, log_mels=True,
                  melkwargs=dict(n_fft=512, hop_length=160, n_mels=40))),
]


@EMPTY_FILTERS
@pytest.mark.parametrize("name, kwargs", CASES)
def test_same_attributes_and_outputs(name, kwargs):
    ours, theirs = getattr(P, name)(**kwargs), getattr(TA, name)(**kwargs)
    for attribute, value in vars(theirs).items():
        if not attribute.startswith("_") and not isinstance(value, torch.nn.Module):
            assert getattr(ours, attribute) == value, attribute
    for buffer_name, buffer in theirs.named_buffers():
        assert torch.equal(dict(ours.named_buffers())[buffer_name], buffer), buffer_name
    x = WAVES.abs() + 1e-3 if name == "AmplitudeToDB" else WAVES
    assert torch.equal(ours(x), theirs(x))
    if name != "AmplitudeToDB":
        assert FeatureSpec.from_transforms([ours]) == FeatureSpec.from_transforms([theirs])


def test_top_db_floor_is_per_example_as_torchaudios():
    x = torch.rand(4, 2, 20, 30) * torch.tensor([1.0, 1e-6, 1e-3, 0.0]).view(4, 1, 1, 1)
    for shape in ((20, 30), (2, 20, 30), (4, 2, 20, 30)):
        y = x.reshape(-1)[: int(np.prod(shape))].reshape(shape)
        assert torch.equal(P.AmplitudeToDB(top_db=40)(y), TA.AmplitudeToDB(top_db=40)(y))


@pytest.mark.parametrize("make", [
    lambda m: m.FrequencyMasking(10), lambda m: m.FrequencyMasking(50, iid_masks=True),
    lambda m: m.TimeMasking(25), lambda m: m.TimeMasking(25, p=0.1),
    lambda m: m.TimeMasking(300, iid_masks=True, p=0.5), lambda m: m.TimeMasking(0),
])
@pytest.mark.parametrize("shape", [(40, 101), (1, 40, 101), (3, 2, 40, 101)])
def test_masks_draw_and_fill_as_torchaudio(make, shape):
    spec = torch.randn(shape)
    for seed in range(5):
        torch.manual_seed(seed)
        try:
            ours = make(P)(spec, mask_value=-7.0)
        except ValueError as error:       # iid masks need >= 3 dimensions, as in torchaudio
            with pytest.raises(ValueError, match=str(error)[:30]):
                torch.manual_seed(seed)
                make(TA)(spec, mask_value=-7.0)
            continue
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        assert torch.equal(ours, make(TA)(spec, mask_value=-7.0))
        assert torch.equal(torch.get_rng_state(), state)


@EMPTY_FILTERS
def test_argument_errors_match():
    for make in (lambda m: m.TimeMasking(5, p=1.5), lambda m: m.AmplitudeToDB(top_db=-1),
                 lambda m: m.MFCC(n_mfcc=200), lambda m: m.MFCC(dct_type=3),
                 lambda m: m.MelSpectrogram(f_min=9000.0)):
        with pytest.raises(ValueError) as theirs:
            make(TA)
        with pytest.raises(ValueError, match=str(theirs.value)[:25].replace("(", r"\(")):
            make(P)


def test_empty_filter_warning_is_torchaudios():
    with pytest.warns(UserWarning, match="all zero values") as theirs:
        TA.MelSpectrogram(n_mels=128, n_fft=400)
    with pytest.warns(UserWarning, match="all zero values") as ours:
        P.MelSpectrogram(n_mels=128, n_fft=400)
    assert str(ours[0].message) == str(theirs[0].message)
