"""torchaudio's spectral transforms in plain torch: Spectrogram, MelScale, MelSpectrogram,
AmplitudeToDB, MFCC.

Same names, constructor arguments, defaults, attributes and arithmetic as
torchaudio.transforms (2.x), so that a pipeline written for torchaudio runs unchanged without
it, and `FeatureSpec.from_transforms` reads either kind. The functions below are the formulas
the classes use; the fused kernel takes its filter bank and DCT matrix from them, so both are
the float32 tables torchaudio builds, bit for bit.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Optional, Union

import torch
from torch import Tensor

MEL_SCALES = ("htk", "slaney")


def spectrogram(waveform: Tensor, pad: int, window: Tensor, n_fft: int, hop_length: int,
                win_length: int, power: Optional[float], normalized: Union[bool, str],
                center: bool = True, pad_mode: str = "reflect", onesided: bool = True) -> Tensor:
    """|STFT|^power of `waveform` (..., time) -> (..., n_fft // 2 + 1, frames)."""
    if pad > 0:
        waveform = torch.nn.functional.pad(waveform, (pad, pad), "constant")
    frame_length_norm, window_norm = spectrogram_norms(normalized)
    shape = waveform.size()
    spec = torch.stft(waveform.reshape(-1, shape[-1]), n_fft=n_fft, hop_length=hop_length,
                      win_length=win_length, window=window, center=center, pad_mode=pad_mode,
                      normalized=frame_length_norm, onesided=onesided, return_complex=True)
    spec = spec.reshape(shape[:-1] + spec.shape[-2:])
    if window_norm:
        spec /= window.pow(2.0).sum().sqrt()
    if power is None:
        return spec
    return spec.abs() if power == 1.0 else spec.abs().pow(power)


def spectrogram_norms(normalized: Union[bool, str]) -> tuple[bool, bool]:
    """(divide by sqrt(frame length), divide by the window's L2 norm) for `normalized`."""
    if isinstance(normalized, str):
        if normalized not in ("frame_length", "window"):
            raise ValueError(f"Invalid normalized parameter: {normalized}")
        return normalized == "frame_length", normalized == "window"
    if isinstance(normalized, bool):
        return False, normalized
    raise TypeError("Input type not supported")


def hz_to_mel(freq: float, mel_scale: str = "htk") -> float:
    if mel_scale not in MEL_SCALES:
        raise ValueError('mel_scale should be one of "htk" or "slaney".')
    if mel_scale == "htk":
        return 2595.0 * math.log10(1.0 + (freq / 700.0))
    f_sp = 200.0 / 3                       # linear below 1 kHz, logarithmic above
    min_log_hz, logstep = 1000.0, math.log(6.4) / 27.0
    if freq >= min_log_hz:
        return min_log_hz / f_sp + math.log(freq / min_log_hz) / logstep
    return freq / f_sp


def mel_to_hz(mels: Tensor, mel_scale: str = "htk") -> Tensor:
    if mel_scale not in MEL_SCALES:
        raise ValueError('mel_scale should be one of "htk" or "slaney".')
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    f_sp = 200.0 / 3
    min_log_hz, logstep = 1000.0, math.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    freqs = 0.0 + f_sp * mels
    log_part = mels >= min_log_mel
    freqs[log_part] = min_log_hz * torch.exp(logstep * (mels[log_part] - min_log_mel))
    return freqs


def triangular_filterbank(all_freqs: Tensor, f_pts: Tensor) -> Tensor:
    """(n_freqs, n_filter): triangles rising from f_pts[i] to f_pts[i + 1], falling to
    f_pts[i + 2]."""
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))


def melscale_fbanks(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int,
                    norm: Optional[str] = None, mel_scale: str = "htk") -> Tensor:
    """The (n_freqs, n_mels) triangular mel filter bank, torchaudio.functional's."""
    if norm is not None and norm != "slaney":
        raise ValueError('norm must be one of None or "slaney"')
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(hz_to_mel(f_min, mel_scale), hz_to_mel(f_max, mel_scale), n_mels + 2)
    f_pts = mel_to_hz(m_pts, mel_scale)
    fb = triangular_filterbank(all_freqs, f_pts)
    if norm == "slaney":  # area normalisation: about constant energy per channel
        fb *= (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])).unsqueeze(0)
    if (fb.max(dim=0).values == 0.0).any():
        warnings.warn(f"At least one mel filterbank has all zero values. The value for `n_mels` "
                      f"({n_mels}) may be set too high. Or, the value for `n_freqs` ({n_freqs}) "
                      f"may be set too low.")
    return fb


