"""Coordinated prep (PIMDataLoader(share_with=..., share_jobs=N)): N processes share one
stream of prepared batches.

Oracles: an ordinary PIMDataLoader and torch's DataLoader with the same seed (every job
must get exactly their batches); a dataset that logs every fetch (each sample is prepared
once per epoch for the whole group); the process table and /dev/shm (nothing left behind).
"""
import multiprocessing
import threading
from multiprocessing import resource_tracker
import os
import time
import uuid

import pytest
import torch

from _coordinated_jobs import (BATCH_SIZE, CountingDataset, FailingDataset, WorkerKillingDataset,
                               job, make_loader, reference_batches, torch_reference)
from _helpers import Snapshot, assert_same_batches
from pimloader import PIMDataLoader, SharedPrepError, WorkerDiedError

pytestmark = pytest.mark.timeout(180)
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture(autouse=True)
def resource_tracker_running():
    """spawn starts multiprocessing's resource tracker (a per-interpreter singleton that
    keeps a pipe open) on first use: start it before the tests take their snapshots."""
    resource_tracker.ensure_running()


def group_name() -> str:
    return f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def start_job(name, jobs, num_workers, epochs, out, **kwargs):
    process = SPAWN.Process(target=job, args=(name, jobs, num_workers, epochs, str(out)),
                            kwargs=kwargs)
    process.start()
    return process


def wait_until_bound(name, process):
    """Until the spawned `process` has bound group `name` (it produces then)."""
    deadline = time.monotonic() + 90
    while f"@pimloader.share.{name}" not in open("/proc/net/unix").read():
        assert process.is_alive() and time.monotonic() < deadline, "the group was not formed"
        time.sleep(0.05)


def run_here(name, jobs, num_workers, epochs, log=None):
    loader = make_loader(CountingDataset(30, log), num_workers, share_with=name,
                         share_jobs=jobs)
    batches = [(x.clone(), y.clone()) for _ in range(epochs) for x, y in loader]
    stats = loader.stats()
    loader.close()
    return batches, stats


def fetch_counts(log) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in open(log).read().split():
        counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def test_arguments_are_checked():
    dataset = CountingDataset()
    for bad in dict(share_jobs=2), dict(share_with="g"), dict(share_with="g", share_jobs=1), \
            dict(share_with="", share_jobs=2), dict(share_with="g", share_jobs=True), \
            dict(share_with="x" * 91, share_jobs=2), dict(share_with="a\nb", share_jobs=2):
        with pytest.raises(ValueError, match="share_"):
            make_loader(dataset, 0, **bad)
    loader = make_loader(dataset, 0, share_with="g", share_jobs=2)
    with pytest.raises(ValueError, match="not supported with share_with"):
        loader.state_dict()


def test_two_jobs_get_the_batches_of_an_ordinary_loader_prepared_once(tmp_path):
    """This process produces (2 workers), a spawned one consumes: both get, over two
    epochs, the batches PIMDataLoader and torch's DataLoader give alone with that seed,
    and the group fetched each sample once per epoch."""
    snapshot = Snapshot()
    name, log = group_name(), str(tmp_path / "fetches")
    consumer = start_job(name, 2, 2, 2, tmp_path / "consumer.pt", log=log)
    batches, stats = run_here(name, 2, 2, 2, log=log)
    consumer.join(120)
    assert consumer.exitcode == 0
    consumer.close()  # its sentinel pipe
    theirs = torch.load(tmp_path / "consumer.pt")
    want = reference_batches(2, 2)
    assert_same_batches(batches, want, "producer")
    assert_same_batches(theirs["batches"], want, "consumer")
    assert_same_batches(want, torch_reference(2, 2), "PIMDataLoader alone vs torch")
    assert fetch_counts(log) == {index: 2 for index in range(30)}
    assert [s.samples for s in stats] == [30, 30] and stats[0].fetch_s > 0
    assert [fetch_s for _, fetch_s in theirs["stats"]] == [0.0, 0.0]  # it prepared nothing
    snapshot.assert_clean(what="a group of two jobs")


