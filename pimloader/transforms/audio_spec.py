"""What a chain of torchaudio-style feature transforms computes, as one frozen value.

`FeatureSpec` holds every argument of Spectrogram / MelSpectrogram / AmplitudeToDB / MFCC and
of the SpecAugment masks that changes the features, resolved (win_length, hop_length, f_max,
the dB multiplier); `FeatureSpec.from_transforms` reads it off torchaudio's transform objects
or pimloader's classes of the same names. The CPU kernel (backends/audio_features.py) and the DPU
kernel take it as their description of the work.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np

from ._audio_read import WINDOWS, read_chain
from .registry import flatten

PAD_MODES = ("constant", "reflect", "replicate", "circular")
MAX_RADIX = 64  # the FFT's largest prime factor (PIM_AUDIO_MAX_RADIX, csrc/include/pim_audio.h)
NORMALIZED = (False, True, "window", "frame_length")
PER_SAMPLE_EPS = 1e-5   # 'per_sample' normalisation: (x - mean) / (std + PER_SAMPLE_EPS)


@dataclass(frozen=True)
class MaskSpec:
    """One FrequencyMasking ('frequency') or TimeMasking ('time') step, as torchaudio's."""
    axis: str
    mask_param: int
    p: float = 1.0
    iid_masks: bool = False

    def __post_init__(self):
        if self.axis not in ("frequency", "time"):
            raise ValueError(f"MaskSpec.axis must be 'frequency' or 'time', not {self.axis!r}")
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"The value of p must be between 0.0 and 1.0 ({self.p} given).")


Normalize = Union[None, str, tuple]


