"""The ranks of tests/test_cluster_cache.py (module level, so that spawned ranks import them).

Each rank is one process of a job of NODES "nodes" x LOCAL ranks on this machine: gloo over
127.0.0.1, node = rank // LOCAL, each node a cache namespace of its own (ClusterScope), each
rank a PIMDataLoader with 2 forked workers over a DistributedSampler. Results go to
out_dir/rank{r}.pt for the test to compare."""
from __future__ import annotations

import datetime
import os
import signal
import time
import traceback

import torch
import torch.distributed as dist
import torchvision.transforms.v2 as v2
from torch.utils.data.distributed import DistributedSampler
from torchvision.datasets import ImageFolder

from pimloader import ClusterCacheError, ClusterScope, PIMDataLoader

NODES, LOCAL = 2, 2
TRANSFORM = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True)])
TIMEOUT_S = 6.0   # the killed-rank test's; the others run with SLOW_S (a loaded machine)
SLOW_S = 60.0


def _join(rank: int, port: int, timeout_s: float = SLOW_S) -> ClusterScope:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=NODES * LOCAL, timeout=datetime.timedelta(seconds=60))
    return ClusterScope(nodes=NODES, node=rank // LOCAL, local_rank=rank % LOCAL,
                        local_ranks=LOCAL, staging_bytes=1 << 20, timeout_s=timeout_s)


def _loader(root, sampler, batch_size=3, num_workers=2, **kw):
    if num_workers:
        kw["multiprocessing_context"] = "fork"
    return PIMDataLoader(ImageFolder(root), batch_size=batch_size, sampler=sampler,
                         num_workers=num_workers, transform=TRANSFORM, **kw)


def _epochs(loader, sampler, first, count, seed=5):
    out = []
    for epoch in range(first, first + count):
        sampler.set_epoch(epoch)
        torch.manual_seed(seed + epoch)
        out.append([(x.clone(), y.clone()) for x, y in loader])
    return out


def _counts(stats):
    return [dict(misses=s.cache_misses, storage=s.cache_misses + s.cluster_storage_reads,
                 received=s.cluster_received, served=s.cluster_served) for s in stats]


def equal_batches_main(rank, port, out_dir, root, variants, epochs):
    """For each variant (name: (budget, loader arguments)): the cluster cache's epochs
    (their counts, what each node's cache holds), then the same loader without a cache;
    then a resume mid-epoch."""
    scope = _join(rank, port)
    try:
        _equal_batches(rank, out_dir, root, variants, epochs, scope)
    except BaseException:
        traceback.print_exc()  # start_processes(join=False) keeps a rank's error to itself
        raise
    finally:
        dist.destroy_process_group()


def _sockets() -> int:
    fds = os.listdir("/proc/self/fd")
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return sum(link.startswith("socket:") for link in links)


def _equal_batches(rank, out_dir, root, variants, epochs, scope):
    result = {"sockets": [_sockets()]}
    for name, (budget, kw) in variants.items():
        sampler = DistributedSampler(ImageFolder(root), shuffle=True, seed=11)
        loader = _loader(root, sampler, cache_bytes=budget, cache_scope=scope, **kw)
        got = _epochs(loader, sampler, 0, epochs)
        cache = loader._pipeline.source_reader().cache
        held = sorted(cache.cached())
        owners = cache.owners.tolist()
        loader.close()  # finishes the last epoch's exchange: its counts are final
        result["sockets"].append(_sockets())  # its group's connections are closed
        plain = _loader(root, sampler, **{k: v for k, v in kw.items() if k != "cache_seekable"})
        result[name] = dict(got=got, want=_epochs(plain, sampler, 0, epochs),
                              counts=_counts(loader.stats()), held=held, owners=owners)
    result["resume"] = _resume(root, scope, variants["whole"][0])
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()  # rank 0 hosts the store: it leaves last


def _resume(root, scope, budget):
    """Two batches of epoch 1, state_dict(), a new loader continues: the batches of an
    uninterrupted loader without a cache, and the same partition."""
    sampler = DistributedSampler(ImageFolder(root), shuffle=True, seed=11)
    first = _loader(root, sampler, batch_size=1, cache_bytes=budget, cache_scope=scope)
    _epochs(first, sampler, 0, 1)
    sampler.set_epoch(1)
    torch.manual_seed(99)
    iterator = iter(first)
    head = [tuple(t.clone() for t in next(iterator)) for _ in range(2)]
    state = first.state_dict()
    rest_first = [tuple(t.clone() for t in batch) for batch in iterator]  # the epoch ends
    owners = first._pipeline.source_reader().cache.owners.tolist()
    first.close()
    second = _loader(root, sampler, batch_size=1, cache_bytes=budget, cache_scope=scope)
    second.load_state_dict(state)
    sampler.set_epoch(1)
    rest = [tuple(t.clone() for t in batch) for batch in second]
    resumed_owners = second._pipeline.source_reader().cache.owners.tolist()
    second.close()
    return dict(rest=rest, rest_first=rest_first, head=head, owners=owners,
                resumed_owners=resumed_owners)


def killed_rank_main(rank, port, out_dir, root, victim):
    """Epoch 0 whole, then the victim SIGKILLs itself after two batches of epoch 1; every
    other rank records the error it gets and how long after the kill."""
    scope = _join(rank, port, TIMEOUT_S)
    sampler = DistributedSampler(ImageFolder(root), shuffle=True, seed=11)
    loader = _loader(root, sampler, batch_size=1, cache_bytes=1 << 20, cache_scope=scope)
    _epochs(loader, sampler, 0, 1)
    workers = []
    outcome = dict(error=None)
    sampler.set_epoch(1)
    try:
        for step, _ in enumerate(loader):
            workers = [p.pid for p in getattr(loader._iterator, "_workers", [])]
            with open(os.path.join(out_dir, f"workers{rank}"), "w") as file:
                file.write(" ".join(map(str, workers)))
            if step == 1:
                dist.barrier()  # every rank is mid-epoch: then the victim goes
                if rank == victim:
                    os.kill(os.getpid(), signal.SIGKILL)
                outcome["killed_at"] = time.monotonic()
    except ClusterCacheError as error:
        outcome.update(error=str(error), after_s=time.monotonic() - outcome["killed_at"])
    loader.close()
    torch.save(outcome, os.path.join(out_dir, f"rank{rank}.pt"))
    # rank 0 hosts the default group's store, which the others' roll calls use: the
    # survivors leave together (by files: the default group has a dead member)
    survivors = [r for r in range(NODES * LOCAL) if r != victim]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(out_dir, f"rank{r}.pt")) for r in survivors):
        time.sleep(0.1)
    os._exit(0)  # its teardown would wait on the dead member
