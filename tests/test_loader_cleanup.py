"""No worker process, shared-memory segment or file descriptor outlives its use.

Every scenario runs with fork and 2 workers.  Torch's DataLoader runs the same scenarios as
a control (it shows the leak check itself is sound); PIMDataLoader must pass them too."""
import gc
import os
import subprocess
import sys
import textwrap
import time

import pytest

from _helpers import (
    FailDS,
    PIMDataLoader,
    Snapshot,
    TensorDS,
    TorchDataLoader,
    assert_same,
    child_pids,
)

pytestmark = pytest.mark.timeout(60)

LOADERS = [pytest.param(TorchDataLoader, id="torch"), pytest.param(PIMDataLoader, id="pim")]


def _make(cls, ds=None, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_workers", 2)
    kw.setdefault("multiprocessing_context", "fork")
    return cls(ds if ds is not None else TensorDS(24, "tuple"), **kw)


@pytest.mark.parametrize("cls", LOADERS)
def test_normal_end(cls):
    snap = Snapshot()
    loader = _make(cls)
    batches = list(loader)
    assert len(batches) == 6
    del batches, loader
    snap.assert_clean(what="a normal end")


@pytest.mark.parametrize("cls", LOADERS)
def test_workers_gone_at_epoch_end_while_loader_alive(cls):
    # non-persistent workers are shut down when the epoch ends, even if the loader lives on
    loader = _make(cls)
    snap = Snapshot()
    for b in loader:
        pass
    del b
    # the loader may keep its slot memory for the next epoch: only processes are checked here
    snap.assert_clean(what="an epoch end (loader still alive)", procs_only=True)
    del loader
    snap.assert_clean(what="an epoch end, then deleting the loader")


@pytest.mark.parametrize("cls", LOADERS)
def test_break(cls):
    snap = Snapshot()
    loader = _make(cls)
    for i, b in enumerate(loader):
        if i == 1:
            break
    del b, loader
    snap.assert_clean(what="a break")


@pytest.mark.parametrize("cls", [pytest.param(PIMDataLoader, id="pim")])
def test_dataset_exception(cls):
    # the realistic user pattern: the exception is caught and dropped, then gc runs.  The
    # re-raise leaves a frame<->exception cycle, so the iterator dies in gc, after its queues
    # were finalised: torch then waits ~5 s per worker on join (10 s here), which is why
    # torch is not run as the control in this scenario.
    snap = Snapshot()
    loader = _make(cls, FailDS(24, fail_at=9, exc="value"))
    try:
        for b in loader:
            del b
    except ValueError:
        pass
    else:
        pytest.fail("no error raised")
    del loader
    snap.assert_clean(wait=15, what="a dataset exception")


@pytest.mark.parametrize("cls", LOADERS)
def test_exception_in_loop_body(cls):
    snap = Snapshot()
    loader = _make(cls)
    with pytest.raises(ZeroDivisionError) as excinfo:
        for i, b in enumerate(loader):
            if i == 2:
                1 / 0
    del loader, b, excinfo
    snap.assert_clean(wait=15, what="an exception in the loop body")


@pytest.mark.parametrize("cls", LOADERS)
def test_keyboard_interrupt_in_loop_body(cls):
    snap = Snapshot()
    loader = _make(cls)
    with pytest.raises(KeyboardInterrupt) as excinfo:
        for i, b in enumerate(loader):
            if i == 1:
                raise KeyboardInterrupt
    del loader, b, excinfo
    snap.assert_clean(wait=15, what="a KeyboardInterrupt")


@pytest.mark.parametrize("cls", LOADERS)
def test_garbage_collection_mid_epoch(cls):
    snap = Snapshot()
    loader = _make(cls)
    it = iter(loader)
    next(it)
    next(it)
    del loader, it
    gc.collect()
    snap.assert_clean(what="gc of the loader and its iterator mid-epoch")


@pytest.mark.parametrize("cls", LOADERS)
def test_persistent_workers_two_epochs_then_del(cls):
    snap = Snapshot()
    loader = _make(cls, persistent_workers=True)
    for _ in range(2):
        assert len(list(loader)) == 6
    assert child_pids() - snap.kids, "persistent workers should be alive between epochs"
    del loader
    snap.assert_clean(what="deleting a loader with persistent workers")


@pytest.mark.parametrize("cls", LOADERS)
def test_persistent_workers_break_then_del(cls):
    snap = Snapshot()
    loader = _make(cls, persistent_workers=True)
    for i, b in enumerate(loader):
        if i == 1:
            break
    del b
    assert len(list(loader)) == 6  # a full epoch after the break
    del loader
    snap.assert_clean(what="persistent workers after a break")


def test_close_shuts_persistent_workers():
    snap = Snapshot()
    loader = _make(PIMDataLoader, persistent_workers=True)
    assert len(list(loader)) == 6
    loader.close()
    # the loader object is still alive: close() alone must stop the workers
    snap.assert_clean(what="close()", procs_only=True)
    loader.close()  # idempotent
    del loader
    snap.assert_clean(what="close(), then deleting the loader")


def test_context_manager():
    snap = Snapshot()
    with _make(PIMDataLoader, persistent_workers=True) as loader:
        assert len(list(loader)) == 6
        assert len(list(loader)) == 6
    snap.assert_clean(what="leaving the with block", procs_only=True)
    del loader
    snap.assert_clean(what="leaving the with block, then deleting the loader")


def test_context_manager_non_persistent_mid_epoch():
    # close() is documented to end persistent workers; a live non-persistent iterator keeps
    # its workers (as in torch) until it is dropped
    snap = Snapshot()
    with _make(PIMDataLoader) as loader:
        it = iter(loader)
        b = next(it)
    assert_same(b, next(iter(TorchDataLoader(TensorDS(24, "tuple"), batch_size=4))))
    del it, b
    snap.assert_clean(what="leaving the with block mid-epoch and dropping the iterator",
                      procs_only=True)
    del loader
    snap.assert_clean(what="leaving the with block mid-epoch, then deleting all")


def test_many_epochs_do_not_accumulate():
    # a leak per epoch (slots, fds, queues) shows up as growth over epochs
    loader = _make(PIMDataLoader, persistent_workers=True)
    list(loader)
    snap = Snapshot()
    for _ in range(5):
        for _b in loader:
            pass
    del _b
    snap.assert_clean(wait=2, what="5 more epochs with persistent workers")
    del loader


@pytest.mark.timeout(90)
def test_batches_outlive_loader_in_subprocess():
    """Batches kept after the loader (and its workers) are gone stay valid and unchanged; once
    dropped, nothing is left.  Run in a child interpreter: a use-after-unmap would crash it
    (SIGSEGV) rather than the test session."""
    code = textwrap.dedent(
        """
        import gc, os, sys
        sys.path.insert(0, %r)
        from _helpers import PIMDataLoader, TorchDataLoader, TensorDS, Snapshot, assert_same_batches
        ds = TensorDS(24, "dict")
        snap = Snapshot()
        for nw in (0, 2):
            want = list(TorchDataLoader(ds, batch_size=4, num_workers=nw))
            loader = PIMDataLoader(ds, batch_size=4, num_workers=nw, persistent_workers=nw > 0)
            got = list(loader)
            del loader
            gc.collect()
            # scribble over freshly allocated memory, then read the kept batches
            junk = [bytearray(os.urandom(1 << 16)) for _ in range(64)]
            assert_same_batches(got, want)
            del got, want, junk
        snap.assert_clean(what="dropping batches that outlived their loader")
        print("OK")
        """
        % os.path.dirname(os.path.abspath(__file__))
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=80, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, (
        f"rc={r.returncode}\nstdout:{r.stdout[-2000:]}\nstderr:{r.stderr[-3000:]}")


def test_fresh_workers_retire_once_they_owe_nothing():
    """With the sampler exhausted, a fresh worker whose batches have all been received is
    told to exit, so its exit overlaps the last batches: worker 0 (batches 0, 2, 4) has
    exited by itself, exit code 0, while the user still holds the last batch (5) and
    before the iterator has shut anything down."""
    snap = Snapshot()
    loader = _make(PIMDataLoader, batch_size=4)
    it = iter(loader)
    batches = []
    for _ in range(6):
        batches.append(next(it))
        time.sleep(0.05)  # a consumer slower than the workers
    first = it._workers[0]
    first.join(timeout=50)  # a watchdog (the module allows 60 s), not a deadline
    assert first.exitcode == 0
    assert not it._shutdown
    with pytest.raises(StopIteration):
        next(it)
    assert_same(batches, list(_make(TorchDataLoader, batch_size=4)))
    del it, loader, batches, first
    snap.assert_clean(what="retired workers")
