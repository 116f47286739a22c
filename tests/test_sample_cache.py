"""The encoded-sample cache (cache_bytes=): same batches as without it, a budget respected,
nothing evicted, hits and misses counted, errors unchanged, no shared memory left behind.

The oracle is the same loader without the cache (itself checked against torchvision in
test_image_pipeline.py)."""
from __future__ import annotations

import os
import signal
import warnings

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import Snapshot, TensorDS
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, WorkerDiedError
from pimloader.datasets import ImageFolder
from pimloader.datasets.cache import CachedReader, SampleCache
from pimloader.datasets.source import Source, prefetch
from pimloader.decode import DecodeError
from test_image_pipeline import photos_with_a_truncated_file  # noqa: F401  (fixture, over this file's photos)

TRANSFORM = v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True)])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=24, classes=3)


def sizes(root):
    return [os.path.getsize(path) for path, _ in ImageFolder(root).samples]


def make(root, **kw):
    kw.setdefault("batch_size", 5)
    kw.setdefault("shuffle", True)
    return PIMDataLoader(ImageFolder(root), transform=TRANSFORM,
                         generator=torch.Generator().manual_seed(3), **kw)


def epochs(loader, count):
    out = []
    torch.manual_seed(7)
    for _ in range(count):
        out.append([(images.clone(), labels.clone()) for images, labels in loader])
    return out


def cache_of(loader):
    return loader._pipeline.images.reader.cache


@pytest.mark.parametrize("num_workers,context,persistent", [
    (0, None, False), (2, "fork", False), (2, "spawn", True), (2, "fork", True)])
def test_same_batches_with_and_without_the_cache(photos, num_workers, context, persistent):
    total = sum(sizes(photos))
    kw = dict(num_workers=num_workers)
    if num_workers:
        kw.update(multiprocessing_context=context, persistent_workers=persistent)
    want = epochs(make(photos, **kw), 3)
    loader = make(photos, cache_bytes=total // 2, **kw)
    got = epochs(loader, 3)
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w)
        for (gi, gl), (wi, wl) in zip(g, w):
            assert torch.equal(gi, wi), f"epoch {epoch}: images differ with the cache"
            assert torch.equal(gl, wl)
    stats = loader.stats()
    assert stats[0].cache_hits == 0 and stats[0].cache_misses == 24
    cached = cache_of(loader).cached()
    assert 0 < len(cached) < 24
    for epoch in stats[1:]:
        assert epoch.cache_hits == len(cached) and epoch.cache_misses == 24 - len(cached)
        assert epoch.cache_hit_bytes == sum(cached.values())
    loader.close()


def test_budget_holds_the_first_come_samples_that_fit(photos):
    lengths = sizes(photos)
    budget = sum(lengths) // 3
    loader = make(photos, cache_bytes=budget, shuffle=False, batch_size=4)
    list(loader)
    # one process, sequential order: greedy first-fit over 0, 1, 2, ...
    expected, fill = {}, 0
    for index, length in enumerate(lengths):
        if fill + length <= budget:
            expected[index] = length
            fill += length
    assert cache_of(loader).cached() == expected
    assert cache_of(loader).filled_bytes() == fill <= budget
    loader.close()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_no_eviction_and_budget_with_workers(photos, context):
    lengths = sizes(photos)
    budget = sum(lengths) // 2
    loader = make(photos, cache_bytes=budget, num_workers=2, multiprocessing_context=context)
    list(loader)
    after_first = cache_of(loader).cached()
    fill = cache_of(loader).filled_bytes()
    assert sum(after_first.values()) == fill <= budget
    assert all(length == lengths[i] for i, length in after_first.items())
    # anything left out was too big for what was left when it came (what is left only shrinks)
    assert all(lengths[i] > budget - fill for i in range(24) if i not in after_first)
    list(loader), list(loader)
    assert cache_of(loader).cached() == after_first
    loader.close()


