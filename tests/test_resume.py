"""Mid-epoch resume: PIMDataLoader.state_dict() / load_state_dict().

Oracle: the uninterrupted run of the same loader under the same seeds. A state is taken after
k batches, written and read back with torch.save / torch.load (weights_only, as a checkpoint
is), and loaded into a fresh loader built under *other* seeds; the rest of that epoch and the
next epoch must be the uninterrupted run's, batch for batch and bit for bit (torch.equal),
including every random draw of the datasets and transforms. (torchdata is not installed
here, so its StatefulDataLoader is not a second oracle.)
"""
from __future__ import annotations

import gc
import io
import random

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

from _helpers import assert_same, canonical
from pimloader import PIMDataLoader
from pimloader.pipelines.in_memory import InMemoryImages

pytestmark = pytest.mark.timeout(300)


# -- datasets and samplers (module level: workers may need to import them) ---------------

class RandomDS(Dataset):
    """Every sample draws from torch's, Python's and numpy's global random states."""

    def __init__(self, n=23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (torch.full((3,), float(i)) + torch.rand(3), i, random.random(),
                float(np.random.rand()))


class CountingDS(RandomDS):
    """Has a state of its own (calls made in this process), saved per worker."""

    def __init__(self, n=23):
        super().__init__(n)
        self.calls = 0

    def __getitem__(self, i):
        self.calls += 1
        return (*super().__getitem__(i), self.calls)

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]


def _shard(n):
    info = get_worker_info()
    worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
    return list(range(worker, n, workers))


class RandomIterDS(IterableDataset):
    """Sharded by worker (uneven shards), random draws per sample; no state_dict: a resumed
    worker replays its fetches."""

    def __init__(self, n=13):
        self.n = n

    def __iter__(self):
        for i in _shard(self.n):
            yield torch.full((2,), float(i)) + torch.rand(2), i, random.random()


class StatefulIterDS(RandomIterDS):
    """The same, with state_dict/load_state_dict: a resumed worker starts where it was."""

    def __init__(self, n=13):
        super().__init__(n)
        self.position, self.start = 0, 0

    def __iter__(self):
        shard = _shard(self.n)
        self.position, self.start = self.start, 0
        while self.position < len(shard):
            i = shard[self.position]
            self.position += 1
            yield torch.full((2,), float(i)) + torch.rand(2), i, random.random()

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.start = state["position"]


class _ShardIterator:
    """An iterator with a state of its own (torchdata restores it after iter(dataset))."""

    def __init__(self, n):
        self.shard, self.position = _shard(n), 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.position >= len(self.shard):
            raise StopIteration
        i = self.shard[self.position]
        self.position += 1
        return torch.full((2,), float(i)) + torch.rand(2), i, random.random()

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


class StatefulIteratorDS(RandomIterDS):
    def __iter__(self):
        return _ShardIterator(self.n)


class ImagesIterDS(IterableDataset):
    """uint8 images, for the in-memory fused-kernel transform."""

    def __iter__(self):
        for i in _shard(14):
            yield torch.arange(3 * 20 * 24, dtype=torch.int64).reshape(3, 20, 24).add(i * 7) \
                .remainder(256).to(torch.uint8), i


class StatefulSampler(Sampler):
    """A permutation from its own seed, with its position as state (torchdata's tutorial)."""

    def __init__(self, n, seed=3):
        self.n, self.seed, self.yielded, self.next_start = n, seed, 0, 0

    def __len__(self):
        return self.n

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed))
        self.yielded, self.next_start = self.next_start, 0
        for i in order.tolist()[self.yielded:]:
            self.yielded += 1
            yield i

    def state_dict(self):
        return {"yielded": self.yielded}

    def load_state_dict(self, state):
        self.next_start = state["yielded"]


