"""The fallback task: the loader's `transform` as Python on each fetched sample's image.

It takes any dataset given a `transform`, at the lowest specificity (loader/tasks.py): a
dataset and transform that no native task takes still work, exactly as under torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from pimloader.loader.fetch import TransformingFetcher
from pimloader.loader.produce import BatchProducer, Pipeline

DPU_DECODE_REFUSAL = "the transform runs as Python on each sample (no native task takes it)"


@dataclass
class PythonTransform(Pipeline):
    """The loader's `transform` as Python on each fetched sample's image (nothing lowers)."""

    transform: object

    def make_producer(self, context):
        fetcher = TransformingFetcher(context.plain_fetcher(), self.transform)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)


def takes(dataset, transform) -> bool:
    return transform is not None


def build(dataset, transform, options) -> PythonTransform:
    options.dpu_decode(DPU_DECODE_REFUSAL)
    return PythonTransform(transform)
