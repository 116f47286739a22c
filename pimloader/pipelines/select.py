"""Which pipeline a loader runs: the first task whose builder takes the dataset and transform.

Each task module has `build(...)` returning its pipeline or None. A pipeline is picklable
(it goes to the workers) and has `make_producer(context)`, which returns the producer of the
loader's batches in one process (or None: torch's path). A new task is a module in this
folder and a line in `build_pipeline`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from pimloader.backends.select import BACKENDS, check_decode_on_dpu
from pimloader.loader.fetch import TransformingFetcher
from pimloader.loader.produce import BatchProducer, Pipeline

from . import audio, classification, detection, in_memory


@dataclass(frozen=True)
class PipelineOptions:
    """PIMDataLoader's pipeline arguments, checked as they are made."""

    backend: str = "auto"
    on_error: str = "raise"
    reduced_dct: object = "auto"
    memory_format: torch.memory_format = torch.contiguous_format
    nr_dpus: int = 64
    nr_tasklets: int = 16
    dpu_profile: str = ""
    cache_bytes: int = 0
    decode_on_dpu: object = "auto"

    def __post_init__(self) -> None:
        if (isinstance(self.cache_bytes, bool) or not isinstance(self.cache_bytes, int)
                or self.cache_bytes < 0):
            raise ValueError(f"cache_bytes must be an int >= 0 (0: no cache), "
                             f"got {self.cache_bytes!r}")
        if self.memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError(f"memory_format must be torch.contiguous_format or "
                             f"torch.channels_last, got {self.memory_format!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.reduced_dct not in ("auto", True, False):
            raise ValueError(f"reduced_dct must be 'auto', True or False, "
                             f"got {self.reduced_dct!r}")
        check_decode_on_dpu(self.decode_on_dpu, self.backend)


def build_pipeline(dataset, transform, options: PipelineOptions):
    """The loader's pipeline, or None when torch's own path applies unchanged."""
    pipeline = detection.build(dataset, transform, options)
    if pipeline is None:
        pipeline = classification.build(dataset, transform, options)
    if pipeline is None:
        pipeline = audio.build(dataset, transform, options)
    if pipeline is None and options.cache_bytes:
        warnings.warn("cache_bytes applies only to datasets read as encoded files on the "
                      "native path (an ImageFolder / DatasetFolder or a list of (path, "
                      "target) pairs, with a transform pimloader lowers; an AudioFolder "
                      "with a transform); this loader reads its dataset without a cache",
                      stacklevel=3)
    if pipeline is None and transform is not None:
        pipeline = in_memory.build(transform, options) or PythonTransform(transform)
    return pipeline


@dataclass
class PythonTransform(Pipeline):
    """The loader's `transform` as Python on each fetched sample's image (nothing lowers)."""

    transform: object

    def make_producer(self, context):
        fetcher = TransformingFetcher(context.plain_fetcher(), self.transform)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)
