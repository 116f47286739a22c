"""Fetching samples from a dataset, one batch at a time, remembering what was being fetched.

Fetchers return the samples *uncollated* so that the producer can decide between writing
them into a slot and the ordinary `collate_fn` path. Their semantics follow torch's
`_MapDatasetFetcher` and `_IterableDatasetFetcher` exactly (including `__getitems__`).
"""
from __future__ import annotations

from typing import Any


def _as_is(sample):
    return sample


class Fetcher:
    """What every fetcher offers its producer: `fetch(index)`, `auto_collation`, `current`
    (what is being fetched, for error messages), and the counts of the samples it dropped
    (on_error="skip") and rendered with the fused kernel since they were last taken."""

    current = ""

    def __init__(self, auto_collation: bool) -> None:
        self.auto_collation = auto_collation
        self.skipped = 0
        self.kernel_samples = 0

    def fetch(self, index, each=_as_is) -> Any:
        raise NotImplementedError

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def take_kernel_samples(self) -> int:
        count, self.kernel_samples = self.kernel_samples, 0
        return count

    def take_decode_counts(self) -> dict:
        """Where its samples were decoded since last taken (Produced.decode_counts)."""
        return {}


class MapFetcher(Fetcher):
    def __init__(self, dataset, auto_collation: bool) -> None:
        super().__init__(auto_collation)
        self.dataset = dataset
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


class IterableFetcher(Fetcher):
    def __init__(self, dataset, auto_collation: bool, drop_last: bool) -> None:
        super().__init__(auto_collation)
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


class TransformingFetcher(Fetcher):
    """Applies the loader's `transform` to each fetched sample's image (its first element,
    or the sample itself when it is not a tuple or list), as a dataset transform would:
    right after the dataset returns the sample, before the next one is fetched. (A transform
    that lowers to the fused kernel has its own subclass, in pipelines/in_memory.py.)"""

    def __init__(self, fetcher: Fetcher, transform) -> None:
        super().__init__(fetcher.auto_collation)
        self.fetcher = fetcher
        self.transform = transform
        self._stage = ""

    @property
    def current(self) -> str:
        return self.fetcher.current + self._stage

    @current.setter
    def current(self, value: str) -> None:
        self._stage = ""
        self.fetcher.current = value

    def fetch(self, index, each=_as_is):
        self._stage = ""
        return self.fetcher.fetch(index, self._transformed)

    def _transformed(self, sample):
        return self._in_stage(
            lambda sample: with_image(sample, self.transform(image_of(sample))), sample)

    def _in_stage(self, transform, sample):
        """`transform(sample)`, with `current` saying that the sample's transform runs."""
        self._stage = " (its transform)"
        result = transform(sample)
        self._stage = ""
        return result