def create_dct(n_mfcc: int, n_mels: int, norm: Optional[str]) -> Tensor:
    """(n_mels, n_mfcc) DCT-II matrix, orthonormal with norm="ortho", else scaled by 2."""
    if norm is not None and norm != "ortho":
        raise ValueError('norm must be either "ortho" or None')
    n = torch.arange(float(n_mels))
    k = torch.arange(float(n_mfcc)).unsqueeze(1)
    dct = torch.cos(math.pi / float(n_mels) * (n + 0.5) * k)
    if norm is None:
        dct *= 2.0
    else:
        dct[0] *= 1.0 / math.sqrt(2.0)
        dct *= math.sqrt(2.0 / float(n_mels))
    return dct.t()


def amplitude_to_db(x: Tensor, multiplier: float, amin: float, db_multiplier: float,
                    top_db: Optional[float] = None) -> Tensor:
    """multiplier * log10(max(x, amin)) - multiplier * db_multiplier, floored at top_db below
    the maximum of each example ((freq, time) or (channel, freq, time) is one example)."""
    x_db = multiplier * torch.log10(torch.clamp(x, min=amin))
    x_db -= multiplier * db_multiplier
    if top_db is None:
        return x_db
    shape = x_db.size()
    packed_channels = shape[-3] if x_db.dim() > 2 else 1
    x_db = x_db.reshape(-1, packed_channels, shape[-2], shape[-1])
    x_db = torch.max(x_db, (x_db.amax(dim=(-3, -2, -1)) - top_db).view(-1, 1, 1, 1))
    return x_db.reshape(shape)


class Spectrogram(torch.nn.Module):
    """torchaudio.transforms.Spectrogram: |STFT|^power, (..., time) -> (..., freq, frames)."""

    def __init__(self, n_fft: int = 400, win_length: Optional[int] = None,
                 hop_length: Optional[int] = None, pad: int = 0,
                 window_fn: Callable[..., Tensor] = torch.hann_window,
                 power: Optional[float] = 2.0, normalized: Union[bool, str] = False,
                 wkwargs: Optional[dict] = None, center: bool = True, pad_mode: str = "reflect",
                 onesided: bool = True, return_complex: Optional[bool] = None) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        window = window_fn(self.win_length, **(wkwargs or {}))
        self.register_buffer("window", window)
        self.pad, self.power, self.normalized = pad, power, normalized
        self.center, self.pad_mode, self.onesided = center, pad_mode, onesided
        if return_complex is not None:
            warnings.warn("`return_complex` argument is now deprecated and is not effective."
                          "`Spectrogram(power=None)` always returns a tensor with complex dtype. "
                          "Please remove the argument in the function call.")

    def forward(self, waveform: Tensor) -> Tensor:
        return spectrogram(waveform, self.pad, self.window, self.n_fft, self.hop_length,
                           self.win_length, self.power, self.normalized, self.center,
                           self.pad_mode, self.onesided)


