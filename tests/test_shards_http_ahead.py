"""Shard members over HTTP fetched ahead in the background: a prefetch returns at once and
a thread of the reader's own fetches its runs in order, one at a time; a worker hints the
next batch before it makes this one, so that batch's runs are requested while this one is
computed (a gate that would fail the batch otherwise: no timing assertion); runs held until
read (each range requested once); the error matrix through the loader with look-ahead;
batches equal to local shards' with 0 and 2 workers; no thread, socket or process left
behind, a fetch in flight abandoned by close(), a forked child that does not use the
parent's thread."""
import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import assert_same_batches, seeded_batches as batches
from _http_servers import FaultServer
from pimloader import PIMDataLoader, TarShards
from pimloader import transforms as T
from pimloader.datasets import HttpShardError, shard_fetch, shard_runs
from pimloader.datasets.shard_runs import HeldRuns, Run
from test_shards_http import sockets
from test_shards_http_runs import FAST, fetched, ranges, runs_of, shards  # noqa: F401

TRANSFORM = T.Compose([T.Decode(), v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True)])
FETCH_THREAD = "pimloader-shard-fetch"


class SlowServer(FaultServer):
    """A FaultServer that answers each request after `delay` seconds (a remote store's
    latency), and sets `seen[path]` when a GET of `path` comes in."""

    def __init__(self, root, delay=0.02):
        super().__init__(root)
        self.delay = delay
        self.seen: dict = {}

    def next_action(self, path):
        event = self.seen.get(path)
        if event is not None:
            event.set()
        action = super().next_action(path)
        return f"slow:{self.delay}" if action == "ok" and self.delay else action


def fetch_threads():
    return [t for t in threading.enumerate() if t.name == FETCH_THREAD]


def wait_for(condition, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def sleep_a_little(worker_id):
    """worker_init_fn: the main process has queued its first batches by the time the
    worker takes one, so the look-ahead sees the next."""
    time.sleep(0.5)


# ---------------------------------------------------------------- the runs' bookkeeping

def test_held_runs_plan_skip_what_is_held_and_never_span_it():
    held = HeldRuns(budget=1000)
    [first] = held.plan("u", [(100, 50), (160, 40)])
    assert (first.start, first.end, first.wanted) == (100, 200, {(100, 50), (160, 40)})
    assert held.add(first)
    assert held.plan("u", [(100, 50)]) == []            # held: not asked for again
    runs = held.plan("u", [(10, 20), (160, 40), (300, 10)])
    assert [(run.start, run.end) for run in runs] == [(10, 30), (300, 310)]   # around it
    first.wanted.clear()
    first.wanted.add((100, 50))
    first.done, first.data = True, bytes(100)
    held.take(first, 100, 50)                           # every member read: dropped
    assert held.find("u", 100, 50) is None and held.bytes == 0


def test_held_runs_plan_keeps_tiers_apart():
    held = HeldRuns(budget=10_000)
    members = [(0, 10), (10, 10), (20, 10), (30, 10)]
    [one] = held.plan("u", members)                     # adjacent: one run
    assert (one.start, one.end) == (0, 40)
    tiers = {(0, 10): 0, (10, 10): 1, (20, 10): 1, (30, 10): 0}
    runs = held.plan("u", members, tiers)               # never across tiers
    assert [(run.start, run.end, run.tier) for run in runs] == [
        (0, 10, 0), (10, 30, 1), (30, 40, 0)]


def test_a_cold_ask_fetches_the_first_places_first(monkeypatch):
    """Asked with nothing queued or held (an epoch's first batch), members are planned in
    the tiers of their places (COLD_TIERS): the first chunk's members come before the
    next chunk's, though the shard's runs would hold both; asked again while runs are
    held, they are planned as one run."""
    fetcher = shard_fetch.RunFetcher(shard_fetch.RetryPolicy())
    monkeypatch.setattr(fetcher, "_start", lambda: None)   # no thread: look at the queue
    url = "http://example.invalid/a.tar"
    members = [(url, 100 * i, 100) for i in range(30)]  # adjacent: one run untiered
    fetcher.ask(members)
    assert [(run.start, run.end) for run in fetcher.queue] == [(0, 800), (800, 2400),
                                                               (2400, 3000)]
    fetcher.ask([(url, 5000 + 100 * i, 100) for i in range(30)])   # runs held: warm
    assert [(run.start, run.end) for run in fetcher.queue][-1] == (5000, 8000)


def test_held_runs_evict_the_oldest_fetched_first():
    held = HeldRuns(budget=300)
    old, queued, new = Run("u", 0, 100, []), Run("u", 200, 300, []), Run("u", 400, 550, [])
    assert held.add(old) and held.add(queued)
    old.done = True
    assert held.add(new)                                 # old evicted, queued kept
    assert held.find("u", 0, 10) is None and held.find("u", 200, 10) is queued
    assert not held.add(Run("u", 600, 700, []))          # nothing fetched left to evict


# ---------------------------------------------------------------- the reader

def test_prefetch_returns_at_once_and_close_abandons_the_fetch_in_flight(shards):
    folder, names, local = shards
    before = sockets()
    with SlowServer(folder, delay=0) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], **FAST)
        server.plan(f"/{names[0]}", ["slow:60"])
        asked = server.seen[f"/{names[0]}"] = threading.Event()
        remote.prefetch(range(4))                        # returns with the answer 60 s off
        assert asked.wait(10)
        [run] = remote.reader().runs.held.age
        assert not run.done
        started = time.monotonic()
        remote.close()
        assert time.monotonic() - started < 30           # not the 60 s of the answer
        assert fetch_threads() == []
    wait_for(lambda: sockets() == before, f"sockets left: {sockets()} != {before}")


