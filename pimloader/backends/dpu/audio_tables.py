"""The host's half of the DPU log-mel kernel (dpu_src/audio_features.c): what it is asked to
compute (`DpuMelSpec`, torchaudio's `MelSpectrogram` + `AmplitudeToDB` arguments and
defaults), and every table it computes with (`DpuMelTables`), made once in floating point
on the host so that the DPU only adds, multiplies 16-bit integers and looks up.

The tables, all integers (docs/audio.md, "DPU kernel"):
- `window`: the periodic Hann window of `win_length`, centred in `n_fft` as torch.stft pads
  it, in Q15 (1.0 -> 32767);
- `radices`: the stages of the N/2-point complex FFT that the real N-point FFT runs on
  (N/2 = product of radices in {4, 2, 3, 5});
- `twiddles`: W_N^m = exp(-2 pi i m / N) for m < N, (cos, -sin) pairs in Q15;
- `bin_pos`: the slot of the frame buffer where bin k of the spectrum ends (the
  decimation-in-frequency FFT leaves its output in digit-reversed order; the Nyquist bin
  takes the extra slot N/2);
- `mel_ranges`, `mel_weights`, `mel_q`: the mel filter bank, sparse (first bin and count of
  each filter, then its weights, uint16 in Q`mel_q`);
- `log2_table`: log2(1 + i/256) in Q16 for i = 0..256 (interpolated linearly);
- dB constants in Q16: log2(amin), 10 log10(max(amin, ref)), top_db, the masks' value;
- `power_bits`: power spectra are scaled to 40 bits (fewer when a filter spans more than
  256 bins), so that a filter's sum of power x weight fits 64 bits.

This module imports no torch or torchaudio: the float reference lives in the tests.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from pimloader.transforms.spectral import melscale_fbanks

RADICES = (4, 2, 3, 5)        # the butterflies the kernel has, largest power-of-two first
MAX_STAGES = 12
MAX_MASKS = 4                 # masks per axis and sample
Q16 = 1 << 16
DB_PER_LOG2 = 10.0 * math.log10(2.0)   # 3.0103: dB = DB_PER_LOG2 * log2(power)
DB_PER_LOG2_FRAC_Q16 = 675    # round((DB_PER_LOG2 - 3) * 2^16): dB = 3 L + (L * 675 >> 16)


def mel_filter_bank(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int,
                    norm: Optional[str], mel_scale: str) -> np.ndarray:
    """torchaudio's melscale_fbanks (pimloader.transforms' namesake, the CPU kernel's too) as
    float64 [n_freqs, n_mels]."""
    with warnings.catch_warnings():   # all-zero filters are allowed: they give the amin floor
        warnings.simplefilter("ignore", UserWarning)
        fb = melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale)
    return fb.double().numpy()


@dataclass(frozen=True)
class DpuMelSpec:
    """MelSpectrogram(...) followed by AmplitudeToDB("power", top_db): torchaudio's names and
    defaults; what the DPU kernel cannot do is refused here, naming the argument."""
    sample_rate: int = 16000
    n_fft: int = 400
    win_length: Optional[int] = None
    hop_length: Optional[int] = None
    f_min: float = 0.0
    f_max: Optional[float] = None
    n_mels: int = 128
    power: float = 2.0
    center: bool = True
    pad_mode: str = "reflect"
    norm: Optional[str] = None
    mel_scale: str = "htk"
    top_db: Optional[float] = None
    amin: float = 1e-10
    ref_value: float = 1.0

    def __post_init__(self) -> None:
        if self.win_length is None:
            object.__setattr__(self, "win_length", self.n_fft)
        if self.hop_length is None:
            object.__setattr__(self, "hop_length", self.win_length // 2)
        if self.f_max is None:
            object.__setattr__(self, "f_max", float(self.sample_rate // 2))
        if not 8 <= self.n_fft <= 4096 or self.n_fft % 2 or radices_of(self.n_fft // 2) is None:
            raise ValueError(f"DPU log-mel: n_fft={self.n_fft} must be even, 8..4096, and n_fft / 2 a product "
                             "of 2, 3, 4 and 5 (the kernel's FFT radices)")
        if not 1 <= self.win_length <= self.n_fft:
            raise ValueError(f"DPU log-mel: win_length={self.win_length} must be 1..n_fft ({self.n_fft})")
        if not 1 <= self.hop_length <= 65535:
            raise ValueError(f"DPU log-mel: hop_length={self.hop_length} must be 1..65535")
        if not 1 <= self.n_mels <= 512:
            raise ValueError(f"DPU log-mel: n_mels={self.n_mels} must be 1..512")
        if self.power != 2.0:
            raise ValueError(f"DPU log-mel: power={self.power}: the kernel computes power spectra (2.0) only")
        if self.pad_mode not in ("reflect", "constant"):
            raise ValueError(f"DPU log-mel: pad_mode={self.pad_mode!r}: 'reflect' or 'constant'")
        if self.norm not in (None, "slaney"):
            raise ValueError(f"DPU log-mel: norm={self.norm!r}: None or 'slaney'")
        if self.mel_scale not in ("htk", "slaney"):
            raise ValueError(f"DPU log-mel: mel_scale={self.mel_scale!r}: 'htk' or 'slaney'")
        if not 0.0 <= self.f_min < self.f_max <= self.sample_rate / 2:
            raise ValueError(f"DPU log-mel: need 0 <= f_min ({self.f_min}) < f_max ({self.f_max}) <= sample_rate/2")
        if not 1e-30 < self.amin < 1e30 or self.ref_value <= 0:
            raise ValueError(f"DPU log-mel: amin={self.amin} and ref_value={self.ref_value} must be > 0")
        if self.top_db is not None and not 0 <= self.top_db < 30000:
            raise ValueError(f"DPU log-mel: top_db={self.top_db} must be None or >= 0")

    @classmethod
    def from_feature_spec(cls, spec) -> "DpuMelSpec":
        """The DPU kernel's spec of a `pimloader.transforms.audio_spec.FeatureSpec` (what
        `FeatureSpec.from_transforms` reads off a torchaudio chain), or a ValueError naming what
        the kernel does not compute."""
        refused = [what for what, bad in (
            ("pad", spec.pad != 0), (f"window={spec.window!r}", spec.window != "hann"),
            (f"normalized={spec.normalized!r}", spec.normalized is not False),
            ("no mel filter bank (n_mels=None)", spec.n_mels is None), ("MFCC", spec.n_mfcc is not None),
            ("features not in dB (no AmplitudeToDB)", not spec.to_db),
            (f"AmplitudeToDB multiplier {spec.multiplier}", spec.multiplier != 10.0),
            (f"normalize={spec.normalize!r} (the host's step)", spec.normalize is not None)) if bad]
        if refused:
            raise ValueError("DPU log-mel: the kernel does not compute " + ", ".join(refused))
        return cls(sample_rate=spec.sample_rate, n_fft=spec.n_fft, win_length=spec.win_length,
                   hop_length=spec.hop_length, f_min=spec.f_min, f_max=spec.f_max, n_mels=spec.n_mels,
                   power=spec.power, center=spec.center, pad_mode=spec.pad_mode, norm=spec.norm,
                   mel_scale=spec.mel_scale, top_db=spec.top_db, amin=spec.amin,
                   ref_value=10.0 ** spec.db_multiplier)

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def pad(self) -> int:
        return self.n_fft // 2 if self.center else 0

    def frames(self, length: int) -> int:
        """STFT frames of a clip of `length` samples (torch.stft's count); 0 if too short."""
        padded = length + 2 * self.pad
        return 0 if padded < self.n_fft else 1 + (padded - self.n_fft) // self.hop_length

    def check_length(self, length: int, sample: int) -> None:
        """torch.stft's own limits, as a ValueError naming the sample."""
        if self.center and self.pad_mode == "reflect" and length <= self.pad:
            raise ValueError(f"DPU log-mel: sample {sample} has {length} samples; reflect padding of "
                             f"{self.pad} (n_fft // 2) needs more than {self.pad}, as torch.stft does")
        if length < 1 or self.frames(length) < 1:
            raise ValueError(f"DPU log-mel: sample {sample} has {length} samples, shorter than one frame "
                             f"(n_fft={self.n_fft}, center={self.center})")


def radices_of(n: int) -> Optional[tuple]:
    """n as a product of the kernel's radices (4s first), or None."""
    out = []
    for r in RADICES:
        while n % r == 0 and n > 1:
            out.append(r)
            n //= r
    return tuple(out) if n == 1 and len(out) <= MAX_STAGES else None


def dif_bin_positions(radices: tuple) -> np.ndarray:
    """Where an in-place mixed-radix decimation-in-frequency FFT leaves bin k: with N = r M,
    bin r k1 + q ends in block q (length M) at the place the M-point FFT puts k1."""
    if not radices:
        return np.zeros(1, np.int64)
    r = radices[0]
    inner = dif_bin_positions(radices[1:])
    m = len(inner)
    k = np.arange(r * m)
    return m * (k % r) + inner[k // r]


def _q15(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


@dataclass(frozen=True)
class DpuMelTables:
    """Every integer the kernel (and the bit-exact model) computes with, for one spec."""
    spec: DpuMelSpec
    radices: tuple
    window: np.ndarray        # int16 [n_fft], Q15
    twiddles: np.ndarray      # int16 [n_fft, 2]: cos, -sin of 2 pi m / N, Q15
    bin_pos: np.ndarray       # uint16 [n_freqs]: slot of bin k
    mel_ranges: np.ndarray    # uint16 [n_mels, 2]: first bin, count
    mel_weights: np.ndarray   # uint16 [sum of counts], Q(mel_q)
    mel_q: int
    log2_table: np.ndarray    # uint32 [257], Q16
    log2_amin_q16: int
    db_offset_q16: int
    top_db_q16: int           # -1: no top_db
    power_bits: int           # power spectra are scaled to this many bits
    fbank: np.ndarray = field(repr=False)   # float64 [n_freqs, n_mels], the float filter bank

    @classmethod
    def build(cls, spec: DpuMelSpec) -> "DpuMelTables":
        n = spec.n_fft
        radices = radices_of(n // 2)
        hann = 0.5 - 0.5 * np.cos(2.0 * math.pi * np.arange(spec.win_length) / spec.win_length)
        window = np.zeros(n)
        left = (n - spec.win_length) // 2
        window[left:left + spec.win_length] = hann
        angle = 2.0 * math.pi * np.arange(n) / n
        twiddles = np.stack([_q15(np.cos(angle)), _q15(-np.sin(angle))], axis=1)
        fbank = mel_filter_bank(spec.n_freqs, spec.f_min, spec.f_max, spec.n_mels, spec.sample_rate,
                                spec.norm, spec.mel_scale)
        ranges, weights, mel_q = _sparse_bank(fbank)
        # power x weight < 2^(power_bits + 16), summed over a filter's bins, must fit 64 bits
        widest = max(1, int(ranges[:, 1].max()))
        power_bits = min(40, 48 - math.ceil(math.log2(widest)))
        log2_table = np.round(np.log2(1.0 + np.arange(257) / 256.0) * Q16).astype(np.uint32)
        db_offset = 10.0 * math.log10(max(spec.amin, spec.ref_value))
        return cls(spec=spec, radices=radices, window=_q15(window), twiddles=twiddles,
                   bin_pos=np.append(dif_bin_positions(radices), n // 2).astype(np.uint16),
                   mel_ranges=ranges, mel_weights=weights, mel_q=mel_q, log2_table=log2_table,
                   log2_amin_q16=int(round(math.log2(spec.amin) * Q16)),
                   db_offset_q16=int(round(db_offset * Q16)),
                   top_db_q16=-1 if spec.top_db is None else int(round(spec.top_db * Q16)),
                   power_bits=power_bits, fbank=fbank)


def _sparse_bank(fbank: np.ndarray) -> tuple:
    """Each filter's nonzero run of bins and its weights in Q(mel_q), the largest mel_q that
    keeps every weight in uint16."""
    peak = float(fbank.max())
    mel_q = 15 if peak <= 0 else min(30, int(math.floor(math.log2(65535.0 / peak))))
    while mel_q > 0 and round(peak * (1 << mel_q)) > 65535:
        mel_q -= 1
    quantised = np.round(fbank * (1 << mel_q)).astype(np.int64)
    ranges, weights = [], []
    for m in range(fbank.shape[1]):
        nonzero = np.flatnonzero(quantised[:, m])
        first = int(nonzero[0]) if len(nonzero) else 0
        count = int(nonzero[-1]) - first + 1 if len(nonzero) else 0
        ranges.append((first, count))
        weights.append(quantised[first:first + count, m])
    return (np.array(ranges, np.uint16).reshape(-1, 2),
            np.concatenate(weights).astype(np.uint16) if weights else np.zeros(0, np.uint16), mel_q)


def quantize_waveforms(waveforms: np.ndarray) -> tuple:
    """Float waveforms [N, L] (full scale = 1.0) -> (int16 PCM [N, L], gain exponents [N]):
    pcm = round(x * 2^(15 + g)), with the largest g in [-16, 15] that keeps every sample in
    int16. A waveform that is already int16 PCM / 32768 comes back exactly (shifted left by g
    when quiet); louder than full scale loses low bits, never clips."""
    waves = np.asarray(waveforms, np.float64)
    if waves.ndim != 2:
        raise ValueError(f"DPU log-mel: waveforms must be [N, L], got shape {waves.shape}")
    if not np.isfinite(waves).all():
        bad = int(np.flatnonzero(~np.isfinite(waves).all(axis=1))[0])
        raise ValueError(f"DPU log-mel: sample {bad} has non-finite values")
    gains = np.zeros(len(waves), np.int32)
    pcm = np.zeros(waves.shape, np.int16)
    for i, x in enumerate(waves):
        peak = float(np.abs(x).max(initial=0.0))
        g = 0 if peak == 0 else int(np.clip(math.floor(math.log2(32767.0 / peak)) - 15, -16, 15))
        while g > -16 and not _fits_int16(x, g):      # the estimate, corrected by the rounding
            g -= 1
        while g < 15 and peak > 0 and _fits_int16(x, g + 1):
            g += 1
        gains[i] = g
        pcm[i] = np.round(x * 2.0 ** (15 + g)).astype(np.int16)
    return pcm, gains


def _fits_int16(x: np.ndarray, g: int) -> bool:
    scaled = np.round(x * 2.0 ** (15 + g))
    return scaled.max(initial=0) <= 32767 and scaled.min(initial=0) >= -32768


def pack_masks(masks, n: int, what: str) -> np.ndarray:
    """Masks per sample as int32 [n, MAX_MASKS, 2] of [start, end) (end <= start: none).
    Accepts None, or [n, k, 2] / [n, 2] intervals."""
    out = np.zeros((n, MAX_MASKS, 2), np.int32)
    if masks is None:
        return out
    arr = np.asarray(masks, np.int64)
    if arr.ndim == 2:
        arr = arr[:, None, :]
    if arr.ndim != 3 or arr.shape[0] != n or arr.shape[2] != 2 or arr.shape[1] > MAX_MASKS:
        raise ValueError(f"DPU log-mel: {what} must be [N={n}, k<={MAX_MASKS}, 2] intervals, got {arr.shape}")
    if (arr < 0).any() or (arr > 65535).any():
        raise ValueError(f"DPU log-mel: {what} bounds must be 0..65535")
    out[:, :arr.shape[1]] = arr
    return out