class UntrackedSampler(Sampler):
    """Shuffles with OS entropy: no random state pimloader could replay it from."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(random.Random().sample(range(self.n), self.n))


# -- the oracle ---------------------------------------------------------------------------

def _copy(batch):
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, (list, tuple)):
        return type(batch)(_copy(x) for x in batch)
    return batch


def _reseed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _through_checkpoint(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)  # weights_only=True: plain values and tensors only


def _loader(make, seed, generator_seed):
    _reseed(seed)
    generator = None if generator_seed is None else torch.Generator().manual_seed(generator_seed)
    return make(generator)


def interrupted_and_resumed(make, k, epochs_before=0, generator=True, keep_rng=False):
    """(uninterrupted batches after k, its next epoch, resumed batches, resumed next epoch).
    keep_rng: the test saves torch's global random state with the loader's and restores it
    before resuming, as a training checkpoint does (needed where the loader draws its seeds
    from it: generator=None with workers)."""
    loader = _loader(make, 1, 7 if generator else None)
    for _ in range(epochs_before):
        list(loader)
    got, state, rng = [], None, None
    if k == 0:  # the state after the last epoch's end (or before the first)
        state, rng = loader.state_dict(), torch.get_rng_state()
    else:
        for batch in loader:
            got.append(_copy(batch))
            if len(got) == k:
                state, rng = loader.state_dict(), torch.get_rng_state()
        assert state is not None, "the epoch has fewer than k batches"
    following = [_copy(b) for b in loader]
    if hasattr(loader, "close"):
        loader.close()
    del loader
    resumed_loader = _loader(make, 99, 12345 if generator else None)
    resumed_loader.load_state_dict(_through_checkpoint(state))
    if keep_rng:
        torch.set_rng_state(rng)
    resumed = [_copy(b) for b in resumed_loader]
    resumed_following = [_copy(b) for b in resumed_loader]
    resumed_loader.close()
    return got[k:], following, resumed, resumed_following


def assert_resumes(make, k, **options):
    rest, following, resumed, resumed_following = interrupted_and_resumed(make, k, **options)
    assert len(resumed) == len(rest), f"{len(resumed)} batches resumed, {len(rest)} expected"
    for i, (a, b) in enumerate(zip(resumed, rest)):
        assert_same(a, b, f"resumed[{i}]")
    assert len(resumed_following) == len(following)
    for i, (a, b) in enumerate(zip(resumed_following, following)):
        assert_same(a, b, f"next epoch[{i}]")
    return rest


CONFIGS = [dict(num_workers=0), dict(num_workers=2, persistent_workers=False),
           dict(num_workers=2, persistent_workers=True)]
IDS = ["workers0", "workers2", "workers2-persistent"]


# -- map-style ----------------------------------------------------------------------------

@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
@pytest.mark.parametrize("k", [1, 4, 7])  # 7: the sampler is exhausted when it is saved
def test_map_style_resumes_with_the_same_draws(options, k, leak_check):
    def make(generator):
        return PIMDataLoader(RandomDS(), batch_size=3, shuffle=True, generator=generator,
                             multiprocessing_context="fork" if options["num_workers"] else None,
                             **options)
    rest = assert_resumes(make, k)
    assert rest  # the state was taken mid-epoch
    leak_check.assert_clean(what="resumed loaders closed", procs_only=True)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_resume_in_a_later_epoch(options):
    """Persistent workers carry their random state over epochs: a state taken in the
    second epoch holds it (a fresh worker seeded from the base seed would draw otherwise)."""
    def make(generator):
        return PIMDataLoader(RandomDS(11), batch_size=2, shuffle=True, generator=generator,
                             **options)
    assert_resumes(make, 2, epochs_before=1)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_state_after_the_epoch_end_starts_the_next_epoch(options):
    def make(generator):
        return PIMDataLoader(RandomDS(10), batch_size=4, shuffle=True, generator=generator,
                             **options)
    rest, following, resumed, _ = interrupted_and_resumed(make, 0, epochs_before=1)
    assert not rest and len(following) == 3
    for a, b in zip(resumed, following, strict=True):
        assert_same(a, b)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_state_before_the_first_epoch(options):
    def make(generator):
        return PIMDataLoader(RandomDS(10), batch_size=4, shuffle=True, generator=generator,
                             **options)
    original = _loader(make, 1, 7)
    state = original.state_dict()
    epoch = [_copy(b) for b in original]
    original.close()
    resumed = _loader(make, 99, 12345)
    resumed.load_state_dict(_through_checkpoint(state))
    for a, b in zip([_copy(b) for b in resumed], epoch, strict=True):
        assert_same(a, b)
    resumed.close()


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_state_after_a_break_and_the_iterator_dropped(options, leak_check):
    """The usual checkpoint: break out of the loop, then save. A non-persistent iterator has
    shut its workers down by then; its position outlives it."""
    def make(generator):
        return PIMDataLoader(RandomDS(), batch_size=3, shuffle=True, generator=generator,
                             **options)
    uninterrupted = [_copy(b) for b in _loader(make, 1, 7)]
    loader = _loader(make, 1, 7)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    gc.collect()
    if not options.get("persistent_workers"):
        leak_check.assert_clean(what="the dropped iterator", procs_only=True)
    state = loader.state_dict()
    loader.close()
    resumed_loader = _loader(make, 99, 12345)
    resumed_loader.load_state_dict(_through_checkpoint(state))
    resumed = [_copy(b) for b in resumed_loader]
    resumed_loader.close()
    for a, b in zip(resumed, uninterrupted[3:], strict=True):
        assert_same(a, b)


def test_loading_into_a_loader_with_live_persistent_workers():
    """load_state_dict() on a loader whose persistent workers are alive restarts them: the
    next iter() goes back to the saved position."""
    loader = PIMDataLoader(RandomDS(), batch_size=3, shuffle=True, num_workers=2,
                           persistent_workers=True, generator=torch.Generator().manual_seed(7))
    batches, state = [], None
    for batch in loader:
        batches.append(_copy(batch))
        if len(batches) == 3:
            state = loader.state_dict()
    workers = [w.pid for w in loader._iterator._workers]
    loader.load_state_dict(state)
    resumed = [_copy(b) for b in loader]
    assert workers != [w.pid for w in loader._iterator._workers]
    loader.close()
    for a, b in zip(resumed, batches[3:], strict=True):
        assert_same(a, b)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_without_a_generator_the_global_random_state_is_the_checkpoints(num_workers):
    """No `generator`: the sampler's permutation and the workers' base seed come from
    torch's global random state, recorded in the loader's state; the next epoch draws from
    the global state, which the training checkpoint restores."""
    def make(generator):
        return PIMDataLoader(RandomDS(), batch_size=3, shuffle=True, num_workers=num_workers)
    assert_resumes(make, 3, generator=False, keep_rng=True)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_a_dataset_state_is_saved_per_worker(options):
    def make(generator):
        return PIMDataLoader(CountingDS(), batch_size=3, shuffle=True, generator=generator,
                             **options)
    rest = assert_resumes(make, 3)
    assert max(int(c) for batch in rest for c in batch[4]) > 3  # the counts went on


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stateful_sampler_is_restored_not_replayed(num_workers):
    def make(generator):
        return PIMDataLoader(RandomDS(), batch_size=3, sampler=StatefulSampler(23),
                             generator=generator, num_workers=num_workers)
    assert_resumes(make, 3)


def test_samplers_without_batching_and_with_replacement():
    def make(generator):
        sampler = torch.utils.data.RandomSampler(range(23), replacement=True, num_samples=40,
                                                 generator=generator)
        return PIMDataLoader(RandomDS(), batch_size=None, sampler=sampler, num_workers=2,
                             generator=generator)
    assert_resumes(make, 9)


def test_in_order_false_resumes_the_remaining_batches():
    """in_order=False gives no reproducible order (nor, for random transforms, which worker
    makes a batch): the batches after the state are exactly the remaining ones."""
    def make(generator):
        return PIMDataLoader(CountingDS(40), batch_size=2, shuffle=True, generator=generator,
                             num_workers=2, in_order=False)
    rest, following, resumed, resumed_following = interrupted_and_resumed(make, 5)

    def ids(batches):
        return sorted(tuple(b[1].tolist()) for b in batches)
    assert ids(resumed) == ids(rest) and len(rest) == 15
    assert ids(resumed_following) == ids(following)


# -- iterable-style -----------------------------------------------------------------------

@pytest.mark.parametrize("dataset", [RandomIterDS, StatefulIterDS, StatefulIteratorDS])
@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
@pytest.mark.parametrize("k", [1, 4, 6])
def test_iterable_resumes_per_worker(dataset, options, k):
    def make(generator):
        return PIMDataLoader(dataset(), batch_size=2, generator=generator, **options)
    assert_resumes(make, k)


def test_iterable_with_the_in_memory_kernel_transform():
    """A resumed worker replays its fetches, drawing as it did, then restores its state."""
    transform = v2.Compose([v2.RandomResizedCrop(8), v2.RandomHorizontalFlip()])

    def make(generator):
        loader = PIMDataLoader(ImagesIterDS(), batch_size=3, generator=generator,
                               num_workers=2, persistent_workers=True, transform=transform,
                               backend="cpu")
        assert isinstance(loader._pipeline, InMemoryImages)
        return loader
    assert_resumes(make, 2)


class ImagesDS(Dataset):
    def __len__(self):
        return 14

    def __getitem__(self, i):
        image = torch.arange(3 * 20 * 24).reshape(3, 20, 24).add(i * 7).remainder(256)
        return image.to(torch.uint8), i


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_map_style_with_the_in_memory_kernel_transform(options):
    transform = v2.Compose([v2.RandomResizedCrop(8), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True)])

    def make(generator):
        loader = PIMDataLoader(ImagesDS(), batch_size=3, shuffle=True, generator=generator,
                               transform=transform, backend="cpu", **options)
        assert isinstance(loader._pipeline, InMemoryImages)
        return loader
    assert_resumes(make, 2)


# -- the native image path ----------------------------------------------------------------

@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from benchmarks.make_dataset import make_imagenet_like
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=16, classes=2)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_native_image_path_resumes_with_the_same_crops(photos, options):
    from pimloader.datasets import ImageFolder
    from pimloader.pipelines.classification import EncodedImages
    transform = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(),
                            v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True)])

    def make(generator):
        loader = PIMDataLoader(ImageFolder(photos), batch_size=4, shuffle=True,
                               generator=generator, transform=transform, backend="cpu",
                               **options)
        assert isinstance(loader._pipeline, EncodedImages) and loader._pipeline.images.direct
        return loader
    rest = assert_resumes(make, 1)
    assert len(rest) == 3


class FailingDS(RandomDS):
    def __getitem__(self, i):
        if i == 5:
            raise ValueError("sample 5 is bad")
        return super().__getitem__(i)


@pytest.mark.parametrize("options", CONFIGS, ids=IDS)
def test_a_batch_that_raised_counts_as_received(options):
    """The user caught a batch's error and went on: the resumed run does not fetch it again,
    and the draws its samples made before the error stay made."""
    def make(generator):
        return PIMDataLoader(FailingDS(), batch_size=2, generator=generator, **options)
    loader = _loader(make, 1, 7)
    iterator, received, state = iter(loader), [], None
    while True:
        try:
            received.append(_copy(next(iterator)))
        except ValueError:
            received.append("error")
        except StopIteration:
            break
        if len(received) == 4:
            state = loader.state_dict()
    loader.close()
    assert received[2] == "error" and state["batches_yielded"] == 3
    resumed_loader = _loader(make, 99, 12345)
    resumed_loader.load_state_dict(_through_checkpoint(state))
    resumed = [_copy(b) for b in resumed_loader]
    resumed_loader.close()
    for a, b in zip(resumed, received[4:], strict=True):
        assert_same(a, b)


# -- errors -------------------------------------------------------------------------------

def _state_after(loader, k):
    iterator = iter(loader)
    for _ in range(k):
        next(iterator)
    return loader.state_dict()


def test_a_different_number_of_workers_is_refused():
    state = _state_after(PIMDataLoader(RandomDS(), batch_size=2, num_workers=2), 2)
    with pytest.raises(ValueError, match="num_workers=2 .* num_workers=0"):
        PIMDataLoader(RandomDS(), batch_size=2).load_state_dict(state)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_sampler_that_cannot_be_fast_forwarded_is_refused(num_workers, leak_check):
    def make():
        return PIMDataLoader(RandomDS(), batch_size=2, sampler=UntrackedSampler(23),
                             num_workers=num_workers)
    state = _state_after(make(), 2)
    loader = make()
    loader.load_state_dict(state)
    with pytest.raises(ValueError, match="cannot be fast-forwarded"):
        iter(loader)
    leak_check.assert_clean(what="a refused resume", procs_only=True)


def test_other_states_are_refused():
    loader = PIMDataLoader(RandomDS(), batch_size=2)
    with pytest.raises(ValueError, match="not made by PIMDataLoader"):
        loader.load_state_dict({"_snapshot": {}, "_steps_since_snapshot": 0})
    state = loader.state_dict()
    with pytest.raises(ValueError, match="version 99"):
        loader.load_state_dict(dict(state, version=99))
    iterable = PIMDataLoader(RandomIterDS(), batch_size=2)
    with pytest.raises(ValueError, match="map-style dataset"):
        iterable.load_state_dict(state)
    loader.load_state_dict({})  # torchdata's empty state: nothing to resume


def test_a_loaded_state_is_the_state_until_iterated():
    loader = PIMDataLoader(RandomDS(), batch_size=2, shuffle=True)
    state = _state_after(loader, 3)
    fresh = PIMDataLoader(RandomDS(), batch_size=2, shuffle=True)
    fresh.load_state_dict(state)
    again = fresh.state_dict()
    assert canonical(again["sampler"]["last_drawn"]) == canonical(state["sampler"]["last_drawn"])
    assert again["batches_yielded"] == 3