def test_three_jobs_with_a_producer_without_workers(tmp_path):
    """Three jobs, num_workers=0: whichever arrives first produces in its main process;
    this process may be producer or consumer. 30 samples in batches of 4 are 8 batches,
    twice the window of batches consumers may hold, so slots are reused."""
    snapshot = Snapshot()
    name, log = group_name(), str(tmp_path / "fetches")
    others = [start_job(name, 3, 0, 1, tmp_path / f"job{i}.pt", log=log) for i in (1, 2)]
    batches, _ = run_here(name, 3, 0, 1, log=log)
    for process in others:
        process.join(120)
        assert process.exitcode == 0
        process.close()  # its sentinel pipe
    want = reference_batches(0, 1)
    assert_same_batches(batches, want, "this job")
    for i in (1, 2):
        assert_same_batches(torch.load(tmp_path / f"job{i}.pt")["batches"], want, f"job {i}")
    assert fetch_counts(log) == {index: 1 for index in range(30)}
    snapshot.assert_clean(what="a group of three jobs")


def test_a_killed_consumer_is_dropped_and_the_others_go_on(tmp_path):
    """A consumer killed (SIGKILL) after its second batch, holding it: the producer warns,
    ignores what it held, and finishes two epochs (16 batches: past the window)."""
    snapshot = Snapshot()
    name = group_name()
    consumer = start_job(name, 2, 2, 2, tmp_path / "consumer.pt", die_after=2)
    with pytest.warns(RuntimeWarning, match=r"job 1 \(pid \d+\) .* ended without closing"):
        batches, _ = run_here(name, 2, 2, 2)
    consumer.join(60)
    assert consumer.exitcode == -9
    consumer.close()  # its sentinel pipe
    assert_same_batches(batches, reference_batches(2, 2), "producer")
    snapshot.assert_clean(what="a killed consumer")


def test_a_killed_consumer_leaves_the_other_consumer_running(tmp_path):
    """Three jobs (num_workers=0): a spawned producer, a spawned consumer killed (SIGKILL)
    mid-epoch holding its two batches, and this process, a consumer too: it still gets every
    batch of the epoch (8 batches: the window of 4 is reused past what the dead job held),
    as does the producer, and nothing is left behind."""
    snapshot = Snapshot()
    name = group_name()
    producer = start_job(name, 3, 0, 1, tmp_path / "producer.pt")
    wait_until_bound(name, producer)
    doomed = start_job(name, 3, 0, 1, tmp_path / "doomed.pt", die_after=2)
    batches, _ = run_here(name, 3, 0, 1)
    for process, exitcode in ((doomed, -9), (producer, 0)):
        process.join(120)
        assert process.exitcode == exitcode
        process.close()  # its sentinel pipe
    want = reference_batches(0, 1)
    assert len(want) == 8
    assert_same_batches(batches, want, "the surviving consumer")
    assert_same_batches(torch.load(tmp_path / "producer.pt")["batches"], want, "producer")
    snapshot.assert_clean(what="a group of three jobs, one consumer killed")


def test_a_killed_worker_of_the_producer_fails_the_group_cleanly(tmp_path):
    """A worker of the producing job SIGKILLed mid-epoch (at the sample of the fourth batch):
    the producer raises WorkerDiedError, and the consumer (this process) raises it too, with
    its type, after a prefix of the epoch's batches; the producer's other worker is stopped,
    and nothing is left behind."""
    snapshot = Snapshot()
    name, out = group_name(), tmp_path / "producer.pt"
    order = torch.cat([labels for _, labels in reference_batches(2, 1)]).tolist()
    victim = order[3 * BATCH_SIZE]
    producer = start_job(name, 2, 2, 1, out, kill_worker_at=victim)
    wait_until_bound(name, producer)
    loader = make_loader(WorkerKillingDataset(victim), 2, share_with=name, share_jobs=2)
    got, x, y = [], None, None
    with pytest.raises(WorkerDiedError, match=r"DataLoader worker \(pid \d+\) is killed by signal"):
        for x, y in loader:
            got.append((x.clone(), y.clone()))
    del x, y  # the last batch received: it holds its slot's mapping, as it should
    loader.close()
    producer.join(120)
    assert producer.exitcode == 0  # it caught its error and closed its loader
    producer.close()  # its sentinel pipe
    assert torch.load(out)["error"].startswith("WorkerDiedError: DataLoader worker (pid")
    assert len(got) <= 3
    assert_same_batches(got, reference_batches(2, 1)[:len(got)], "consumer")
    snapshot.assert_clean(what="a producer whose worker was killed")


