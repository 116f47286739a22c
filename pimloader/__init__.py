"""pimloader: a drop-in torch DataLoader that moves memory-bound preprocessing off the CPUs."""
from torch.utils.data import get_worker_info

from . import datasets, transforms
from .decode import DecodeError, DecompressionBombError
from .errors import (DpuBackendError, DpuFaultError, DpuKernelError, LoaderTimeoutError,
                     SharedPrepError, WorkerDiedError)
from .loader import EpochStats, PIMDataLoader
from .pipelines.padded import PaddedBatch, PaddedImages

__all__ = ["PIMDataLoader", "EpochStats", "get_worker_info", "datasets", "transforms",
           "PaddedBatch", "PaddedImages",
           "DecodeError", "DecompressionBombError", "WorkerDiedError", "LoaderTimeoutError", "SharedPrepError",
           "DpuBackendError", "DpuFaultError", "DpuKernelError"]
__version__ = "0.1.0"
