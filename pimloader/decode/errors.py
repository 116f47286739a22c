"""What decoding raises: `DecodeError` (naming the sample and the decoder's reason) and the
decompression-bomb rule (Pillow's: a warning above `MAX_IMAGE_PIXELS`, an error above twice
it, decided from the header before anything is decoded); its audio twin, `AudioBombError`
and `AudioBombWarning` (the rule and `MAX_AUDIO_SAMPLES`: audio_limits.py)."""
from __future__ import annotations

import warnings
from typing import Optional

from PIL import Image as _PILImage


class DecodeError(ValueError, OSError):
    """An image or audio file that cannot be decoded (corrupt, truncated, unsupported).

    A ValueError (as it always was) and an OSError, as Pillow's errors for such files are
    (`UnidentifiedImageError`, "image file is truncated"): code written for torchvision's
    datasets catches `OSError`. Its `errno` and `filename` stay None (`name` names the file).

    `name` is the sample's name as given to the decoder (a path, "sample 17", or None) and
    `reason` the decoder's own message.  `DecodeError(message)` alone also works, so that
    the error can be re-raised from its text in another process.
    """

    def __init__(self, message: str, name: Optional[str] = None, reason: Optional[str] = None):
        super().__init__(message)
        self.name = name
        self.reason = reason

    def __reduce__(self):
        return (type(self), (str(self), self.name, self.reason))


class DecodeWarning(UserWarning):
    """A decoder's warning: an image whose data was partly missing or corrupt (decoded
    non-strictly), or a file over a bomb limit (decoded all the same)."""


class DecompressionBombError(DecodeError, _PILImage.DecompressionBombError):
    """An image of more than twice `MAX_IMAGE_PIXELS` pixels, refused from its header
    before anything was decoded. Also a `PIL.Image.DecompressionBombError`, so code that
    catches Pillow's catches it too."""


class DecompressionBombWarning(DecodeWarning, _PILImage.DecompressionBombWarning):
    """An image of more than `MAX_IMAGE_PIXELS` pixels (but at most twice as many): decoded,
    with this warning (also a `PIL.Image.DecompressionBombWarning`), as Pillow does."""


_RAISE_THE_LIMIT = ("If the image is genuine, raise the limit: pimloader.decode.MAX_IMAGE_PIXELS "
                    "= <pixels> (the same setting as PIL.Image.MAX_IMAGE_PIXELS), or None for "
                    "no limit")


def _describe(name) -> str:
    return "image" if name is None else str(name)


def _fail(name, reason: str, cause: Optional[BaseException] = None) -> DecodeError:
    error = DecodeError(f"cannot decode {_describe(name)}: {reason}",
                        None if name is None else str(name), reason)
    if cause is not None:
        error.__cause__ = cause
    return error


def _pixel_limit() -> Optional[int]:
    """The limit in force: Pillow's `PIL.Image.MAX_IMAGE_PIXELS` (see the module's doc)."""
    return _PILImage.MAX_IMAGE_PIXELS


def _bomb_error(name, height: int, width: int, limit: int) -> DecompressionBombError:
    pixels = height * width
    reason = (f"image of {pixels:,} pixels ({width}x{height}) is over twice the limit of "
              f"{limit:,} pixels, and could be a decompression bomb (a small file that "
              f"decodes to gigabytes); nothing was decoded. {_RAISE_THE_LIMIT}")
    return DecompressionBombError(f"cannot decode {_describe(name)}: {reason}",
                                  None if name is None else str(name), reason)


def _warn_if_large(name, height: int, width: int, limit: Optional[int],
                   stacklevel: int) -> None:
    if limit is not None and height * width > limit:
        warnings.warn(f"{_describe(name)}: image of {height * width:,} pixels ({width}x"
                      f"{height}) is over the limit of {limit:,} pixels (an error above "
                      "twice it): it could be a decompression bomb",
                      DecompressionBombWarning, stacklevel=stacklevel + 1)


def _check_pixels(name, height: int, width: int, limit: Optional[int],
                  stacklevel: int = 3, warn: bool = True) -> None:
    """Pillow's rule, from a header: an error above twice the limit, a warning above it."""
    if limit is not None and height * width > 2 * limit:
        raise _bomb_error(name, height, width, limit)
    if warn:
        _warn_if_large(name, height, width, limit, stacklevel + 1)


def _max_pixels(limit: Optional[int]) -> int:
    """The C decoder's refusal threshold for `limit` (0: none)."""
    return 0 if limit is None else min(max(1, int(2 * limit)), 2 ** 63 - 1)


def _translate_pillow_bomb(name, exc: BaseException) -> DecodeError:
    """Pillow's own DecompressionBombError (its check in Image.open), as ours."""
    error = DecompressionBombError(
        f"cannot decode {_describe(name)}: {str(exc).rstrip('.')}. {_RAISE_THE_LIMIT}",
        None if name is None else str(name), str(exc))
    error.__cause__ = exc
    return error


class AudioBombError(DecodeError):
    """An audio clip whose header asks for more than twice `MAX_AUDIO_SAMPLES` samples (or
    resampling filters of as many taps), refused from the header before anything was
    allocated (audio_limits.py)."""


class AudioBombWarning(DecodeWarning):
    """An audio clip whose header asks for more than `MAX_AUDIO_SAMPLES` samples (but at
    most twice as many): decoded, with this warning, as images above MAX_IMAGE_PIXELS."""