@dataclass(frozen=True)
class FeatureSpec:
    """Features of a waveform, in the order computed: `pad` zeros each side; frames of n_fft
    every hop_length (centred with pad_mode when center) times the periodic `window` of
    win_length; |rFFT|^power (scaled as `normalized` says); the mel filter bank (n_mels=None:
    the n_fft // 2 + 1 bins are the features); to_db: multiplier * log10(max(x, amin)) -
    multiplier * db_multiplier, floored at top_db below the example's maximum (log_mels:
    log(x + 1e-6) instead); n_mfcc: DCT-II (dct_norm) over the mels; `masks` filled with
    mask_value; normalize: None, 'per_sample' ((x - mean) / (std + 1e-5) over the example's
    features, all its channels, std with n - 1) or (mean, std) constants. An example of
    several channels has one top_db floor, as torchaudio's AmplitudeToDB on (channel, freq,
    time)."""
    sample_rate: int = 16000
    n_fft: int = 400
    win_length: Optional[int] = None        # None: n_fft
    hop_length: Optional[int] = None        # None: win_length // 2
    pad: int = 0
    window: str = "hann"
    center: bool = True
    pad_mode: str = "reflect"
    power: float = 2.0
    normalized: Union[bool, str] = False
    n_mels: Optional[int] = 128
    f_min: float = 0.0
    f_max: Optional[float] = None           # None: sample_rate // 2
    mel_scale: str = "htk"
    norm: Optional[str] = None
    to_db: bool = False
    stype: str = "power"
    top_db: Optional[float] = None
    multiplier: Optional[float] = None      # None: 10 for stype 'power', 20 for 'magnitude'
    amin: float = 1e-10
    db_multiplier: float = 0.0
    n_mfcc: Optional[int] = None
    dct_type: int = 2
    dct_norm: Optional[str] = "ortho"
    log_mels: bool = False
    masks: tuple = field(default=())
    mask_value: float = 0.0
    normalize: Normalize = None

    def __post_init__(self):
        resolve = {"win_length": self.n_fft if self.win_length is None else self.win_length}
        resolve["hop_length"] = (resolve["win_length"] // 2 if self.hop_length is None
                                 else self.hop_length)
        if self.f_max is None:
            resolve["f_max"] = float(self.sample_rate // 2)
        if self.multiplier is None:
            resolve["multiplier"] = 10.0 if self.stype == "power" else 20.0
        if isinstance(self.normalize, list):
            resolve["normalize"] = tuple(self.normalize)
        resolve["masks"] = tuple(self.masks)
        for name, value in resolve.items():
            object.__setattr__(self, name, value)
        _check(self)

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def rows(self) -> int:
        """Feature rows of one clip (one channel): n_mfcc, n_mels or the FFT's bins."""
        if self.n_mfcc is not None:
            return self.n_mfcc
        return self.n_mels if self.n_mels is not None else self.n_freqs

    def frames(self, length: int) -> int:
        """Frames of a clip of `length` samples (torch.stft's count)."""
        padded = length + 2 * self.pad + (2 * (self.n_fft // 2) if self.center else 0)
        return (padded - self.n_fft) // self.hop_length + 1

    def out_shape(self, length: int) -> tuple[int, int]:
        return self.rows, self.frames(length)

    def mask_axis_length(self, mask: MaskSpec, length: int) -> int:
        return self.rows if mask.axis == "frequency" else self.frames(length)

    def check_length(self, length: int) -> None:
        """Raise ValueError where torch.stft (or its padding) refuses a clip of `length`."""
        inner = length + 2 * self.pad
        if length < 1:
            raise ValueError(f"a clip of {length} samples has no frame")
        half = self.n_fft // 2
        if self.center and self.pad_mode == "reflect" and half >= inner:
            raise ValueError(f"a clip of {length} samples is too short for n_fft={self.n_fft} "
                             f"with center=True and pad_mode='reflect': reflect padding of {half} "
                             f"needs more than {half} samples (torch.stft refuses it too)")
        if self.center and self.pad_mode == "circular" and half > inner:
            raise ValueError(f"a clip of {length} samples is too short for circular padding of "
                             f"{half} (torch.stft refuses it too)")
        padded = inner + (2 * half if self.center else 0)
        if padded < self.n_fft:
            raise ValueError(f"a clip of {length} samples is shorter than n_fft={self.n_fft} "
                             f"with center=False (torch.stft refuses it too)")

    @classmethod
    def from_transforms(cls, transforms, *, normalize: Normalize = None,
                        mask_value: float = 0.0) -> "FeatureSpec":
        """The spec of a chain such as [MelSpectrogram(...), AmplitudeToDB(...),
        FrequencyMasking(...), TimeMasking(...)] (a list, torch.nn.Sequential or Compose of
        torchaudio.transforms or pimloader.transforms objects)."""
        args = read_chain(_steps(transforms))
        masks = tuple(MaskSpec(**mask) for mask in args.pop("masks"))
        return cls(**args, masks=masks, normalize=normalize, mask_value=mask_value)


def normalise_features(features, normalize: Normalize):
    """FeatureSpec's `normalize` applied on the host to float32 features [N, ...] in place,
    each example on its own, with the CPU kernel's arithmetic (csrc/audio_features.c
    `normalise`): the mean and the std (n - 1) in float64, then (x - mean) * (1 / (std +
    1e-5)) in float32; (mean, std) constants: (x - mean) / std in float32. For a backend
    whose kernel stops before the normalisation (the DPU kernel)."""
    if normalize is None:
        return features
    for example in features:
        if normalize == "per_sample":
            values = example.astype(np.float64)
            mean = values.mean()
            std = values.std(ddof=1) if values.size > 1 else 0.0
            example -= np.float32(mean)
            example *= np.float32(1.0 / (std + PER_SAMPLE_EPS))
        else:
            example -= np.float32(normalize[0])
            example /= np.float32(normalize[1])
    return features


def _steps(transforms) -> list:
    """The steps of a list of transforms, or of one transform (a Compose or nn.Sequential
    looked into)."""
    if isinstance(transforms, (list, tuple)):
        return [step for inner in transforms for step in flatten(inner)]
    return flatten(transforms)


def _check(spec: FeatureSpec) -> None:
    problems = []
    if spec.n_fft < 1 or not 1 <= spec.win_length <= spec.n_fft:
        problems.append(f"n_fft={spec.n_fft} >= win_length={spec.win_length} >= 1 is needed")
    elif _largest_prime_factor(spec.n_fft // 2 if spec.n_fft % 2 == 0 else spec.n_fft) > MAX_RADIX:
        problems.append(f"n_fft={spec.n_fft} has a prime factor above {MAX_RADIX}, which the "
                        f"fused FFT does not run")
    if spec.hop_length < 1 or spec.pad < 0:
        problems.append(f"hop_length={spec.hop_length} must be >= 1 and pad={spec.pad} >= 0")
    if spec.window not in WINDOWS:
        problems.append(f"window={spec.window!r} is not one of {sorted(WINDOWS)}")
    if spec.pad_mode not in PAD_MODES:
        problems.append(f"pad_mode={spec.pad_mode!r} is not one of {PAD_MODES}")
    if not (isinstance(spec.power, (int, float)) and spec.power > 0):
        problems.append(f"power={spec.power!r} must be a number > 0 (complex output is not "
                        f"computed by the fused kernel)")
    if not any(spec.normalized is v or spec.normalized == v and isinstance(v, str)
               for v in NORMALIZED):
        problems.append(f"normalized={spec.normalized!r} is not one of {NORMALIZED}")
    problems += _check_mel(spec) + _check_log(spec) + _check_output(spec)
    if problems:
        raise ValueError("FeatureSpec: " + "; ".join(problems))


def _largest_prime_factor(n: int) -> int:
    largest, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            largest, n = p, n // p
        p += 1
    return max(largest, n)


def _check_mel(spec: FeatureSpec) -> list:
    if spec.n_mels is None:
        return ["an MFCC needs n_mels"] if spec.n_mfcc is not None else []
    problems = []
    if spec.n_mels < 1:
        problems.append(f"n_mels={spec.n_mels} must be >= 1 (or None for a spectrogram)")
    if spec.mel_scale not in ("htk", "slaney"):
        problems.append('mel_scale should be one of "htk" or "slaney".')
    if spec.norm not in (None, "slaney"):
        problems.append('norm must be one of None or "slaney"')
    if spec.f_min > spec.f_max:
        problems.append(f"Require f_min: {spec.f_min} <= f_max: {spec.f_max}")
    return problems


def _check_log(spec: FeatureSpec) -> list:
    problems = []
    if spec.stype not in ("power", "magnitude"):
        problems.append(f"stype={spec.stype!r} is not 'power' or 'magnitude'")
    if spec.top_db is not None and spec.top_db < 0:
        problems.append("top_db must be positive value")
    if spec.to_db and spec.log_mels:
        problems.append("to_db and log_mels exclude each other")
    if spec.amin <= 0 or not math.isfinite(spec.amin):
        problems.append(f"amin={spec.amin} must be > 0")
    if spec.n_mfcc is not None:
        if spec.n_mels is not None and not 1 <= spec.n_mfcc <= spec.n_mels:
            problems.append("Cannot select more MFCC coefficients than # mel bins")
        if spec.dct_type != 2:
            problems.append(f"DCT type not supported: {spec.dct_type}")
        if spec.dct_norm not in (None, "ortho"):
            problems.append('dct_norm must be either "ortho" or None')
    elif spec.log_mels:
        problems.append("log_mels is MFCC's option: it needs n_mfcc")
    return problems


def _check_output(spec: FeatureSpec) -> list:
    problems = []
    for mask in spec.masks:
        if not isinstance(mask, MaskSpec):
            problems.append(f"masks holds {mask!r}, not a MaskSpec")
    norm = spec.normalize
    if not (norm is None or norm == "per_sample" or
            isinstance(norm, tuple) and len(norm) == 2 and
            all(isinstance(v, (int, float)) for v in norm) and norm[1] != 0):
        problems.append(f"normalize={norm!r} is not None, 'per_sample' or (mean, std != 0)")
    return problems