def test_cached_bytes_are_the_files(photos):
    loader = make(photos, cache_bytes=10 ** 9, num_workers=2)
    list(loader)
    cache = cache_of(loader)
    samples = ImageFolder(photos).samples
    assert len(cache.cached()) == 24
    for index in range(24):
        with open(samples[index][0], "rb") as file:
            assert cache.get(index) == file.read()
    assert loader.stats()[0].cache_miss_bytes == sum(sizes(photos))
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_corrupt_file_raises_naming_it_from_the_cache_too(photos_with_a_truncated_file,
                                                            num_workers):
    root, victim = photos_with_a_truncated_file
    loader = make(root, cache_bytes=10 ** 9, num_workers=num_workers)
    for _ in range(2):  # the second time its bytes come from the cache
        with pytest.raises(DecodeError, match=victim.name):
            list(loader)
    loader.close()


def test_skip_counts_a_corrupt_file_every_epoch(photos_with_a_truncated_file):
    root, _ = photos_with_a_truncated_file
    loader = make(root, cache_bytes=10 ** 9, num_workers=2, on_error="skip")
    plain = make(root, num_workers=2, on_error="skip")
    for _ in range(2):
        list(loader), list(plain)
    assert [s.skipped_samples for s in loader.stats()] == [
        s.skipped_samples for s in plain.stats()]
    assert loader.stats()[1].skipped_samples >= 1 and loader.stats()[1].cache_hits == 24
    loader.close()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_no_shared_memory_left_after_close_or_del(photos, context):
    snap = Snapshot()
    loader = make(photos, cache_bytes=10 ** 6, num_workers=2, multiprocessing_context=context,
                  persistent_workers=True)
    list(loader)
    loader.close()
    assert not cache_of(loader).is_open
    list(loader)  # iterable again after close(): a fresh cache, filled again
    assert loader.stats()[-1].cache_misses == 24
    del loader
    snap.assert_clean(what="a cached loader closed, reused and dropped")


def test_a_worker_killed_while_filling_the_cache_leaves_no_one_waiting(photos, monkeypatch):
    """A worker SIGKILLed between claiming a sample's entry and publishing it (the only
    multi-step update of the shared table): the loader reports that worker's death, and the
    next epochs, whose fresh workers go through the same table, give the batches of a
    loader without a cache. (With the former design, a lock around the table, a worker
    killed while holding it left every later epoch's workers blocked on it for good.)"""
    snap = Snapshot()
    victim = 5
    with open(ImageFolder(photos).samples[victim][0], "rb") as file:
        victim_bytes = file.read()
    main_pid = os.getpid()
    write = SampleCache._write

    def die_when_writing_the_victim(data, offset, value):
        if os.getpid() != main_pid and value == victim_bytes:
            os.kill(os.getpid(), signal.SIGKILL)
        write(data, offset, value)

    kw = dict(num_workers=2, multiprocessing_context="fork", shuffle=False)
    want = epochs(make(photos, **kw), 3)
    # timeout: only a guard, so that a hang fails the test instead of stalling the suite
    loader = make(photos, cache_bytes=10 ** 9, timeout=60, **kw)
    monkeypatch.setattr(SampleCache, "_write", staticmethod(die_when_writing_the_victim))
    with pytest.raises(WorkerDiedError, match=r"DataLoader worker \(pid \d+\) is killed by "
                                              r"signal.*PIMDataLoader worker \d"):
        list(loader)
    monkeypatch.setattr(SampleCache, "_write", staticmethod(write))
    got = epochs(loader, 2)
    for g, w in zip(got, want[1:]):
        assert [len(x) for x in g] == [len(x) for x in w]
        for (gi, gl), (wi, wl) in zip(g, w):
            assert torch.equal(gi, wi) and torch.equal(gl, wl)
    cached = cache_of(loader).cached()
    assert victim not in cached and len(cached) == 23  # its entry stays claimed, never filled
    assert loader.stats()[-1].cache_hits == 23 and loader.stats()[-1].cache_misses == 1
    loader.close()
    del loader
    snap.assert_clean(what="a cached loader whose worker was killed while filling it")


