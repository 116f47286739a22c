"""The partitioned cluster cache (cache_scope="cluster"): 2 "nodes" x 2 ranks x 2 workers,
gloo over loopback, ranks spawned by torch.multiprocessing.

Oracles: the same loader without a cache (checked against torchvision elsewhere), the
files' own count (each sample is read from storage once in the first epoch, and after it
only the samples no node's cache holds, each once per epoch), the operating system
(processes alive, /dev/shm)."""
from __future__ import annotations

import glob
import os
import signal
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

import _cluster_ranks as ranks
from benchmarks.make_dataset import make_imagenet_like
from pimloader import ClusterCacheError, ClusterScope, PIMDataLoader
from pimloader.datasets import ImageFolder
from pimloader.datasets.cluster_cache import owner_of
from pimloader.datasets.cluster_exchange import EpochExchange
from pimloader.datasets.cluster_staging import Staging

WORLD = ranks.NODES * ranks.LOCAL
EPOCHS = 3
needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="no gloo")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=24, classes=3)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _segments():
    return set(glob.glob("/dev/shm/pimloader-cluster-*"))


def _run(main, *args, timeout_s=150):
    """Start WORLD ranks; wait for all of them (no rank's end kills the others, as
    tmp.spawn's join would). Their exit codes."""
    context = tmp.start_processes(main, args=args, nprocs=WORLD, join=False,
                                  start_method="spawn")
    deadline = time.monotonic() + timeout_s
    for process in context.processes:
        process.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in context.processes if p.is_alive()]
    for process in alive:
        process.kill()
        process.join()
    assert not alive, f"{len(alive)} ranks hung"
    return [p.exitcode for p in context.processes]


def _sizes(root):
    return [os.path.getsize(path) for path, _ in ImageFolder(root).samples]


def _assert_same(got, want, what):
    assert len(got) == len(want), what
    for step, ((gx, gy), (wx, wy)) in enumerate(zip(got, want)):
        assert torch.equal(gx, wx) and torch.equal(gy, wy), f"{what}, batch {step}"


