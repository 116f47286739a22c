"""Fetching samples from a dataset, one batch at a time, remembering what was being fetched.

Fetchers return the samples *uncollated* so that the producer can decide between writing
them into a slot and the ordinary `collate_fn` path. Their semantics follow torch's
`_MapDatasetFetcher` and `_IterableDatasetFetcher` exactly (including `__getitems__`), but
for bad samples, which keep the loader's error contract (bad_samples.py).
"""
from __future__ import annotations

from typing import Any

from ._snapshots import capture_globals, restore_globals
from .bad_samples import SampleNames, all_dropped, is_bad_sample, named


def _as_is(sample):
    return sample


class Fetcher:
    """What every fetcher offers its producer: `fetch(index)`, `prefetch(index)` (a hint),
    `auto_collation`, `current` (what is being fetched, for error messages), and the counts
    of the samples it dropped (on_error="skip") and rendered with the fused kernel since
    they were last taken."""

    current = ""
    last_dropped = None   # the error of the last sample `drop` counted

    def __init__(self, auto_collation: bool) -> None:
        self.auto_collation = auto_collation
        self.skipped = 0
        self.kernel_samples = 0

    def drop(self, error: BaseException) -> None:
        """Count a bad sample that on_error="skip" drops (bad_samples.py)."""
        self.skipped += 1
        self.last_dropped = error

    def none_left(self, index) -> BaseException:
        """The error of the batch at `index` when `drop` took its every sample."""
        return all_dropped(index, self.last_dropped)

    def fetch(self, index, each=_as_is) -> Any:
        raise NotImplementedError

    def prefetch(self, index) -> bool:
        """A hint that batch `index` is fetched soon: a fetcher whose source fetches ahead
        (tar shards over HTTP) passes it on, and says so (True). Nothing by default."""
        return False

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
    """torch's `_MapDatasetFetcher`, keeping the loader's error contract (bad_samples.py):
    a sample that cannot be decoded raises an error naming it, or with `skip` (on_error=
    "skip") is dropped and counted; a batch of bad samples only is one error."""

    def __init__(self, dataset, auto_collation: bool, skip: bool = False) -> None:
        super().__init__(auto_collation)
        self.dataset = dataset
        self.skip = skip
        self.names = SampleNames(dataset)
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
        if not self.auto_collation:  # a batch of one sample: a bad one is raised
            self._sample_index = index
            return self._one(index, each, skip=False)
        if getattr(self.dataset, "__getitems__", None):
            self.current = f"samples {list(index)!r} (through __getitems__)"
            return self._through_getitems(index, each)
        return self._one_by_one(index, each, lambda sample_index: self.dataset[sample_index])

    def _one_by_one(self, index, each, get) -> list:
        """The samples `get(i)` of the batch `index` through `each`, one at a time; with
        `skip` the bad ones are dropped, and a batch of bad samples only is one error."""
        samples = []
        sample_index = self._sample_index
        try:
            for sample_index in index:
                sample = self._one(sample_index, each, self.skip, get)
                if sample is not _DROPPED:
                    samples.append(sample)
        finally:
            self._sample_index = sample_index  # the sample that failed, or the last one
        if not samples and index:
            self.current = f"samples {list(index)!r}"
            raise self.none_left(index)
        return samples

    def _one(self, sample_index, each, skip: bool, get=None):
        """Sample `sample_index` (`get(sample_index)`, by default `dataset[sample_index]`)
        through `each`; if it is bad, an error naming it, or with `skip` `_DROPPED`
        (counted)."""
        try:
            sample = get(sample_index) if get is not None else self.dataset[sample_index]
            return each(sample)
        except Exception as error:
            if not is_bad_sample(error):
                raise
            error_named = self.names.named(error, sample_index)
            if not skip:
                raise error_named
            self.drop(error_named)
        return _DROPPED

    def _through_getitems(self, index, each) -> list:
        """The batch from the dataset's `__getitems__`, each sample then through `each`
        (as `_one` guards it). Should the call raise a bad sample's error, the batch is
        fetched again one sample at a time (`__getitems__([i])`), so that the bad one is
        named, or with on_error="skip" dropped and counted, and the others kept in order:
        the random states are first set back to those before the call, so that the samples
        kept get the draws they would get in a batch without the bad one."""
        states = capture_globals() if self.skip else None
        try:
            samples = self.dataset.__getitems__(index)
        except Exception as error:
            if not is_bad_sample(error):
                raise
            batch_error = named(error, f"one of samples {list(index)!r} (through __getitems__)")
            if states is not None:
                restore_globals(states)
            samples = self._one_by_one(index, each, self._one_through_getitems)
            if not self.skip and len(samples) == len(index):  # not bad one at a time
                raise batch_error from error
            return samples
        fetched = list(samples)
        given = iter(fetched)
        return self._one_by_one(list(index)[:len(fetched)], each, lambda _: next(given))

    def _one_through_getitems(self, sample_index):
        return self.dataset.__getitems__([sample_index])[0]


