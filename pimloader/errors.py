"""The exceptions pimloader raises, and errors that cross process boundaries as data.

Exceptions users catch (all exported from `pimloader`):
- `WorkerDiedError`: a worker process ended while the loader still needed it;
- `LoaderTimeoutError`: no batch within the loader's `timeout`;
- `SharedPrepError`: a job sharing batches (`share_with=`) lost the job that prepares them;
- `ClusterCacheError`: a partitioned cluster cache (`cache_scope="cluster"`) lost a rank,
  named in the message, or could not fetch a sample another node holds;
- `DecodeError` (a ValueError and an OSError, from pimloader.decode): a sample that cannot
  be decoded, naming it and the cause, on every path (loader/bad_samples.py); its
  `DecompressionBombError` (also Pillow's): an image whose header promises more than twice
  `pimloader.decode.MAX_IMAGE_PIXELS` pixels, refused before decoding; its `AudioBombError`:
  an audio clip whose header promises more than twice `pimloader.decode.MAX_AUDIO_SAMPLES`
  samples;
- `DpuBackendError`, and its `DpuFaultError` (a DPU faulted) and `DpuKernelError` (the
  kernel refused its input): a DPU run failed, naming the libdpu call and the DPU.
A sample's own exception raised in a worker comes back with its original type.

A failure in a worker is captured as a `WorkerError` (its type, traceback text and where it
happened), sent to the main process like any result, and re-raised there with the original
type, so that `except ValueError:` around a loop works as it does under torch.
"""
from __future__ import annotations

import sys
import traceback


class _KeyErrorMessage(str):
    """KeyError repr()s its argument; this keeps a multi-line message readable."""

    def __repr__(self) -> str:
        return self


class ClusterCacheError(RuntimeError):
    """A cluster cache's exchange failed: a rank (named) is gone or stopped answering."""


class WorkerError:
    """An exception caught in a worker, carried to the main process as picklable data."""

    def __init__(self, where: str, exc_info=None) -> None:
        exc_type, exc_value, exc_tb = exc_info or sys.exc_info()
        self.exc_type = exc_type
        self.where = where
        self.traceback_text = "".join(traceback.format_exception(exc_type, exc_value, exc_tb))

    def message(self) -> str:
        return f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.traceback_text}"

    def reraise(self):
        message = self.message()
        if self.exc_type is KeyError:
            message = _KeyErrorMessage(message)
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=message)
        try:
            exception = self.exc_type(message)
        except Exception:
            # The original type cannot be built from one string: keep the text at least.
            raise RuntimeError(message) from None
        try:
            raise exception
        finally:
            del exception  # no frame <-> exception cycle keeping the iterator for the GC


class WorkerDiedError(RuntimeError):
    """A worker process ended while the loader still needed it."""


class LoaderTimeoutError(RuntimeError):
    """No batch arrived within the loader's `timeout`."""


class SharedPrepError(RuntimeError):
    """A job of a coordinated-prep group (`share_with=`) gets no more batches: the job that
    prepares them died or closed the group."""


class DpuBackendError(RuntimeError):
    """A DPU run failed. `dpu` is the index of the DPU concerned (None: the whole set);
    `code` the driver's (or libdpu's) status code."""

    def __init__(self, message: str, code: int = 0, dpu: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.dpu = dpu


class DpuFaultError(DpuBackendError):
    """A DPU faulted during a launch (on the emulator: a hardware rule was broken)."""


class DpuKernelError(DpuBackendError):
    """The kernel refused its chunk (invalid descriptor, table or build)."""


TOO_MANY_OPEN_FILES = (
    "Too many open files. Communication with the workers is no longer possible. "
    "Please increase the limit using `ulimit -n` in the shell or change the "
    "sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the "
    "beginning of your code")


def close_all(resources) -> None:
    """Close each of `resources` in order, all of them even when one fails; the first error
    is raised once every one has been closed (what frees DPU sets must not stop halfway)."""
    errors = []
    for resource in resources:
        try:
            resource.close()
        except Exception as error:   # close the others all the same
            errors.append(error)
    if errors:
        raise errors[0]


class PathNotice(UserWarning):
    """Said once per process and dataset type: a loader runs its dataset as Python (torch's
    own path, or the transform per sample), with why and what would move it to the native
    path. `warnings.filterwarnings("ignore", category=pimloader.PathNotice)` silences it;
    `loader.stats()[-1].task` and `.path` say the same."""
