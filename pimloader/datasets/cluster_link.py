"""A rank's link to the other ranks of a cluster cache, on torch.distributed.

One process group of its own (gloo over TCP, `new_group`, so that the exchange never
interleaves with the training's collectives), with the scope's timeout: a collective that
a peer does not join in time raises instead of hanging. Its operations:

    link = ClusterLink(scope)          # collective: every rank, the same order of loaders
    link.all_gather(obj)               # [obj of rank 0, obj of rank 1, ...]
    link.exchange(send, send_sizes, recv_sizes)   # all_to_all_single of byte tensors
    link.node_segments(budget, size)   # this node's cache segments (SampleCache's parts)
    link.close()

A failed collective becomes a ClusterCacheError that names the ranks that are gone, found
by a roll call through the default group's store (torchrun's agent, or the rank that hosts
a tcp:// store): each survivor signs in, and whoever has not within the grace (counted from
the first survivor's signing in) is named.
The scope's timeout is split: COLLECTIVE_SHARE of it for a collective (gloo's timeout; a
peer that died mid-transfer is noticed at once, by its closed connection), ROLL_CALL_SHARE
for the roll call, which outlasts the collective timeout of the ranks that notice last, and
the tenth left over for raising and handing the error to the training loop; so every
survivor raises within the timeout.

Epochs need not start together: `rendezvous(name)` is a roll call with the default
group's own timeout (the skew DDP's collectives tolerate), before an epoch's first round.
"""
from __future__ import annotations

import datetime
import os
import time
import uuid

import torch
import torch.distributed as dist

from pimloader._sample_cache import lib
from pimloader.errors import ClusterCacheError
from pimloader.options import ClusterScope

SEGMENT_PREFIX = "/dev/shm/pimloader-cluster-"
ROLL_CALL_POLL_S = 0.01
COLLECTIVE_SHARE = 0.4
ROLL_CALL_SHARE = 0.5


