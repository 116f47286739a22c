"""Fetching samples from a dataset, one batch at a time, remembering what was being fetched.

Fetchers return the samples *uncollated* so that the producer can decide between writing
them into a slot and the ordinary `collate_fn` path. Their semantics follow torch's
`_MapDatasetFetcher` and `_IterableDatasetFetcher` exactly (including `__getitems__`).
"""
from __future__ import annotations

from typing import Any


def _as_is(sample):
    return sample


class MapFetcher:
    def __init__(self, dataset, auto_collation: bool) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self._described = ""
        self._sample_index = None  # the sample being fetched, described only on demand

    @property
    def current(self) -> str:
        if self._sample_index is not None:
            return f"sample {self._sample_index!r}"
        return self._described

    @current.setter
    def current(self, value: str) -> None:
        self._described, self._sample_index = value, None

    def fetch(self, index, each=_as_is) -> Any:
        """The samples at `index`, each passed through `each` as soon as it is fetched (so
        that a per-sample transform draws its random numbers between the dataset's calls,
        as a transform inside the dataset would)."""
        if not self.auto_collation:
            self._sample_index = index
            return each(self.dataset[index])
        if getattr(self.dataset, "__getitems__", None):
            self.current = f"samples {list(index)!r} (through __getitems__)"
            samples = self.dataset.__getitems__(index)
            return [each(sample) for sample in samples]
        samples = []
        sample_index = self._sample_index
        try:
            if each is _as_is:
                for sample_index in index:
                    samples.append(self.dataset[sample_index])
            else:
                for sample_index in index:
                    samples.append(each(self.dataset[sample_index]))
        finally:
            self._sample_index = sample_index  # the sample that failed, or the last one
        return samples


class IterableFetcher:
    def __init__(self, dataset, auto_collation: bool, drop_last: bool) -> None:
        self.auto_collation = auto_collation
        self.drop_last = drop_last
        self.current = "the dataset's iterator (iter(dataset))"
        self.iterator = iter(dataset)
        self.ended = False
        self.fetched = 0

    def fetch(self, index, each=_as_is) -> Any:
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return each(self._next())
        samples = []
        for _ in index:
            try:
                sample = self._next()
            except StopIteration:
                self.ended = True
                break
            samples.append(each(sample))
        if not samples or (self.drop_last and len(samples) < len(index)):
            raise StopIteration
        return samples

    def _next(self):
        self.current = f"sample {self.fetched} of this iterator (IterableDataset)"
        sample = next(self.iterator)
        self.fetched += 1
        return sample


def create_fetcher(is_iterable: bool, dataset, auto_collation: bool, drop_last: bool):
    if is_iterable:
        return IterableFetcher(dataset, auto_collation, drop_last)
    return MapFetcher(dataset, auto_collation)


def image_of(sample):
    """What the loader's `transform` acts on: a sample's first element, or the sample
    itself when it is not a tuple or list."""
    if isinstance(sample, (tuple, list)) and sample:
        return sample[0]
    return sample


def with_image(sample, image):
    """`sample` with `image_of(sample)` replaced by `image`."""
    if isinstance(sample, (tuple, list)) and sample:
        if hasattr(type(sample), "_fields"):  # a namedtuple takes its fields one by one
            return type(sample)(image, *sample[1:])
        return type(sample)([image, *sample[1:]])
    return image


class TransformingFetcher:
    """Applies the loader's `transform` to each fetched sample's image (its first element,
    or the sample itself when it is not a tuple or list), as a dataset transform would:
    right after the dataset returns the sample, before the next one is fetched.

    A transform that lowers to the fused kernel (an `InMemoryImages`) draws each eligible
    sample's parameters at that moment and renders the batch's eligible images in runs
    once the batch is fetched; the other samples are transformed as Python at once."""

    def __init__(self, fetcher, transform) -> None:
        self.fetcher = fetcher
        self.transform = transform
        self.native = hasattr(transform, "begin_batch")
        self.kernel_samples = 0
        self._stage = ""

    @property
    def auto_collation(self) -> bool:
        return self.fetcher.auto_collation

    @property
    def current(self) -> str:
        return self.fetcher.current + self._stage

    @current.setter
    def current(self, value: str) -> None:
        self._stage = ""
        self.fetcher.current = value

    def take_kernel_samples(self) -> int:
        count, self.kernel_samples = self.kernel_samples, 0
        return count

    def fetch(self, index):
        if not self.native:
            self._stage = ""
            return self.fetcher.fetch(index, self._transformed)
        samples = self.finished(self.drawn(index))
        return samples if self.auto_collation else samples[0]

    def drawn(self, index):
        """The batch at `index` (a `_BatchOfSamples`), each sample's parameters drawn (or
        its Python transform run) as it was fetched; its kernel samples are not rendered."""
        self._stage = ""
        batch = self.transform.begin_batch()
        self.fetcher.fetch(index, lambda sample: self._in_stage(batch.add, sample))
        return batch

    def finished(self, batch) -> list:
        """The drawn batch's samples, the kernel's outputs in place of their images."""
        return self._rendering(batch, batch.finish)

    def written(self, batch, writer):
        """The drawn batch rendered straight into a slot of `writer` (a SlotBatch), or
        None, with nothing rendered, when it does not fit one."""
        return self._rendering(batch, lambda: batch.write_into(writer))

    def _rendering(self, batch, render):
        self._stage = " (the batch's kernel run)"
        result = render()
        self._stage = ""
        if result is not None:
            self.kernel_samples += batch.kernel_samples
        return result

    def _transformed(self, sample):
        return self._in_stage(
            lambda sample: with_image(sample, self.transform(image_of(sample))), sample)

    def _in_stage(self, transform, sample):
        self._stage = " (its transform)"
        result = transform(sample)
        self._stage = ""
        return result
