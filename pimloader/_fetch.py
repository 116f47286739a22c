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


class TransformingFetcher:
    """Applies the loader's `transform` to each fetched sample's image (its first element,
    or the sample itself when it is not a tuple or list), as a dataset transform would."""

    def __init__(self, fetcher, transform) -> None:
        self.fetcher = fetcher
        self.transform = transform

    @property
    def auto_collation(self) -> bool:
        return self.fetcher.auto_collation

    @property
    def current(self) -> str:
        return self.fetcher.current

    @current.setter
    def current(self, value: str) -> None:
        self.fetcher.current = value

    def fetch(self, index):
        samples = self.fetcher.fetch(index)
        if not self.auto_collation:
            return self._transformed(samples)
        return [self._transformed(sample) for sample in samples]

    def _transformed(self, sample):
        if isinstance(sample, (tuple, list)) and sample:
            return type(sample)([self.transform(sample[0]), *sample[1:]])
        return self.transform(sample)
