"""A batch's members over HTTP read in runs (Source.prefetch): PIMDataLoader over TarShards
served by a fault-injecting server gives torch's batches over the local shards, with 0 and
2 workers, through bounded Range requests only, each byte of the shards served at most once
(no worker reads and skips the other's members); the HTTP error matrix on prefetched reads
(404, 500 then success, a reset mid-run, a shard cut after indexing) with its messages, and
no leaked socket or process."""
import os
import time

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import DecodedItems as Decoded, Snapshot, assert_same_batches
from _helpers import seeded_batches as batches
from _http_servers import FaultServer
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, ShardOrderSampler, TarShards
from pimloader import transforms as T
from pimloader.datasets import HttpShardError, ImageFolder, ShardMemberError
from test_shards_http import assert_sockets_back_to, sockets
from test_tar_shards_loader import write_shards

FAST = dict(backoff=0.01, timeout=5.0, cache_dir=None)
STEPS = [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
         v2.ToDtype(torch.float32, scale=True)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """4 shards of 4 photos each: (their folder, their names, the local TarShards)."""
    photos = make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=16, classes=2)
    urls = write_shards(ImageFolder(photos).samples, tmp_path_factory.mktemp("shards"),
                        per_shard=4)
    return os.path.dirname(urls[0]), [os.path.basename(url) for url in urls], TarShards(urls)


def ranges(log, path=None):
    """(start, end or None) of the ranges the GETs in a server's log asked for (of `path`,
    if given), in order: a GET of several ranges gives each."""
    spans = []
    for method, where, asked, _ in log:
        if method == "GET" and (path is None or where == path):
            for one in asked.split("=", 1)[1].split(","):
                first, _, last = one.partition("-")
                spans.append((int(first), int(last) + 1 if last else None))
    return spans


def fetched(dataset, timeout=10.0):
    """Wait until the runs this thread's reader of `dataset` asked for are fetched."""
    runs = dataset.reader().runs
    deadline = time.monotonic() + timeout
    while any(not run.done for run in list(runs.held.age)):
        assert time.monotonic() < deadline, "runs still fetching"
        time.sleep(0.01)


def runs_of(dataset, shard):
    """(start, end) of the whole run of shard `shard`'s image members."""
    bounds = dataset.shard_bounds
    members = [dataset.index.member(i, 0) for i in range(bounds[shard], bounds[shard + 1])]
    return min(m[0] for m in members), max(m[0] + m[1] for m in members)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_reads_bounded_runs_and_equals_torch(shards, workers):
    folder, names, local = shards
    want, _ = batches(lambda g: torch.utils.data.DataLoader(
        Decoded(local, STEPS), sampler=ShardOrderSampler(local, window=4, seed=3),
        batch_size=8, num_workers=workers, generator=g))
    local.close()
    leak_check = Snapshot()
    open_sockets = sockets()
    with FaultServer(folder) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], **FAST)
        del server.log[:]
        got, loader = batches(lambda g: PIMDataLoader(
            remote, sampler=ShardOrderSampler(remote, window=4, seed=3),
            transform=T.Compose([T.Decode(), *STEPS]), batch_size=8, num_workers=workers,
            generator=g, reduced_dct=False))
        assert_same_batches(got, want)
        del got, want   # their tensors' shared memory from the workers
        loader.close()
        remote.close()
        spans = ranges(server.log)
    assert all(end is not None for _, end in spans), spans      # bounded Range requests
    images = int(local.index.sizes[:, 0].sum())
    shard_bytes = sum(os.path.getsize(os.path.join(folder, name)) for name in names)
    served = sum(end - start for start, end in spans)
    assert images <= served <= shard_bytes, (served, images, shard_bytes)   # each byte once
    assert len(spans) < len(local), spans                      # members coalesced into runs
    assert_sockets_back_to(open_sockets)
    leak_check.assert_clean(what="runs over HTTP")


def test_prefetched_reads_make_no_request(shards):
    folder, names, local = shards
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            del server.log[:]
            remote.prefetch(range(len(remote)))
            fetched(remote)
            assert ranges(server.log) == [runs_of(remote, s) for s in range(len(names))]
            del server.log[:]
            assert [remote[i] for i in range(len(remote))] == [local[i] for i in range(16)]
            assert server.log == []
            del server.log[:]          # each member read once: its run is no longer held
            assert remote[5] == local[5] and len(ranges(server.log)) == 1


