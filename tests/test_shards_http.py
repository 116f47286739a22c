"""TarShards over HTTP: the same items as the local shards through nginx (Debian's, from a
generated config, with limit_rate) and Python's http.server; reads that stream (a few GETs
per shard); the member-list cache and sidecars; and the error matrix through a
fault-injecting server: 404, 500 then success, a reset mid-shard, a server slower than the
timeout, a truncated tar, each with its message and no leaked process, socket or shared
memory."""
import os
import shutil
import time

import pytest
import torch
from torch.utils.data import DataLoader

from _http_servers import NGINX, FaultServer, static_server
from _shard_data import make_folder, write_wds_shards
from pimloader import ShardOrderSampler, TarShards
from pimloader.datasets import HttpShardError, ShardMemberError, write_sidecar
from pimloader.datasets.tar_scan import TruncatedTarError

FAST = dict(backoff=0.01, timeout=5.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A served root holding 4 ShardWriter shards of 24 images, and their local items."""
    root = tmp_path_factory.mktemp("served")
    folder = make_folder(tmp_path_factory.mktemp("images"), n=24)
    urls = write_wds_shards(folder, root, per_shard=7)
    local = TarShards(urls)
    return root, [os.path.basename(url) for url in urls], [local[i] for i in range(len(local))]


def sockets():
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def assert_sockets_back_to(count, timeout=10.0):
    """This process's sockets are `count` again, within `timeout` s: the fault server's
    handler threads (in this process) close their side of a connection a moment after
    the server itself has shut down. A socket left open fails after the timeout."""
    deadline = time.monotonic() + timeout
    while sockets() != count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sockets() == count, f"sockets left: {sockets()} != {count}"


def shard_urls(base, names):
    return [f"{base}/{name}" for name in names]


def collate(batch):
    return batch


@pytest.mark.parametrize("kind", ["nginx", "python"])
def test_items_over_http_equal_local(served, tmp_path, kind, leak_check):
    if kind == "nginx" and NGINX is None:
        pytest.skip("nginx is not installed (scripts/system-deps.sh installs it)")
    root, names, want = served
    open_sockets = sockets()
    with static_server(root, tmp_path / "server", limit_rate="50m", prefer=kind) as server:
        assert server.kind == ("nginx" if kind == "nginx" else "http.server")
        with TarShards(shard_urls(server.url, names), cache_dir=None, **FAST) as dataset:
            assert [dataset[i] for i in range(len(dataset))] == want
            sampler = ShardOrderSampler(dataset, window=2, seed=1)
            loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                                collate_fn=collate)
            got = [item for batch in loader for item in batch]
            assert got == [want[i] for i in sampler]
    assert_sockets_back_to(open_sockets)
    leak_check.assert_clean(what=f"TarShards over {kind}")


def test_nginx_takes_a_relative_folder_for_its_files(served, tmp_path, monkeypatch):
    """The benchmarks pass `--data` as given: a relative folder for nginx's config and logs
    works from any working directory (nginx would read it from its prefix)."""
    if NGINX is None:
        pytest.skip("nginx is not installed (scripts/system-deps.sh installs it)")
    root, names, want = served
    monkeypatch.chdir(tmp_path)
    with static_server(root, "relative/server") as server:
        with TarShards(shard_urls(server.url, names), cache_dir=None, **FAST) as dataset:
            assert [dataset[i] for i in range(len(dataset))] == want


def test_reads_stream_and_member_lists_are_cached(served, tmp_path):
    root, names, want = served
    with FaultServer(root) as server:
        urls = shard_urls(server.url, names)
        with TarShards(urls, cache_dir=tmp_path / "cache", **FAST) as dataset:
            scans = [entry for entry in server.log if entry[0] == "GET"]
            assert len(scans) == 2 * len(names)   # a sidecar looked for, one pass each
            assert len(server.clients) == 1       # over one kept-alive connection
            del server.log[:]
            assert [dataset[i] for i in range(len(dataset))] == want
            gets = [entry for entry in server.log if entry[0] == "GET"]
            # per shard: one bounded read of its first sample, then one streaming GET
            assert len(gets) == 2 * len(names), gets
        del server.log[:]
        again = TarShards(urls, cache_dir=tmp_path / "cache", **FAST)
        assert [entry[0] for entry in server.log] == ["HEAD"] * len(names)
        assert again[3] == want[3]
        again.close()
        os.utime(root / names[0], ns=(1, 1))   # a new ETag: that shard is scanned again
        del server.log[:]
        TarShards(urls, cache_dir=tmp_path / "cache", **FAST).close()
        assert [entry[1] for entry in server.log if entry[0] == "GET"] == [
            f"/{names[0]}.idx", f"/{names[0]}"]


def test_sidecars_replace_the_scan(served, tmp_path):
    root, names, want = served
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    for name in names:
        write_sidecar(copy / name)
    with FaultServer(copy) as server:
        with TarShards(shard_urls(server.url, names), cache_dir=None, **FAST) as dataset:
            gets = [entry[1] for entry in server.log if entry[0] == "GET"]
            assert gets == [f"/{name}.idx" for name in names]
            assert [dataset[i] for i in range(len(dataset))] == want


def test_404_is_immediate(served, leak_check):
    root, names, _ = served
    with FaultServer(root) as server:
        url = f"{server.url}/missing-0000.tar"
        with pytest.raises(HttpShardError, match=rf"HEAD {url}: HTTP 404 Not Found \(not "
                                                 r"retried\)") as raised:
            TarShards(url, cache_dir=None, **FAST)
        assert (raised.value.status, raised.value.attempts, len(server.log)) == (404, 1, 1)
    leak_check.assert_clean(what="a 404")


def test_500_then_success_and_500_past_the_attempts(served, leak_check):
    root, names, want = served
    with FaultServer(root) as server:
        url = f"{server.url}/{names[0]}"
        server.plan(f"/{names[0]}", ["500", "503", "ok"])
        with TarShards(url, cache_dir=None, attempts=3, **FAST) as dataset:
            assert [dataset[i] for i in range(len(dataset))] == want[:7]
        server.plan(f"/{names[0]}", ["500"] * 3)
        with pytest.raises(HttpShardError, match=rf"HEAD {url}: HTTP 500 Internal Server "
                                                 r"Error \(gave up after 3 attempts\)"):
            TarShards(url, cache_dir=None, attempts=3, **FAST)
    leak_check.assert_clean(what="5xx answers")


def test_reset_mid_shard_is_resumed(served, leak_check):
    root, names, want = served
    open_sockets = sockets()
    with FaultServer(root) as server:
        url = f"{server.url}/{names[1]}"
        server.plan(f"/{names[1]}", ["ok", "reset:3000"])   # HEAD, then the scan's GET
        with TarShards(url, cache_dir=None, **FAST) as dataset:
            resumed = [entry[2] for entry in server.log if entry[0] == "GET"][-1]
            assert resumed == "bytes=3000-"    # the scan went on from where it was cut
            server.plan(f"/{names[1]}", ["ok", "reset:700"])   # the stream of the reads
            assert [dataset[i] for i in range(len(dataset))] == want[7:14]
        server.plan(f"/{names[1]}", ["reset:100"] * 9)
        # a reset reads as ECONNRESET or as an early end of the body, as the timing goes
        with pytest.raises(HttpShardError, match=rf"GET {url}: (connection reset by the "
                                                 r"server|the body stopped at byte 200 of "
                                                 r"51200) \(gave up after 2 attempts\)"):
            TarShards(url, cache_dir=None, attempts=2, **FAST)
    assert_sockets_back_to(open_sockets)
    leak_check.assert_clean(what="connection resets")


def test_slow_server_past_the_timeout(served, leak_check):
    root, names, _ = served
    with FaultServer(root) as server:
        url = f"{server.url}/{names[0]}"
        server.plan(f"/{names[0]}", ["slow:3", "slow:3"])
        with pytest.raises(HttpShardError, match=rf"HEAD {url}: timed out \(no answer within "
                                                 r"0.3 s\) \(gave up after 2 attempts\)"):
            TarShards(url, cache_dir=None, attempts=2, backoff=0.01, timeout=0.3)
    leak_check.assert_clean(what="a slow server")


def test_truncated_tar_over_http(served, tmp_path, leak_check):
    root, names, want = served
    cut_root = tmp_path / "cut"
    cut_root.mkdir()
    data = (root / names[2]).read_bytes()
    (cut_root / "cut.tar").write_bytes(data[:5000])
    (cut_root / "whole.tar").write_bytes(data)
    with static_server(cut_root, tmp_path / "server") as server:
        url = f"{server.url}/cut.tar"
        with pytest.raises(TruncatedTarError, match=rf"{url}: truncated tar: member '.*' needs "
                                                    r"bytes \d+\.\.\d+ but the shard ends at "
                                                    r"byte 5000"):
            TarShards(url, cache_dir=None, **FAST)
        missing = f"{server.url}/missing.tar"   # a 404 from the real server too
        with pytest.raises(HttpShardError, match=rf"HEAD {missing}: HTTP 404 Not Found"):
            TarShards(missing, cache_dir=None, **FAST)
        whole = f"{server.url}/whole.tar"
        with TarShards(whole, cache_dir=None, **FAST) as dataset:
            last = len(dataset) - 1    # cut inside the last image, after the index was built
            os.truncate(cut_root / "whole.tar", dataset.index.member(last, 0)[0] + 10)
            assert dataset[0] == want[14]
            with pytest.raises(ShardMemberError, match=rf"{whole}#class\d/img\d+: truncated "
                                                       r"tar"):
                dataset[last]
    leak_check.assert_clean(what="a truncated tar")


def test_threads_read_over_their_own_connections(served):
    from concurrent.futures import ThreadPoolExecutor
    root, names, want = served
    open_sockets = sockets()
    with FaultServer(root) as server:
        with TarShards(shard_urls(server.url, names), cache_dir=None, **FAST) as dataset:
            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(dataset.__getitem__, range(len(dataset))))
            assert got == want
    assert_sockets_back_to(open_sockets)


def test_forked_workers_leave_the_parents_streams_alone(served):
    """A worker inherits the parent's open streams: it closes its copies, never reads them."""
    root, names, want = served
    with FaultServer(root) as server:
        with TarShards(shard_urls(server.url, names), cache_dir=None, **FAST) as dataset:
            assert [dataset[i] for i in range(4)] == want[:4]   # a stream open in shard 0
            loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate,
                                multiprocessing_context="fork")
            assert [item for batch in loader for item in batch] == want
            del server.log[:]
            assert [dataset[i] for i in range(4, 7)] == want[4:7]
            assert server.log == []   # read on from the parent's stream, nothing reopened


def test_head_refused_and_a_kept_connection_closed_by_the_server(served):
    root, names, want = served
    with FaultServer(root) as server:
        url = f"{server.url}/{names[0]}"
        server.plan(f"/{names[0]}", ["405"])    # a URL signed for GET only: byte 0 asked
        with TarShards(url, cache_dir=None, attempts=1, **FAST) as dataset:
            assert [entry[:3] for entry in server.log[:2]] == [
                ("HEAD", f"/{names[0]}", None), ("GET", f"/{names[0]}", "bytes=0-0")]
            server.plan(f"/{names[0]}", ["close"])
            assert dataset[0] == want[0]
            # the kept connection is closed: a new one, though one attempt is all it has
            assert dataset[5] == want[5]
