"""What an audio header may ask for, checked before anything is allocated.

Two kinds of rule, each naming the file and the header field:

- **What libsndfile refuses is refused** (a plain DecodeError, whatever the settings): a
  sample rate outside 1..2,147,483,647 Hz (libsndfile keeps it in a C int and its
  `validate_sfinfo` refuses a rate below 1, so a WAV's 0x80000000 or 0xFFFFFFFF, negative
  there, is refused), a channel count outside 1..1,024 (its `SF_MAX_CHANNELS`), a second
  `fmt ` chunk before `data` (libsndfile 1.2.2 refuses such a WAV).
- **The audio bomb rule**, Pillow's rule for images with samples for pixels: a clip whose
  header promises more than `MAX_AUDIO_SAMPLES` samples (frames x channels) is decoded with
  an `AudioBombWarning`; more than twice as many is refused with an `AudioBombError`. The
  same limit bounds the resampling filters a clip's rate asks for where the dataset
  resamples (torchaudio's filter bank of new/g x (orig/g + 2 x width) taps, g the rates'
  gcd: 16,000 Hz from a rate prime to it, such as 44,099 or 2,147,483,647 Hz, needs
  hundreds of millions to trillions of them).

The default, 2**26 = 67,108,864 samples (256 MiB of float32), is 23 minutes of 48 kHz
stereo or 70 minutes of 16 kHz mono before the warning, twice that before the error; the
filters of every usual pair of rates (8 to 192 kHz) hold under 1 million taps.
`pimloader.decode.MAX_AUDIO_SAMPLES` reads and sets it (None: no limit); the loader hands
the value in force when an epoch starts to its workers.
"""
from __future__ import annotations

import math
import warnings
from numbers import Integral
from typing import Optional

from .errors import AudioBombError, AudioBombWarning, DecodeError

DEFAULT_MAX_AUDIO_SAMPLES = 2 ** 26
RATES = range(1, 2 ** 31)        # libsndfile's: a positive C int
CHANNELS = range(1, 1024 + 1)    # libsndfile's SF_MAX_CHANNELS
_limit: list = [DEFAULT_MAX_AUDIO_SAMPLES]
_RAISE_THE_LIMIT = ("If the clip is genuine, raise the limit: pimloader.decode.MAX_AUDIO_SAMPLES "
                    "= <samples>, or None for no limit")


def sample_limit() -> Optional[int]:
    """The limit in force (`pimloader.decode.MAX_AUDIO_SAMPLES`)."""
    return _limit[0]


def set_sample_limit(value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)
                              or value < 1):
        raise ValueError("MAX_AUDIO_SAMPLES must be a positive number of samples, or None "
                         f"for no limit; got {value!r}")
    _limit[0] = None if value is None else int(value)


def _where(name) -> str:
    return "the audio data" if name is None else str(name)


def refuse(name, field: str, why: str) -> DecodeError:
    """A DecodeError naming the file and the header field."""
    reason = f"its header's {field} {why}"
    return DecodeError(f"{_where(name)}: cannot decode audio: {reason}",
                       None if name is None else str(name), reason)


def check_format(name, rate: int, channels: int) -> None:
    """libsndfile's ranges for a header's sample rate and channel count."""
    if rate not in RATES:
        raise refuse(name, "sample rate", f"is {rate} Hz; libsndfile reads rates of "
                     f"{RATES.start} to {RATES.stop - 1:,} Hz")
    if channels not in CHANNELS:
        raise refuse(name, "channel count", f"is {channels}; libsndfile reads "
                     f"{CHANNELS.start} to {CHANNELS.stop - 1:,} channels")


def check_samples(name, frames: int, channels: int, stacklevel: int = 2) -> None:
    """The bomb rule for the samples a header promises."""
    _check(name, frames * channels, f"frame count ({frames:,} frames x {channels} channels "
           f"= {frames * channels:,} samples)", stacklevel + 1)


def check_resampling(name, orig: int, new: int, taps: int, stacklevel: int = 2) -> None:
    """The bomb rule for the resampling filters of `orig` -> `new` Hz (`taps` of them)."""
    _check(name, taps, f"sample rate ({orig:,} Hz, resampled to {new:,} Hz: filters of "
           f"{taps:,} taps, the rates' gcd being {math.gcd(orig, new):,})", stacklevel + 1)


def _check(name, count: int, what: str, stacklevel: int) -> None:
    limit = sample_limit()
    if limit is None or count <= limit:
        return
    if count > 2 * limit:
        reason = (f"its header's {what} is over twice the limit of {limit:,} samples and "
                  f"could be an audio bomb (a small file that asks for gigabytes); nothing "
                  f"was allocated. {_RAISE_THE_LIMIT}")
        raise AudioBombError(f"{_where(name)}: cannot decode audio: {reason}",
                             None if name is None else str(name), reason)
    warnings.warn(f"{_where(name)}: its header's {what} is over the limit of {limit:,} "
                  "samples (an error above twice it): it could be an audio bomb",
                  AudioBombWarning, stacklevel=stacklevel + 1)