def test_reads_wait_for_their_run_and_each_range_is_asked_once(shards):
    folder, names, local = shards
    with SlowServer(folder, delay=0.05) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            del server.log[:]
            remote.prefetch(range(8))
            remote.prefetch(range(4, 12))               # 4..7 asked already
            assert [remote[i] for i in range(12)] == [local[i] for i in range(12)]
            assert ranges(server.log) == [runs_of(remote, s) for s in range(3)]
            assert remote.reader().runs.held.bytes == 0   # each member read: none held


def test_runs_are_fetched_in_the_order_their_members_are_read(shards, monkeypatch):
    """A batch's first sample is fetched first, wherever it lies in its shard: runs go in
    the order of their first member read, not shard by shard, offset by offset; the other
    runs of the same shard queued then are asked for in the same GET (several ranges)."""
    folder, names, local = shards
    monkeypatch.setattr(shard_runs, "RUN_GAP", 0)        # a run per member
    order = [5, 1, 9, 0, 14]                             # shards 1, 0, 2, 0, 3
    with SlowServer(folder, delay=0) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            del server.log[:]
            remote.prefetch(order)
            assert [remote[i] for i in order] == [local[i] for i in order]
            members = [remote.index.member(i, 0) for i in (5, 1, 0, 9, 14)]
            assert ranges(server.log) == [(offset, offset + size) for offset, size, _ in members]
            assert [path for _, path, _, _ in server.log] == [f"/{names[s]}" for s in (1, 0, 2, 3)]


def test_a_forked_child_does_not_use_the_parents_fetch_thread(shards):
    folder, names, local = shards
    with SlowServer(folder, delay=0.3) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            remote.prefetch(range(16))                  # the parent's thread mid-fetch
            pid = os.fork()
            if pid == 0:   # the child: a reader of its own; the inherited one left alone
                signal.alarm(30)
                ok = [remote[i] for i in (1, 9, 14)] == [local[i] for i in (1, 9, 14)]
                remote.close()
                os._exit(0 if ok else 1)
            assert [remote[i] for i in range(16)] == [local[i] for i in range(16)]
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0


# ---------------------------------------------------------------- through the loader

