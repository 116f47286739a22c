"""Bad samples, on every path: what counts as one, the error that names it, what
on_error="skip" does with it, and a batch whose every sample is bad.

The contract (README "Errors"), native path or Python, whatever the task or the source:
- a sample whose bytes cannot be decoded raises `DecodeError` (a ValueError and an
  OSError) naming the sample (its path, or what its source names it by; "sample <index>"
  for a dataset without a source) and the cause;
- with on_error="skip" it is dropped and counted (`stats()[-1].skipped_samples`);
- a batch whose every sample is dropped raises one `DecodeError` naming the batch and the
  last sample's cause (`all_dropped`): a batch holds one sample at least, and the loader
  yields the batches of its sampler, no fewer.

The native paths meet bad samples as the DecodeErrors of pimloader's decoders. The paths that
call the dataset's `__getitem__` (the transform as Python, in-memory images, torch's own path)
meet what the dataset's decoder raises, which `is_bad_sample` tells apart: a DecodeError,
Pillow's errors for a broken file (`UnidentifiedImageError`, and the plain `OSError`s of
"image file is truncated" or "broken data stream"), a decompression bomb. A file that is
missing or unreadable (`FileNotFoundError`, `PermissionError`: OSErrors with an errno) is a
broken dataset rather than a bad sample and is raised as it is, on every path, as is the
error of a transform (a bug, raised with its own type as under torch).

Where a batch is not fetched one index at a time (fetch.py): a dataset's `__getitems__` that
raises a bad sample's error has its batch fetched again one sample at a time, and an
IterableDataset's items are guarded as they go through the loader's transform (a bad sample
raised by the iterator itself is named, never skipped: an iterator that raised cannot go on).
"""
from __future__ import annotations

from PIL import Image, UnidentifiedImageError

from pimloader.decode.errors import DecodeError, DecompressionBombError


def is_bad_sample(error: BaseException) -> bool:
    """Whether `error` says that a sample's bytes cannot be decoded (see the module's doc)."""
    if isinstance(error, (DecodeError, UnidentifiedImageError, Image.DecompressionBombError)):
        return True
    return type(error) is OSError and error.errno is None


def named(error: BaseException, name: str) -> DecodeError:
    """The bad sample's `error` as a DecodeError naming `name` and the cause (`error` as it
    is when it names its file already). A decompression bomb stays one."""
    if isinstance(error, DecodeError) and error.name is not None:
        return error
    if isinstance(error, DecodeError):
        reason = error.reason or str(error)
    else:
        reason = f"{type(error).__name__}: {error}"
    kind = DecompressionBombError if isinstance(error, Image.DecompressionBombError) \
        else DecodeError
    renamed = kind(f"cannot decode {name}: {reason}", name, reason)
    renamed.__cause__ = error
    return renamed


def all_dropped(index, last: BaseException | None = None, of: str = "") -> DecodeError:
    """The error of a batch whose every sample was dropped by on_error="skip"; `last`: the
    last dropped sample's error (its name and cause are quoted); `of`: what the indices
    are of, when not the dataset's (" of this iterator ...")."""
    indices = list(index) if isinstance(index, (list, tuple, range)) else [index]
    reason = (f"every sample of the batch {indices!r}{of} failed to decode (on_error='skip' "
              f"drops bad samples, but a batch needs one at least)")
    if last is not None:
        reason += f"; the last: {last}"
    error = DecodeError(reason, None, reason)
    error.__cause__ = last
    return error


class SampleNames:
    """The names of a dataset's samples in errors: a sample's path (or shard URL and key...)
    as the dataset's source names it (`source_of(dataset).metadata(index)`, looked up at the
    first bad sample), else "sample <index>"."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self._source = None

    def named(self, error: BaseException, index) -> DecodeError:
        """Sample `index`'s bad-sample `error`, as `named` makes it."""
        return named(error, self.name(index))

    def name(self, index) -> str:
        if self._source is None:
            from pimloader.datasets.source import source_of
            try:
                self._source = source_of(self.dataset) or False
            except Exception:  # noqa: BLE001 - no source to name it by: its index does
                self._source = False
        if self._source:
            try:
                return str(self._source.metadata(index)[1])
            except Exception:  # noqa: BLE001 - as above
                pass
        return f"sample {index!r}"
