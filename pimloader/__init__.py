"""pimloader: a drop-in torch DataLoader that moves memory-bound preprocessing off the CPUs."""
from torch.utils.data import get_worker_info

from . import datasets, pipelines, transforms  # pipelines registers the built-in tasks
from .decode import AudioBombError, DecodeError, DecompressionBombError
from .errors import (ClusterCacheError, DpuBackendError, DpuFaultError, DpuKernelError,
                     LoaderTimeoutError, PathNotice, SharedPrepError, WorkerDiedError)
from .loader import EpochStats, PIMDataLoader, Task, register_task, unregister_task
from .backends import RunKind, register_kernel, register_kind
from .datasets import ShardOrderSampler, TarShards, register_source
from .options import ClusterScope, PipelineOptions
from .transforms import register_op
from .pipelines.padded import PaddedBatch, PaddedImages

__all__ = ["PIMDataLoader", "EpochStats", "get_worker_info", "datasets", "transforms",
           "TarShards", "ShardOrderSampler",
           "PaddedBatch", "PaddedImages", "Task", "register_task", "unregister_task",
           "PipelineOptions", "ClusterScope", "ClusterCacheError",
           # the registries: an op, a source, a task, a kind of kernel work, from outside
           "register_op", "register_source", "RunKind", "register_kind", "register_kernel",
           "DecodeError", "DecompressionBombError", "AudioBombError", "WorkerDiedError",
           "LoaderTimeoutError", "SharedPrepError", "DpuBackendError", "DpuFaultError",
           "DpuKernelError", "PathNotice"]
__version__ = "0.1.0"