_DROPPED = object()   # what MapFetcher._one returns for a sample on_error="skip" dropped


class IterableFetcher(Fetcher):
    """torch's `_IterableDatasetFetcher`, keeping the loader's error contract: a batch is
    the iterator's next `batch_size` items, each through `each` as it is fetched. An item
    that `each` (the loader's transform) finds bad is named, or with `skip` dropped and
    counted, and a batch of bad items only is one error, as for a map-style dataset. A bad
    sample raised by the iterator itself is named but never skipped: an iterator that
    raised cannot in general go on (a generator that raised is finished)."""

    def __init__(self, dataset, auto_collation: bool, drop_last: bool,
                 skip: bool = False) -> None:
        super().__init__(auto_collation)
        self.drop_last = drop_last
        self.skip = skip
        self.current = "the dataset's iterator (iter(dataset))"
        self.iterator = iter(dataset)
        self.ended = False
        self.fetched = 0

    def fetch(self, index, each=_as_is) -> Any:
        if self.ended:
            raise StopIteration
        if not self.auto_collation:  # a batch of one sample: a bad one is raised
            return self._each(each, self._next(), skip=False)
        samples, first = [], self.fetched
        for _ in index:
            try:
                sample = self._next()
            except StopIteration:
                self.ended = True
                break
            sample = self._each(each, sample, self.skip)
            if sample is not _DROPPED:
                samples.append(sample)
        pulled = self.fetched - first
        if not pulled or (self.drop_last and pulled < len(index)):
            raise StopIteration
        if not samples:
            raise self.none_left(range(first, self.fetched))
        return samples

    def none_left(self, index) -> BaseException:
        return all_dropped(index, self.last_dropped, of=_OF_ITERATOR)

    def _next(self):
        """The iterator's next sample; a bad one is raised named (an iterator that raised
        cannot in general go on, so on_error="skip" does not apply)."""
        self.current = f"sample {self.fetched}{_OF_ITERATOR}"
        try:
            sample = next(self.iterator)
        except Exception as error:
            if not is_bad_sample(error):
                raise
            raise named(error, self.current)
        self.fetched += 1
        return sample

    def _each(self, each, sample, skip: bool):
        """`each(sample)` for the item just fetched; if it is bad, an error naming the item,
        or with `skip` `_DROPPED` (counted)."""
        try:
            return each(sample)
        except Exception as error:
            if not is_bad_sample(error):
                raise
            error_named = named(error, f"sample {self.fetched - 1}{_OF_ITERATOR}")
            if not skip:
                raise error_named
            self.drop(error_named)
        return _DROPPED


_OF_ITERATOR = " of this iterator (IterableDataset)"


def create_fetcher(is_iterable: bool, dataset, auto_collation: bool, drop_last: bool,
                   skip: bool = False):
    """torch's fetcher for the dataset; `skip`: on_error="skip"."""
    if is_iterable:
        return IterableFetcher(dataset, auto_collation, drop_last, skip)
    return MapFetcher(dataset, auto_collation, skip)


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

    def take_skipped(self) -> int:
        """The samples dropped here and by the fetcher it wraps (whose dataset's samples
        and their transform are guarded by one on_error)."""
        return self.fetcher.take_skipped() + super().take_skipped()

    def _transformed(self, sample):
        return self._in_stage(
            lambda sample: with_image(sample, self.transform(image_of(sample))), sample)

    def _in_stage(self, transform, sample):
        """`transform(sample)`, with `current` saying that the sample's transform runs."""
        self._stage = " (its transform)"
        try:
            result = transform(sample)
        except Exception as error:
            if is_bad_sample(error):  # named by the fetcher, and perhaps dropped: go on
                self._stage = ""
            raise  # anything else: `current` still says that the transform raised it
        self._stage = ""
        return result