@pytest.fixture(scope="module")
def cluster_run(photos, tmp_path_factory):
    """One job: 3 epochs at two budgets (each node's part fits; about half of it), with 2
    workers, with none and with persistent workers, and with the node caches keeping
    seekable copies, each followed by the same loader without a cache; then a resume. Per
    rank, its results."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo")
    out = tmp_path_factory.mktemp("ranks")
    sizes = _sizes(photos)
    keys = [os.fsencode(path) for path, _ in ImageFolder(photos).samples]
    part = [sum(s for s, k in zip(sizes, keys) if owner_of(k, ranks.NODES) == node)
            for node in range(ranks.NODES)]
    whole, small = max(part) + 64, min(part) // 2
    variants = {"whole": (whole, {}), "small": (small, {}),
                "whole, main process": (whole, dict(num_workers=0)),
                "small, persistent": (small, dict(persistent_workers=True)),
                # seekable copies, served to the other nodes as the node cache holds them
                "whole, seekable copies": (2 * whole, dict(cache_seekable=True))}
    before = _segments()
    codes = _run(ranks.equal_batches_main, _free_port(), str(out), str(photos), variants,
                 EPOCHS)
    assert codes == [0] * WORLD
    assert _segments() == before   # nothing left in /dev/shm
    results = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    return variants, sizes, keys, results


@pytest.mark.timeout(300)
def test_partitioned_cache_reads_storage_once_and_keeps_batches(cluster_run):
    variants, sizes, keys, results = cluster_run
    for name in variants:
        for rank, result in enumerate(results):
            for epoch in range(EPOCHS):
                _assert_same(result[name]["got"][epoch], result[name]["want"][epoch],
                             f"{name}, rank {rank}, epoch {epoch}")
        # one cache per node: its local ranks see the same samples, all of its own part
        held = {}
        for rank, result in enumerate(results):
            node = rank // ranks.LOCAL
            held.setdefault(node, result[name]["held"])
            assert result[name]["held"] == held[node]
            owners = result[name]["owners"]
            assert all(owners[i] == node for i in held[node])
            assert owners == [owner_of(k, ranks.NODES) for k in keys]
        uncached = len(sizes) - sum(len(h) for h in held.values())
        storage = [sum(r[name]["counts"][e]["storage"] for r in results)
                   for e in range(EPOCHS)]
        assert storage[0] == len(sizes), storage       # each sample read once
        assert storage[1:] == [uncached] * (EPOCHS - 1), (storage, uncached)
        if name.startswith("whole"):
            assert uncached == 0
        else:
            assert 0 < uncached < len(sizes)
        received = [sum(r[name]["counts"][e]["received"] for r in results)
                    for e in range(EPOCHS)]
        served = [sum(r[name]["counts"][e]["served"] for r in results) for e in range(EPOCHS)]
        assert received == served and all(0 < n < len(sizes) for n in received)


def test_closed_loaders_leave_no_sockets(cluster_run):
    _, _, _, results = cluster_run
    for rank, result in enumerate(results):
        counts = result["sockets"]
        assert counts == [counts[0]] * len(counts), f"rank {rank}: sockets {counts}"


@pytest.mark.timeout(300)
def test_resume_keeps_the_partition_and_the_batches(cluster_run):
    _, _, _, results = cluster_run
    for rank, result in enumerate(results):
        resume = result["resume"]
        assert resume["owners"] == resume["resumed_owners"]
        assert resume["rest"], "nothing was left to resume"
        for step, (got, want) in enumerate(zip(resume["rest"], resume["rest_first"])):
            assert all(torch.equal(g, w) for g, w in zip(got, want)), f"rank {rank}, {step}"
        assert len(resume["rest"]) == len(resume["rest_first"])


@pytest.mark.timeout(300)
@needs_gloo
def test_a_killed_rank_is_named_by_every_other_rank(photos, tmp_path):
    victim = 3
    before = _segments()
    codes = _run(ranks.killed_rank_main, _free_port(), str(tmp_path), str(photos), victim)
    assert codes[victim] == -signal.SIGKILL
    for rank in set(range(WORLD)) - {victim}:
        assert codes[rank] == 0, f"rank {rank} exited with {codes[rank]}"
        outcome = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert outcome["error"] is not None, f"rank {rank} saw no error"
        assert f"rank {victim} (node 1)" in outcome["error"], outcome["error"]
        assert outcome["after_s"] < ranks.TIMEOUT_S, outcome
    time.sleep(2.0)  # the victim's workers notice their parent's death
    for rank in range(WORLD):
        for pid in open(tmp_path / f"workers{rank}").read().split():
            assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"worker {pid} left"
    assert _segments() == before


def _zombie(pid) -> bool:
    with open(f"/proc/{pid}/stat") as file:
        return file.read().split(")")[-1].split()[0] == "Z"


def test_scope_from_torchrun_environment():
    env = dict(WORLD_SIZE="8", LOCAL_WORLD_SIZE="4", LOCAL_RANK="1", GROUP_RANK="1")
    assert ClusterScope.from_env(env) == ClusterScope(nodes=2, node=1, local_rank=1,
                                                      local_ranks=4)
    with pytest.raises(ValueError, match="torchrun"):
        ClusterScope.from_env({})


def test_cluster_scope_needs_a_budget_and_in_order(photos):
    scope = ClusterScope(nodes=2, node=0, local_rank=0, local_ranks=1)
    with pytest.raises(ValueError, match="cache_bytes"):
        PIMDataLoader(ImageFolder(photos), cache_scope=scope)
    with pytest.raises(ValueError, match="in_order"):
        PIMDataLoader(ImageFolder(photos), cache_bytes=1 << 20, cache_scope=scope,
                      num_workers=1, in_order=False)
    with pytest.raises(ValueError, match="cache_scope"):
        PIMDataLoader(ImageFolder(photos), cache_bytes=1 << 20, cache_scope="node")


# -- the staging ring, in one process ------------------------------------------------------

class _Link:
    timeout_s = 0.2


class _Cache:
    def __init__(self, capacity):
        self.staging = Staging(8, capacity)
        self.staging.open()
        self.scope = ClusterScope(nodes=2, node=0, local_rank=0, local_ranks=1)


def test_staging_hands_over_bytes_and_failures():
    staging = _Cache(64).staging
    staging.beat()
    staging.place(3, 10, b"abcdef")
    assert staging.take(3, "sample 3", 1.0) == b"abcdef"
    staging.unserved(4)
    assert staging.take(4, "sample 4", 1.0) is None       # the reader reads it itself
    with pytest.raises(ClusterCacheError, match="silent"):  # no heartbeat: no endless wait
        staging.take(5, "sample 5", 0.05)
    staging.beat()
    staging.fail("rank 3 (node 1) gone")
    with pytest.raises(ClusterCacheError, match=r"sample 5: rank 3 \(node 1\) gone"):
        staging.take(5, "sample 5", 1.0)
    staging.forget(3)
    with pytest.raises(ClusterCacheError):
        staging.take(3, "sample 3", 1.0)                 # forgotten: not there any more


def test_staging_region_is_reused_only_after_its_batches_are_delivered():
    cache = _Cache(100)
    exchange = EpochExchange(cache, _Link(), lambda: None, 1)
    exchange.last_use = {1: 0, 2: 1}        # staged for batches 0 and 1
    first = exchange._region(60)
    first.indices += [1, 2]
    for index in (1, 2):
        cache.staging.place(index, first.start, b"x")
    with pytest.raises(ClusterCacheError, match="stayed full"):
        exchange._region(60)                # batch 1 still reads the first region
    exchange.delivered()
    with pytest.raises(ClusterCacheError, match="stayed full"):
        exchange._region(60)
    exchange.delivered()                    # batches 0 and 1 delivered: reused
    assert exchange._region(60).start == 0
    assert exchange.last_use == {}
    cache.staging.beat()
    with pytest.raises(ClusterCacheError, match="silent"):
        cache.staging.take(1, "sample 1", 0.05)         # its entry was freed with it
