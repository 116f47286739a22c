"""Several ranges of a shard in one GET (datasets/http_ranges.py): parts delivered as they
come, in the order asked, against the fault server and against nginx (python's
http.server ignores Range: nothing delivered, told so); an answer that breaks off, a 5xx, a
server that sends the whole body leave the rest to single reads; through the fetch thread,
a GET of a shard's runs that breaks off still gives every read its bytes."""
import os

import pytest

from _http_servers import NGINX, FaultServer, static_server
from pimloader import TarShards
from pimloader.datasets import shard_runs
from pimloader.datasets.http import HttpClient, RetryPolicy
from pimloader.datasets.http_ranges import read_ranges
from test_shards_http import sockets
from test_shards_http_ahead import wait_for
from test_shards_http_runs import FAST, shards  # noqa: F401

POLICY = RetryPolicy(attempts=2, backoff=0.01, timeout=5.0)
SPANS = [(5000, 5100), (10, 20), (70000, 90000), (20, 30)]   # any order; adjacent ones too


def shard_file(shards):
    folder, names, _ = shards
    path = os.path.join(folder, names[0])
    with open(path, "rb") as file:
        return f"/{names[0]}", file.read()


def asked(client, url, spans=SPANS):
    got = []
    left, parted = read_ranges(client, url, spans, lambda i, data: got.append((i, data)))
    return got, left, parted


def test_parts_come_in_the_order_asked_and_the_connection_is_kept(shards):
    folder, _, _ = shards
    path, data = shard_file(shards)
    with FaultServer(folder) as server:
        client = HttpClient(POLICY)
        got, left, parted = asked(client, server.url + path)
        assert (left, parted) == ([], True)
        assert got == [(i, data[start:end]) for i, (start, end) in enumerate(SPANS)]
        again, _, _ = asked(client, server.url + path, SPANS[:2])
        assert len(again) == 2 and len(server.clients) == 1   # the same connection
        client.close()
    [(_, _, header, _), _] = server.log
    assert header == "bytes=5000-5099,10-19,70000-89999,20-29"


@pytest.mark.parametrize("action, delivered, parted", [
    ("reset:200", 1, True),      # the first part, then the connection reset
    ("500", 0, True),            # no answer in parts: read them one by one (with retries)
    ("416", 0, False),           # several ranges refused (a store that takes one)
    ("404", 0, False),
    ("whole", 0, False),         # a server that ignores Range: not read, told so
])
def test_what_is_not_delivered_is_left_to_single_reads(shards, action, delivered, parted):
    folder, _, _ = shards
    path, data = shard_file(shards)
    before = sockets()
    with FaultServer(folder) as server:
        server.plan(path, [action])
        client = HttpClient(POLICY)
        got, left, told = asked(client, server.url + path)
        client.close()
    assert got == [(i, data[start:end]) for i, (start, end) in enumerate(SPANS[:delivered])]
    assert left == list(range(delivered, len(SPANS))) and told == parted
    wait_for(lambda: sockets() == before, f"sockets left: {sockets()} != {before}")


@pytest.mark.parametrize("kind", ["nginx", "python"])
def test_a_real_server(shards, tmp_path, kind):
    """nginx answers in parts; python's http.server ignores Range (the whole body, 200)."""
    if kind == "nginx" and NGINX is None:
        pytest.skip("nginx is not installed (scripts/system-deps.sh installs it)")
    folder, _, _ = shards
    path, data = shard_file(shards)
    with static_server(folder, tmp_path / "server", prefer=kind) as server:
        client = HttpClient(POLICY)
        got, left, parted = asked(client, server.url + path)
        client.close()
    if kind == "nginx":
        assert (left, parted) == ([], True)
        assert got == [(i, data[start:end]) for i, (start, end) in enumerate(SPANS)]
    else:
        assert (got, left, parted) == ([], [0, 1, 2, 3], False)


def test_a_shards_runs_in_one_get_that_breaks_off_still_read_right(shards, monkeypatch):
    """Through the fetch thread: the GET of shard 0's four runs is reset in its second
    part; the runs it did not bring are fetched one by one, and every read is right."""
    folder, names, local = shards
    monkeypatch.setattr(shard_runs, "RUN_GAP", 0)        # a run per member
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            first = remote.index.member(3, 0)                # asked for first
            server.plan(f"/{names[0]}", [f"reset:{first[1] + 300}"])
            del server.log[:]
            remote.prefetch([3, 0, 2, 1])
            assert [remote[i] for i in (3, 0, 2, 1)] == [local[i] for i in (3, 0, 2, 1)]
            gets = [header.count(",") + 1 for _, _, header, _ in server.log]
            assert gets == [4, 1, 1, 1], server.log   # the 4 parts, then the 3 not brought
            assert remote.reader().runs.held.bytes == 0


def test_a_server_that_refuses_several_ranges_is_asked_one_at_a_time(shards, monkeypatch):
    """A 416 to the GET of several ranges (a store that takes one range a request): those
    runs are fetched one by one, and the shard's later runs are asked for one at a time."""
    folder, names, local = shards
    monkeypatch.setattr(shard_runs, "RUN_GAP", 0)
    with FaultServer(folder) as server:
        with TarShards([f"{server.url}/{name}" for name in names], **FAST) as remote:
            server.plan(f"/{names[0]}", ["416"])
            del server.log[:]
            remote.prefetch([3, 0])
            assert [remote[i] for i in (3, 0)] == [local[i] for i in (3, 0)]
            remote.prefetch([2, 1])
            assert [remote[i] for i in (2, 1)] == [local[i] for i in (2, 1)]
            gets = [header.count(",") + 1 for _, _, header, _ in server.log]
            assert gets == [2, 1, 1, 1, 1], server.log