def test_a_killed_producer_makes_the_consumer_raise(tmp_path):
    """The producing job (2 workers) killed after its third batch: the consumer (this
    process) gets the batches it was sent, then SharedPrepError naming the producer's pid;
    the producer's workers exit and nothing is left in /dev/shm."""
    snapshot = Snapshot()
    name, out = group_name(), tmp_path / "producer.pt"
    producer = start_job(name, 2, 2, 1, out, die_after=3)
    wait_until_bound(name, producer)
    loader = make_loader(CountingDataset(), 2, share_with=name, share_jobs=2)
    got = []
    with pytest.raises(SharedPrepError, match=rf"job \(pid {producer.pid}\) that prepares"):
        for x, y in loader:
            got.append((x.clone(), y.clone()))
    producer.join(60)
    assert producer.exitcode == -9
    producer.close()  # its sentinel pipe
    assert_same_batches(got, reference_batches(2, 1)[:len(got)], "consumer")
    assert len(got) >= 2
    del x, y  # the last batch received: it holds its slot's mapping, as it should
    loader.close()
    workers = [int(pid) for pid in open(str(out) + ".children").read().split()]
    assert workers, "the producer had no workers"
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}")]
    snapshot.assert_clean(what="a killed producer")


def test_a_job_configured_differently_is_refused(tmp_path):
    """A job with another batch size is refused, naming what differs; the group then runs
    with a job configured alike."""
    snapshot = Snapshot()
    name = group_name()
    producer = start_job(name, 2, 2, 1, tmp_path / "producer.pt")
    wait_until_bound(name, producer)
    refused = PIMDataLoader(CountingDataset(), batch_size=5, shuffle=True, num_workers=2,
                            generator=torch.Generator().manual_seed(7), share_with=name,
                            share_jobs=2)
    with pytest.raises(ValueError, match=r"refused this job: .*batch_size: 5 here, 4 in the"):
        iter(refused)
    batches, _ = run_here(name, 2, 2, 1)
    producer.join(120)
    assert producer.exitcode == 0
    producer.close()  # its sentinel pipe
    assert_same_batches(batches, reference_batches(2, 1), "consumer")
    snapshot.assert_clean(what="a refused job")


def test_errors_reach_consumers_and_an_early_break_skips_to_the_next_epoch():
    """Two jobs as threads of this process (the protocol is the same; no process to start):
    a sample that raises in the producer raises the same type in the consumer, at the same
    batch; a consumer that breaks out of an epoch gets the next epoch whole."""
    name, bad = group_name(), 13
    produced = []

    def producer():
        with make_loader(FailingDataset(bad), 0, share_with=name, share_jobs=2) as loader:
            produced.extend([labels_or_error(iter(loader)), labels_or_error(iter(loader))])

    thread = threading.Thread(target=producer)
    thread.start()
    deadline = time.monotonic() + 60
    while f"@pimloader.share.{name}" not in open("/proc/net/unix").read():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with make_loader(FailingDataset(bad), 0, share_with=name, share_jobs=2) as loader:
        first = labels_or_error(iter(loader), stop_at_error=True)
        second = labels_or_error(iter(loader))
    thread.join(60)
    assert first == produced[0][:first.index("error") + 1]
    assert produced[0].count("error") == produced[1].count("error") == 1
    assert second == produced[1]


def labels_or_error(iterator, stop_at_error=False) -> list:
    """Each batch's labels, or "error" for a batch that raised the broken sample's error."""
    out = []
    while True:
        try:
            out.append(next(iterator)[1].tolist())
        except StopIteration:
            return out
        except ValueError as error:
            assert "sample 13 is broken" in str(error)
            out.append("error")
            if stop_at_error:
                return out
