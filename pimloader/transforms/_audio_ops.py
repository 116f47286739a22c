"""The audio ops pimloader lowers, registered once each (transforms/registry.py): the
spectral steps (read into a FeatureSpec, transforms/audio_spec.py) and the waveform steps
(drawn per clip, transforms/audio_draw.py), pimloader's and, once a torchaudio transform is
looked up, torchaudio's. Matched exactly (`subclasses=False`): a subclass may compute
something else, and runs in torch.
"""
from __future__ import annotations

import importlib
from types import SimpleNamespace

from . import _audio_read as R
from . import audio_draw as D
from . import spectral, waveform
from ._masking import FrequencyMasking, TimeMasking
from .registry import MASK, SPECTROGRAM, TO_DB, WAVEFORM, register_op


def _register_features(module) -> None:
    """The spectral steps of `module` (pimloader.transforms' or torchaudio.transforms')."""
    for cls, role, read in ((module.Spectrogram, SPECTROGRAM, R.read_spectrogram_features),
                            (module.MelSpectrogram, SPECTROGRAM, R.read_mel_spectrogram),
                            (module.MFCC, SPECTROGRAM, R.read_mfcc),
                            (module.AmplitudeToDB, TO_DB, R.read_amplitude_to_db),
                            (module.FrequencyMasking, MASK, R.read_mask),
                            (module.TimeMasking, MASK, R.read_mask)):
        register_op(cls, role, features=read, subclasses=False)


_register_features(SimpleNamespace(
    Spectrogram=spectral.Spectrogram, MelSpectrogram=spectral.MelSpectrogram,
    MFCC=spectral.MFCC, AmplitudeToDB=spectral.AmplitudeToDB,
    FrequencyMasking=FrequencyMasking, TimeMasking=TimeMasking))
register_op(waveform.CropOrPad, WAVEFORM, draw=D.draw_crop_or_pad, subclasses=False)
register_op(waveform.RandomCropOrPad, WAVEFORM, draw=D.draw_random_crop_or_pad,
            subclasses=False)
register_op(waveform.RandomTimeShift, WAVEFORM, draw=D.draw_time_shift, subclasses=False)
register_op(waveform.RandomGain, WAVEFORM, draw=D.draw_gain, subclasses=False)
register_op(waveform.AddBackgroundNoise, WAVEFORM, draw=D.draw_background_noise,
            subclasses=False)


def register_torchaudio() -> None:
    """torchaudio's spectral steps. The registry calls this when it first meets an object of
    torchaudio's, so torchaudio is imported by then (pimloader does not need it, and
    importing it takes seconds)."""
    _register_features(importlib.import_module("torchaudio.transforms"))
