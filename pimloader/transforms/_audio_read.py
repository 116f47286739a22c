"""Readers of torchaudio-style transform objects into FeatureSpec's arguments.

A transform is read only when its class is registered (transforms/registry.py: torchaudio's
own or pimloader's namesake, exactly: a subclass may compute something else), by its op's
`features`, and only for what its forward uses: the
window buffer is matched against torch's window functions, MelScale's filter bank against the
one its arguments give. Anything else is refused with the step and the reason.
"""
from __future__ import annotations

import torch

from .registry import MASK, SPECTROGRAM, TO_DB, op_of
from .spectral import melscale_fbanks

WINDOWS = {"hann": torch.hann_window, "hamming": torch.hamming_window,
           "blackman": torch.blackman_window, "bartlett": torch.bartlett_window,
           "rectangular": torch.ones}


def role_of(transform) -> str | None:
    """The audio feature role of `transform`'s registered op (spectrogram, to_db, mask), or
    None."""
    op = op_of(transform)
    return op.role if op is not None and op.role in (SPECTROGRAM, TO_DB, MASK) else None


def window_name(window: torch.Tensor) -> str:
    values = window.detach().to("cpu", torch.float32)
    for name, make in WINDOWS.items():
        if torch.equal(values, make(values.numel(), dtype=torch.float32)):
            return name
    raise ValueError(f"the spectrogram's window ({values.numel()} values) is none of torch's "
                     f"periodic {', '.join(WINDOWS)} windows, the ones the fused kernel builds")


def read_spectrogram(t) -> dict:
    if t.power is None:
        raise ValueError("Spectrogram(power=None) returns complex values, which the fused "
                         "kernel does not compute")
    if not t.onesided:
        raise ValueError("Spectrogram(onesided=False) is not computed by the fused kernel")
    return dict(n_fft=t.n_fft, win_length=t.win_length, hop_length=t.hop_length, pad=t.pad,
                window=window_name(t.window), center=t.center, pad_mode=t.pad_mode,
                power=float(t.power), normalized=t.normalized)


def read_mel_spectrogram(t) -> dict:
    spec, scale = t.spectrogram, t.mel_scale
    if scale.n_stft != spec.n_fft // 2 + 1:
        raise ValueError(f"MelScale(n_stft={scale.n_stft}) does not match n_fft={spec.n_fft}")
    args = dict(read_spectrogram(spec), sample_rate=scale.sample_rate, n_mels=scale.n_mels,
                f_min=float(scale.f_min), f_max=float(scale.f_max), norm=scale.norm,
                mel_scale=scale.mel_scale)
    expected = melscale_fbanks(scale.n_stft, args["f_min"], args["f_max"], scale.n_mels,
                               scale.sample_rate, scale.norm, scale.mel_scale)
    if not torch.equal(scale.fb.detach().to("cpu", torch.float32), expected):
        raise ValueError("the MelSpectrogram's filter bank (mel_scale.fb) is not the one its "
                         "arguments give; a custom filter bank is not lowered")
    return args


def read_amplitude_to_db(t) -> dict:
    return dict(to_db=True, stype=t.stype, top_db=None if t.top_db is None else float(t.top_db),
                multiplier=float(t.multiplier), amin=float(t.amin),
                db_multiplier=float(t.db_multiplier))


def read_mfcc(t) -> dict:
    args = dict(read_mel_spectrogram(t.MelSpectrogram), n_mfcc=t.n_mfcc, dct_type=t.dct_type,
                dct_norm=t.norm, log_mels=bool(t.log_mels))
    if not t.log_mels:
        args.update(read_amplitude_to_db(t.amplitude_to_DB))
    return args


def read_mask(t) -> dict:
    return dict(axis="frequency" if t.axis == 1 else "time", mask_param=int(t.mask_param),
                p=float(t.p), iid_masks=bool(t.iid_masks))


def read_spectrogram_features(t) -> dict:
    """A Spectrogram's arguments: its bins are the features (no mel filter bank)."""
    return dict(read_spectrogram(t), n_mels=None)


def describe(transform) -> str:
    cls = type(transform)
    return f"{cls.__module__}.{cls.__qualname__}"


def read_chain(steps: list) -> dict:
    """FeatureSpec's arguments for [Spectrogram | MelSpectrogram | MFCC, AmplitudeToDB?,
    FrequencyMasking / TimeMasking ...]; masks as a list of dicts."""
    if not steps or role_of(steps[0]) != SPECTROGRAM:
        first = describe(steps[0]) if steps else "nothing"
        raise ValueError(f"audio features start with Spectrogram, MelSpectrogram or MFCC "
                         f"(torchaudio's or pimloader's); got {first}")
    args = _features(steps[0])
    rest = list(enumerate(steps))[1:]
    if rest and role_of(rest[0][1]) == TO_DB:
        if "n_mfcc" in args:
            raise ValueError("AmplitudeToDB after MFCC is not lowered (MFCC already takes dB)")
        args.update(_features(rest.pop(0)[1]))
    masks = []
    for index, step in rest:
        if role_of(step) != MASK:
            reason = ("AmplitudeToDB must come right after the spectrogram"
                      if role_of(step) == TO_DB else
                      "after the spectrogram and AmplitudeToDB only FrequencyMasking and "
                      "TimeMasking are lowered")
            raise ValueError(f"step {index} ({describe(step)}): {reason}")
        masks.append(_features(step))
    args["masks"] = masks
    return args


def _features(step) -> dict:
    return op_of(step).features(step)