class ClusterLink:
    def __init__(self, scope: ClusterScope) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("cache_scope='cluster' runs under torch.distributed: call "
                             "torch.distributed.init_process_group() before iterating the "
                             "loader (docs/cluster_cache.md)")
        self.scope = scope
        self.timeout_s = scope.timeout_s
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.failures = 0
        # made with the default group's patience (its ranks may come to their first iter()
        # far apart), then given the collective timeout
        self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(
            seconds=_default_store_timeout_s()))
        self.group.set_timeout(datetime.timedelta(seconds=COLLECTIVE_SHARE * self.timeout_s))
        try:
            self._place(scope)
        except BaseException:
            self.close()
            raise

    def _place(self, scope: ClusterScope) -> None:
        """Where every rank is (its node), and the token that names this cache."""
        places = self.all_gather((scope.node, scope.local_rank, uuid.uuid4().hex))
        self.token = places[0][2]          # names this cache's segments and store keys
        self.node_of = [node for node, _, _ in places]
        self.ranks_of = [[r for r, place in enumerate(places) if place[0] == node]
                         for node in range(scope.nodes)]
        empty = [node for node, ranks in enumerate(self.ranks_of) if not ranks]
        if empty:
            raise ValueError(f"cache_scope: nodes {empty} of {scope.nodes} have no rank "
                             f"(each rank's ClusterScope must agree on the node count)")

    def server_for(self, node: int) -> int:
        """The rank of `node` that serves this rank's requests: the one of the same local
        rank (modulo), so that the node's ranks share the serving."""
        ranks = self.ranks_of[node]
        return ranks[self.scope.local_rank % len(ranks)]

    def describe(self, rank: int) -> str:
        return f"rank {rank} (node {self.node_of[rank]})"

    # collectives
    def all_gather(self, obj) -> list:
        gathered = [None] * self.world
        self._collective(dist.all_gather_object, gathered, obj, group=self.group)
        return gathered

    def exchange(self, send: torch.Tensor, send_sizes: list, recv_sizes: list) -> torch.Tensor:
        received = torch.empty(sum(recv_sizes), dtype=torch.uint8)
        self._collective(dist.all_to_all_single, received, send, recv_sizes, send_sizes,
                         group=self.group)
        return received

    def barrier(self) -> None:
        self._collective(dist.barrier, group=self.group)

    def _collective(self, operation, *args, **kwargs) -> None:
        try:
            operation(*args, **kwargs)
        except RuntimeError as error:
            raise self.failure(error) from error

    def failure(self, cause: BaseException) -> ClusterCacheError:
        """The error that says which ranks stopped answering (a roll call, see above)."""
        self.failures += 1
        gone = self._roll_call(f"pimloader-cluster/{self.token}/failure{self.failures}",
                               ROLL_CALL_SHARE * self.timeout_s, from_first=True)
        if gone is None:
            who = ("a peer (the default group's store is unreachable too: the rank or "
                   "agent that hosts it is gone)")
        elif gone:
            who = ", ".join(self.describe(rank) for rank in gone)
        else:
            who = "no rank missed the roll call (a network fault?)"
        return ClusterCacheError(
            f"the cluster cache's exchange failed on rank {self.rank}: {who} gone (no "
            f"answer within {self.timeout_s} s); the samples its node caches cannot be "
            f"fetched. Cause: {str(cause).splitlines()[0] if str(cause) else cause!r}")

    def rendezvous(self, name: str, waiting=None) -> None:
        """Wait for every rank to reach `name` (up to the default group's timeout), calling
        `waiting()` as it polls; the ones that do not come are named in a ClusterCacheError."""
        wait_s = _default_store_timeout_s()
        gone = self._roll_call(f"pimloader-cluster/{self.token}/{name}", wait_s, waiting)
        if gone:
            raise ClusterCacheError(
                f"the cluster cache's exchange on rank {self.rank}: "
                f"{', '.join(self.describe(rank) for rank in gone)} did not start {name} "
                f"within {wait_s} s (gone, or stalled between epochs for longer than the "
                f"default group's timeout)")
        if gone is None:
            raise ClusterCacheError(f"the cluster cache's exchange on rank {self.rank}: the "
                                    f"default group's store is unreachable at {name}")

    def _roll_call(self, prefix: str, grace_s: float, waiting=None,
                   from_first: bool = False) -> list[int] | None:
        """The ranks that do not sign in at `prefix` within `grace_s` (of this rank's
        signing in; `from_first`: of the first rank's, so that every survivor of a failure
        ends its roll call together, the collective timeout of the last to notice after
        the first noticed); None: no store."""
        try:
            store = dist.distributed_c10d._get_default_store()
            store.set(f"{prefix}/{self.rank}", "here")
            deadline = time.monotonic() + grace_s
            if from_first:
                first = float(store.compare_set(f"{prefix}/first", "", repr(time.time())))
                deadline -= max(0.0, time.time() - first)
            while True:
                present = [rank for rank in range(self.world)
                           if store.check([f"{prefix}/{rank}"])]
                if len(present) == self.world or time.monotonic() > deadline:
                    return sorted(set(range(self.world)) - set(present))
                if waiting is not None:
                    waiting()
                time.sleep(ROLL_CALL_POLL_S)
        except (RuntimeError, ValueError, AttributeError):
            return None

    # this node's cache
    def node_segments(self, budget: int, size: int):
        """(data storage, table tensor, fill tensor) of this node's cache, shared by its
        local ranks: the node's first rank makes two files in /dev/shm, the others open
        them, and the names are unlinked once all have (the files live on by their fds;
        their memory goes with the last process that maps them)."""
        first = self.ranks_of[self.scope.node][0] == self.rank
        base = f"{SEGMENT_PREFIX}{self.token}-node{self.scope.node}"
        names = (f"{base}-data", f"{base}-table")
        sizes = (max(budget, 1), 8 * (1 + 2 * size))
        fds = []
        try:
            if first:
                fds = [_created(name, nbytes) for name, nbytes in zip(names, sizes)]
            self.barrier()
            if not first:
                fds = [os.open(name, os.O_RDWR) for name in names]
            self.barrier()
            storages = [torch.UntypedStorage._new_shared_fd_cpu(fd, nbytes)
                        for fd, nbytes in zip(fds, sizes)]
        finally:
            if first:
                for name in names:
                    _unlink(name)
            for fd in fds:
                os.close(fd)  # the storages keep their own
        meta = torch.tensor([], dtype=torch.int64).set_(storages[1])
        fill, table = meta[:1], meta[1:].view(size, 2)
        if first:
            table.fill_(lib.PIM_CACHE_FREE)
            fill.zero_()
        self.barrier()  # the table is initialised before any local rank uses it
        return storages[0], table, fill

    def close(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            try:
                dist.destroy_process_group(group)
            except (RuntimeError, ValueError):
                pass  # the default group is gone already: so is this one


def _default_store_timeout_s() -> float:
    try:
        return dist.distributed_c10d._get_default_store().timeout.total_seconds()
    except (RuntimeError, ValueError, AttributeError):
        return 1800.0   # torch's default process-group timeout


def _created(name: str, nbytes: int) -> int:
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, nbytes)
    return fd


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass
