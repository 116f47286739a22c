"""Fetching samples from a dataset, one batch at a time, remembering what was being fetched.

Fetchers return the samples *uncollated* so that the producer can decide between writing
them into a slot and the ordinary `collate_fn` path. Their semantics follow torch's
`_MapDatasetFetcher` and `_IterableDatasetFetcher` exactly (including `__getitems__`).
"""
from __future__ import annotations

from typing import Any


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

    def fetch(self, index) -> Any:
        if not self.auto_collation:
            self._sample_index = index
            return self.dataset[index]
        if getattr(self.dataset, "__getitems__", None):
            self.current = f"samples {list(index)!r} (through __getitems__)"
            return self.dataset.__getitems__(index)
        samples = []
        for sample_index in index:
            self._sample_index = sample_index
            samples.append(self.dataset[sample_index])
        return samples


class IterableFetcher:
    def __init__(self, dataset, auto_collation: bool, drop_last: bool) -> None:
        self.auto_collation = auto_collation
        self.drop_last = drop_last
        self.current = "the dataset's iterator (iter(dataset))"
        self.iterator = iter(dataset)
        self.ended = False
        self.fetched = 0

    def fetch(self, index) -> Any:
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self._next()
        samples = []
        for _ in index:
            try:
                samples.append(self._next())
            except StopIteration:
                self.ended = True
                break
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
        return type(sample)([image, *sample[1:]])
    return image


class TransformingFetcher:
    """Applies the loader's `transform` to each fetched sample's image (its first element,
    or the sample itself when it is not a tuple or list), as a dataset transform would.

    A transform that lowers to the fused kernel (an `InMemoryImages`) transforms a batch's
    eligible in-memory images natively, in runs; the others as Python."""

    def __init__(self, fetcher, transform) -> None:
        self.fetcher = fetcher
        self.transform = transform
        self.native = hasattr(transform, "transform_samples")
        self.kernel_samples = 0

    @property
    def auto_collation(self) -> bool:
        return self.fetcher.auto_collation

    @property
    def current(self) -> str:
        return self.fetcher.current

    @current.setter
    def current(self, value: str) -> None:
        self.fetcher.current = value

    def take_kernel_samples(self) -> int:
        count, self.kernel_samples = self.kernel_samples, 0
        return count

    def fetch(self, index):
        samples = self.fetcher.fetch(index)
        if not self.auto_collation:
            return self._transformed([samples], [self.current])[0]
        if isinstance(index, (list, tuple)) and len(index) == len(samples) and \
                all(i is not None for i in index):
            names = [f"sample {i!r}" for i in index]
        else:
            names = [f"sample {position} of the batch" for position in range(len(samples))]
        return self._transformed(samples, names)

    def _transformed(self, samples: list, names: list[str]) -> list:
        if self.native:
            samples, kernel_samples = self.transform.transform_samples(
                samples, names, on_sample=self._naming)
            self.kernel_samples += kernel_samples
            return samples
        transformed = []
        for sample, name in zip(samples, names):
            self._naming(name)
            transformed.append(with_image(sample, self.transform(image_of(sample))))
        return transformed

    def _naming(self, name: str) -> None:
        self.current = f"{name} (its transform)"