def test_the_next_batch_is_fetched_while_this_one_is_made(shards, tmp_path):
    """One worker, one shard per batch, the next batch always queued (prefetch_factor=3):
    sample 2 of each batch k is read only once the server has been asked for shard k + 1.
    A worker that fetched batch k + 1 after making batch k would wait 20 s there and fail
    the batch."""
    folder, names, local = shards
    asked = [multiprocessing.get_context("fork").Event() for _ in names]

    class Gated(TarShards):
        def field(self, index, field):
            batch = index // 4
            if index % 4 == 2 and field == 0 and batch + 1 < len(asked) \
                    and not asked[batch + 1].wait(20):
                raise RuntimeError(f"batch {batch + 1} was not fetched while batch {batch} "
                                   f"was made")
            return super().field(index, field)

    with SlowServer(folder) as server:
        remote = Gated([f"{server.url}/{name}" for name in names], **FAST)
        del server.log[:]
        server.seen.update({f"/{name}": event for name, event in zip(names, asked)})
        loader = PIMDataLoader(remote, transform=TRANSFORM, batch_size=4, num_workers=1,
                               prefetch_factor=3, worker_init_fn=sleep_a_little,
                               multiprocessing_context="fork")
        got = [labels.tolist() for _, labels in loader]
        loader.close()
        spans = ranges(server.log)
    assert got == [[local[i][1] for i in range(s * 4, s * 4 + 4)] for s in range(4)]
    assert spans == [runs_of(remote, s) for s in range(4)]   # in order, each once


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_local_shards_and_nothing_is_left_behind(shards, workers, monkeypatch,
                                                               leak_check):
    folder, names, local = shards
    monkeypatch.setattr(shard_fetch, "IDLE_S", 0.2)
    want, local_loader = batches(lambda g: PIMDataLoader(
        local, transform=TRANSFORM, batch_size=3, shuffle=True, num_workers=workers,
        generator=g))
    local.close()
    before = sockets()
    with SlowServer(folder) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], **FAST)
        del server.log[:]
        got, loader = batches(lambda g: PIMDataLoader(
            remote, transform=TRANSFORM, batch_size=3, shuffle=True, num_workers=workers,
            generator=g))
        assert_same_batches(got, want)
        del got, want   # their tensors' shared memory from the workers
        loader.close()
        local_loader.close()
        spans = ranges(server.log)
        wait_for(lambda: fetch_threads() == [], f"fetch threads left: {fetch_threads()}")
        remote.close()
    assert all(end is not None for _, end in spans), spans      # bounded Range requests
    assert len(set(spans)) == len(spans), spans                 # no range asked twice
    wait_for(lambda: sockets() == before, f"sockets left: {sockets()} != {before}")
    leak_check.assert_clean(what=f"runs fetched ahead, {workers} workers")


@pytest.mark.parametrize("fault", ["500", "reset"])
def test_retried_runs_ahead_give_the_same_batches(shards, fault):
    folder, names, local = shards
    want = [[local[i][1] for i in range(s * 4, s * 4 + 4)] for s in range(4)]
    with SlowServer(folder) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], attempts=3, **FAST)
        path = f"/{names[2]}"
        server.plan(path, ["500", "503", "ok"] if fault == "500" else ["reset:3000"])
        del server.log[:]
        loader = PIMDataLoader(remote, transform=TRANSFORM, batch_size=4, num_workers=1,
                               worker_init_fn=sleep_a_little)
        assert [labels.tolist() for _, labels in loader] == want
        loader.close()
        start, end = runs_of(remote, 2)
        expected = [(start, end)] * 3 if fault == "500" else [(start, end), (start + 3000, end)]
        assert ranges(server.log, path) == expected
        remote.close()


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_404_ahead_fails_its_own_batch_naming_url_status_and_sample(shards, on_error):
    folder, names, local = shards
    with SlowServer(folder) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], **FAST)
        url, path = f"{server.url}/{names[2]}", f"/{names[2]}"
        server.plan(path, ["404"])
        del server.log[:]
        loader = PIMDataLoader(remote, transform=TRANSFORM, batch_size=4, num_workers=1,
                               worker_init_fn=sleep_a_little, on_error=on_error)
        got = []
        with pytest.raises(HttpShardError, match=rf"(?s)while fetching sample 8\b.*GET {url}: "
                                                 r"HTTP 404 Not Found \(not retried\)"):
            for _, labels in loader:
                got.append(labels.tolist())
        loader.close()
        assert got == [[local[i][1] for i in range(s * 4, s * 4 + 4)] for s in range(2)]
        assert ranges(server.log, path) == [runs_of(remote, 2)]   # fetched ahead, once
        remote.close()


class _Hints:
    """A producer that records the batches hinted to it (a source that fetches ahead)."""

    def __init__(self) -> None:
        self.hinted = []

    def prefetch(self, index) -> bool:
        self.hinted.append(list(index))
        return True