class MelScale(torch.nn.Module):
    """torchaudio.transforms.MelScale: (..., n_stft, frames) -> (..., n_mels, frames)."""

    def __init__(self, n_mels: int = 128, sample_rate: int = 16000, f_min: float = 0.0,
                 f_max: Optional[float] = None, n_stft: int = 201, norm: Optional[str] = None,
                 mel_scale: str = "htk") -> None:
        super().__init__()
        self.n_mels, self.sample_rate, self.f_min, self.n_stft = n_mels, sample_rate, f_min, n_stft
        self.f_max = f_max if f_max is not None else float(sample_rate // 2)
        self.norm, self.mel_scale = norm, mel_scale
        if f_min > self.f_max:
            raise ValueError(f"Require f_min: {f_min} <= f_max: {self.f_max}")
        fb = melscale_fbanks(n_stft, f_min, self.f_max, n_mels, sample_rate, norm, mel_scale)
        self.register_buffer("fb", fb)

    def forward(self, specgram: Tensor) -> Tensor:
        return torch.matmul(specgram.transpose(-1, -2), self.fb).transpose(-1, -2)


class MelSpectrogram(torch.nn.Module):
    """torchaudio.transforms.MelSpectrogram: Spectrogram then MelScale."""

    def __init__(self, sample_rate: int = 16000, n_fft: int = 400,
                 win_length: Optional[int] = None, hop_length: Optional[int] = None,
                 f_min: float = 0.0, f_max: Optional[float] = None, pad: int = 0,
                 n_mels: int = 128, window_fn: Callable[..., Tensor] = torch.hann_window,
                 power: float = 2.0, normalized: bool = False, wkwargs: Optional[dict] = None,
                 center: bool = True, pad_mode: str = "reflect", onesided: Optional[bool] = None,
                 norm: Optional[str] = None, mel_scale: str = "htk") -> None:
        super().__init__()
        if onesided is not None:
            warnings.warn("Argument 'onesided' has been deprecated and has no influence on the "
                          "behavior of this module.")
        self.sample_rate, self.n_fft = sample_rate, n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.pad, self.power, self.normalized = pad, power, normalized
        self.n_mels, self.f_max, self.f_min = n_mels, f_max, f_min
        self.spectrogram = Spectrogram(n_fft=n_fft, win_length=self.win_length,
                                       hop_length=self.hop_length, pad=pad, window_fn=window_fn,
                                       power=power, normalized=normalized, wkwargs=wkwargs,
                                       center=center, pad_mode=pad_mode, onesided=True)
        self.mel_scale = MelScale(n_mels, sample_rate, f_min, f_max, n_fft // 2 + 1, norm,
                                  mel_scale)

    def forward(self, waveform: Tensor) -> Tensor:
        return self.mel_scale(self.spectrogram(waveform))


class AmplitudeToDB(torch.nn.Module):
    """torchaudio.transforms.AmplitudeToDB: power (or magnitude) to decibels."""

    def __init__(self, stype: str = "power", top_db: Optional[float] = None) -> None:
        super().__init__()
        self.stype = stype
        if top_db is not None and top_db < 0:
            raise ValueError("top_db must be positive value")
        self.top_db = top_db
        self.multiplier = 10.0 if stype == "power" else 20.0
        self.amin = 1e-10
        self.ref_value = 1.0
        self.db_multiplier = math.log10(max(self.amin, self.ref_value))

    def forward(self, x: Tensor) -> Tensor:
        return amplitude_to_db(x, self.multiplier, self.amin, self.db_multiplier, self.top_db)


class MFCC(torch.nn.Module):
    """torchaudio.transforms.MFCC: the DCT-II of the dB (or log) mel spectrogram."""

    def __init__(self, sample_rate: int = 16000, n_mfcc: int = 40, dct_type: int = 2,
                 norm: str = "ortho", log_mels: bool = False,
                 melkwargs: Optional[dict] = None) -> None:
        super().__init__()
        if dct_type != 2:
            raise ValueError(f"DCT type not supported: {dct_type}")
        self.sample_rate, self.n_mfcc, self.dct_type, self.norm = sample_rate, n_mfcc, dct_type, norm
        self.top_db = 80.0
        self.amplitude_to_DB = AmplitudeToDB("power", self.top_db)
        self.MelSpectrogram = MelSpectrogram(sample_rate=sample_rate, **(melkwargs or {}))
        if n_mfcc > self.MelSpectrogram.n_mels:
            raise ValueError("Cannot select more MFCC coefficients than # mel bins")
        self.register_buffer("dct_mat", create_dct(n_mfcc, self.MelSpectrogram.n_mels, norm))
        self.log_mels = log_mels

    def forward(self, waveform: Tensor) -> Tensor:
        mel_specgram = self.MelSpectrogram(waveform)
        if self.log_mels:
            mel_specgram = torch.log(mel_specgram + 1e-6)
        else:
            mel_specgram = self.amplitude_to_DB(mel_specgram)
        return torch.matmul(mel_specgram.transpose(-1, -2), self.dct_mat).transpose(-1, -2)