def test_404_and_500_on_a_run(shards, leak_check):
    folder, names, local = shards
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], attempts=3,
                       **FAST) as remote:
            url, path = f"{server.url}/{names[1]}", f"/{names[1]}"
            server.plan(path, ["404"])
            del server.log[:]
            remote.prefetch(range(8))
            assert [remote[i] for i in range(4)] == [local[i] for i in range(4)]
            for _ in range(2):   # each read of the run raises its error; no new request
                with pytest.raises(HttpShardError, match=rf"GET {url}: HTTP 404 Not Found "
                                                         r"\(not retried\)") as raised:
                    remote[5]
                assert (raised.value.status, raised.value.attempts) == (404, 1)
            assert ranges(server.log, path) == [runs_of(remote, 1)]
            server.plan(path, ["500", "503", "ok"])
            del server.log[:]
            remote.prefetch(range(4, 8))
            assert [remote[i] for i in range(4, 8)] == [local[i] for i in range(4, 8)]
            assert ranges(server.log) == [runs_of(remote, 1)] * 3
            server.plan(path, ["500"] * 3)
            remote.prefetch(range(4, 8))
            with pytest.raises(HttpShardError, match=rf"GET {url}: HTTP 500 Internal Server "
                                                     r"Error \(gave up after 3 attempts\)"):
                remote[4]
    leak_check.assert_clean(what="a 404 and 500s on runs")


def test_reset_mid_run_is_resumed(shards, leak_check):
    folder, names, local = shards
    open_sockets = sockets()
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            server.plan(f"/{names[2]}", ["reset:3000"])
            del server.log[:]
            remote.prefetch(range(8, 12))
            assert [remote[i] for i in range(8, 12)] == [local[i] for i in range(8, 12)]
            start, end = runs_of(remote, 2)
            assert ranges(server.log) == [(start, end), (start + 3000, end)]
    assert_sockets_back_to(open_sockets)
    leak_check.assert_clean(what="a reset mid-run")


def test_a_server_that_ignores_range_is_read_as_a_stream(shards):
    """Each run from such a server would send the shard from byte 0: after the first, the
    shard's reads go back to one stream."""
    folder, names, local = shards
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            server.plan(f"/{names[0]}", ["whole"])
            del server.log[:]
            remote.prefetch(range(8))    # shard 0's run answered whole, shard 1's as asked
            assert [remote[i] for i in range(8)] == [local[i] for i in range(8)]
            assert ranges(server.log) == [runs_of(remote, 0), runs_of(remote, 1)]
            del server.log[:]
            remote.prefetch(range(8))
            fetched(remote)
            assert ranges(server.log) == [runs_of(remote, 1)]
            del server.log[:]
            assert [remote[i] for i in range(4)] == [local[i] for i in range(4)]
            first, second = (remote.index.member(i, 0) for i in range(2))
            assert ranges(server.log) == [(first[0], first[0] + first[1]), (second[0], None)]


def test_prefetch_leaves_bad_indices_to_the_reads(shards):
    folder, names, local = shards
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            for bad in ([99], ["a"], [None]):
                remote.prefetch(bad)
            with pytest.raises(IndexError):
                remote[99]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_cut_after_indexing_follows_on_error(shards, tmp_path, workers, leak_check):
    folder, names, local = shards
    copy = tmp_path / "served"
    copy.mkdir()
    for name in names:
        (copy / name).write_bytes(open(os.path.join(folder, name), "rb").read())
    transform = T.Compose([T.Decode(), v2.Resize(40), v2.CenterCrop(32)])
    with FaultServer(copy) as server:
        remote = TarShards([f"{server.url}/{name}" for name in names], **FAST)
        last = len(remote) - 1
        os.truncate(copy / names[-1], remote.index.member(last, 0)[0] + 10)
        del server.log[:]
        loader = PIMDataLoader(remote, transform=transform, batch_size=8, num_workers=workers,
                               on_error="skip")
        assert sum(len(labels) for _, labels in loader) == len(remote) - 1
        assert loader.stats()[-1].skipped_samples == 1
        loader.close()
        loader = PIMDataLoader(remote, transform=transform, batch_size=8, num_workers=workers)
        with pytest.raises(ShardMemberError, match=rf"{server.url}/{names[-1]}#"
                                                   rf"{remote.index.key(last)}: truncated tar"):
            list(loader)
        loader.close()
        assert all(end is not None for _, end in ranges(server.log))
        remote.close()
    leak_check.assert_clean(what="a shard cut after indexing")