def _looking_worker():
    """A worker's look-ahead state over a thread queue, its producer recording hints."""
    import queue

    from pimloader.loader import _worker
    worker = object.__new__(_worker._Worker)
    worker.producer, worker.pending_error = _Hints(), None
    worker.index_queue, worker.waiting = queue.Queue(), _worker._NONE_WAITING
    worker.fetching_ahead, worker.asked_mid_batch = False, False
    return worker, _worker


def test_a_producer_asking_mid_batch_gets_the_next_batch_hinted_once_it_has_come():
    """The main process sends the next batch while this one is made: the producer's call
    between chunks takes it (kept for the loop, in order) and hints it; a second message
    waits in the queue; once the producer has asked, a batch's start no longer waits."""
    worker, _worker = _looking_worker()
    _worker._look_ahead(worker, [0, 1])            # nothing queued: waits, then goes on
    assert worker.producer.hinted == [[0, 1]] and worker.waiting is _worker._NONE_WAITING
    worker.look_ahead()                             # mid-batch: still nothing
    assert worker.next_waiting() is _worker._NONE_WAITING
    worker.index_queue.put((5, [2, 3]))
    worker.index_queue.put(None)
    worker.look_ahead()
    assert worker.producer.hinted == [[0, 1], [2, 3]]
    worker.look_ahead()                             # one message held at a time
    assert worker.next_waiting() == (5, [2, 3]) and worker.index_queue.get() is None
    waits = []
    worker.take_next = waits.append
    _worker._look_ahead(worker, [2, 3])
    assert waits == [0.0]


def test_no_look_ahead_where_the_source_does_not_fetch_ahead():
    worker, _worker = _looking_worker()
    worker.producer.prefetch = lambda index: False   # local shards, folders
    worker.index_queue.put((1, [4]))
    _worker._look_ahead(worker, [0])
    worker.look_ahead()
    assert worker.next_waiting() is _worker._NONE_WAITING and worker.index_queue.qsize() == 1


def test_the_image_producers_chunks_grow():
    """8 samples first, then twice as many each time up to LOAD_AHEAD (the tiers a cold
    fetch brings in order)."""
    from pimloader.pipelines.classification import DirectImageProducer
    chunks = DirectImageProducer._chunks
    producer = object.__new__(DirectImageProducer)
    assert chunks(producer, 64) == [(0, 8), (8, 24), (24, 56), (56, 64)]
    assert chunks(producer, 5) == [(0, 5)] and chunks(producer, 0) == []
    assert [stop for _, stop in chunks(producer, 64)][:3] == list(shard_fetch.COLD_TIERS)


def test_the_image_producer_asks_after_each_chunk_it_reads(shards, monkeypatch):
    """DirectImageProducer calls its context's look_ahead after reading each chunk of a
    batch (LOAD_AHEAD samples): a batch of 8 in chunks of 3 asks three times."""
    from pimloader.pipelines import classification
    monkeypatch.setattr(classification.DirectImageProducer, "LOAD_AHEAD", 3)
    asked = []
    real_init = classification.DirectImageProducer.__init__

    def counting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.look_ahead = lambda: asked.append(1)
    monkeypatch.setattr(classification.DirectImageProducer, "__init__", counting_init)
    loader = PIMDataLoader(shards[2], batch_size=8, transform=TRANSFORM)
    next(iter(loader))
    assert len(asked) == 3


def test_a_hinted_batch_is_asked_of_the_source_once(shards, monkeypatch):
    """The worker hints the batch it takes (and the next): the producer then does not ask
    the source for it again when it makes it; a batch nobody hinted it asks for itself."""
    from pimloader.pipelines import classification
    asked = []

    def counting(reader, indices):
        asked.append(list(indices))
        return True   # as a source that fetches ahead
    monkeypatch.setattr(classification, "prefetch", counting)
    loader = PIMDataLoader(shards[2], batch_size=4, transform=TRANSFORM)
    iterator = iter(loader)
    producer = iterator._producer
    while not isinstance(producer, classification.DirectImageProducer):
        producer = producer.producer
    assert producer.prefetch([4, 5, 6, 7])
    next(iterator)                                     # batch 0, not hinted: asked
    next(iterator)                                     # batch 1, hinted: not asked again
    next(iterator)                                     # batch 2, not hinted: asked
    assert asked == [[4, 5, 6, 7], [0, 1, 2, 3], [8, 9, 10, 11]]