def test_indices_are_checked_as_a_list_checks_them():
    cache = SampleCache(budget=100, size=3)
    cache.open()
    assert cache.put(-1, b"abc") and cache.get(2) == b"abc"  # -1 is the last, as in a list
    assert not cache.put(2, b"xyz")  # never overwritten
    for bad in (3, -4):
        with pytest.raises(IndexError):
            cache.get(bad)
        with pytest.raises(IndexError):
            cache.put(bad, b"x")
    assert not cache.put(0, bytes(98)) and cache.put(0, bytes(97))  # 3 + 98 > 100 >= 3 + 97
    assert cache.cached() == {0: 97, 2: 3} and cache.filled_bytes() == 100
    cache.close()


class _Hinted(Source):
    """A source that records the prefetch hints it is given (`prefetches` as told)."""

    def __init__(self, prefetches: bool) -> None:
        self.prefetches, self.hints = prefetches, []

    def prefetch(self, indices) -> None:
        self.hints.append(list(indices))


def test_a_cached_reader_hints_only_the_samples_it_misses():
    """The cache passes on the prefetch hint for the samples it does not hold, and the hint
    reaches no source that would ignore it (so the cache is not even looked up)."""
    cache = SampleCache(budget=100, size=5)
    cache.open()
    assert cache.put(1, b"a") and cache.put(3, b"b")
    assert [cache.has(i) for i in range(5)] == [False, True, False, True, False]
    hinted = _Hinted(prefetches=True)
    prefetch(CachedReader(hinted, cache), [0, 1, 2, 3, 4])
    assert hinted.hints == [[0, 2, 4]]
    ignoring = _Hinted(prefetches=False)
    reader = CachedReader(ignoring, cache)
    assert not reader.prefetches
    prefetch(reader, [0, 1, 2])
    assert ignoring.hints == []
    cache.close()


def _put_all(cache, writer, start, done):
    start.wait()
    for index in range(cache.size):
        cache.put(index, bytes([writer]) * (1 + index % 97))
    done.put(writer)


def test_processes_racing_to_fill_the_table_each_index_once():
    """Four forked processes released together offer every index in the same order (so
    they contend for the same entries and the same fill pointer), with bytes that name the
    writer: each cached sample is one writer's whole bytes, and the fill pointer is exactly
    the bytes cached (none reserved twice, none lost), within the budget."""
    import multiprocessing
    size = 3000
    lengths = [1 + index % 97 for index in range(size)]
    cache = SampleCache(budget=sum(lengths) // 2, size=size)
    cache.open()
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(4), context.Queue()
    processes = [context.Process(target=_put_all, args=(cache, writer, start, done))
                 for writer in (1, 2, 3, 4)]
    for process in processes:
        process.start()
    finished = sorted(done.get(timeout=120) for _ in processes)  # a guard, not a timing
    for process in processes:
        process.join()
    assert finished == [1, 2, 3, 4]
    cached = cache.cached()
    assert cache.filled_bytes() == sum(cached.values()) <= cache.budget
    assert sum(cached.values()) > cache.budget - 97  # the budget was used up
    for index, length in cached.items():
        data = cache.get(index)
        assert length == lengths[index] and data == data[:1] * length
    done.close()
    cache.close()


def test_arguments_are_checked(photos):
    for bad in (-1, 1.5, True, "1MB"):
        with pytest.raises(ValueError, match="cache_bytes"):
            make(photos, cache_bytes=bad)
    with pytest.warns(UserWarning, match="cache_bytes applies only"):
        PIMDataLoader(TensorDS(8, "tuple"), batch_size=4, cache_bytes=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(photos, cache_bytes=0)


def test_a_budget_over_what_dev_shm_holds_is_refused_at_the_first_epoch(photos):
    free = os.statvfs("/dev/shm")
    loader = make(photos, cache_bytes=free.f_bavail * free.f_frsize + 2 ** 30)
    with pytest.raises(ValueError, match="/dev/shm"):
        next(iter(loader))
