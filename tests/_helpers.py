"""Shared helpers for the loader tests: datasets, the batch comparison, leak snapshots.

Everything a worker process may need to unpickle (dataset classes, worker_init_fn, collate
functions) lives at module level here, so that spawn-context workers can import it: pytest
puts tests/ on sys.path (rootdir-relative "prepend" import mode, tests/ has no __init__.py),
and spawned children inherit the parent's sys.path.
"""
from __future__ import annotations

import collections
import gc
import glob
import math
import os
import random
import signal
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from pimloader import PIMDataLoader  # the class under test

TorchDataLoader = DataLoader  # the oracle


# --------------------------------------------------------------------------------------
# Comparison of batches
# --------------------------------------------------------------------------------------
def assert_same(a, b, path="batch"):
    """Assert that a (under test) and b (torch's oracle) are the same batch structure:
    same container types, same tensor dtypes/shapes/values, same python scalars."""
    assert type(a) is type(b), f"{path}: type {type(a).__name__} != torch's {type(b).__name__}"
    if isinstance(b, torch.Tensor):
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} != torch's {b.dtype}"
        assert a.shape == b.shape, f"{path}: shape {tuple(a.shape)} != torch's {tuple(b.shape)}"
        assert a.device == b.device, f"{path}: device {a.device} != torch's {b.device}"
        assert a.layout == b.layout, f"{path}: layout {a.layout} != torch's {b.layout}"
        assert a.requires_grad == b.requires_grad, f"{path}: requires_grad differs"
        assert torch.equal(a, b), f"{path}: values differ:\n{a}\n!= torch's\n{b}"
    elif isinstance(b, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: ndarray dtype/shape differ"
        assert np.array_equal(a, b), f"{path}: ndarray values differ"
    elif isinstance(b, dict):
        assert list(a.keys()) == list(b.keys()), f"{path}: keys {list(a)} != {list(b)}"
        for k in b:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: len {len(a)} != torch's {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(b, float) and math.isnan(b):
        assert math.isnan(a), f"{path}: {a!r} != nan"
    else:
        assert a == b, f"{path}: {a!r} != torch's {b!r}"


def assert_same_batches(got, want, what="batches"):
    assert len(got) == len(want), f"{what}: {len(got)} batches != torch's {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same(a, b, f"{what}[{i}]")


def canonical(obj):
    """A hashable, order-preserving fingerprint of a batch (for multiset comparisons)."""
    if isinstance(obj, torch.Tensor):
        return ("T", str(obj.dtype), tuple(obj.shape), tuple(obj.flatten().tolist()))
    if isinstance(obj, np.ndarray):
        return ("A", str(obj.dtype), obj.shape, tuple(obj.flatten().tolist()))
    if isinstance(obj, dict):
        return ("D", type(obj).__name__, tuple((k, canonical(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return ("S", type(obj).__name__, tuple(canonical(v) for v in obj))
    return ("V", type(obj).__name__, obj)


def reseed_globals(seed=1234):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_epochs(cls, dataset, epochs=1, seed=1234, gen_seed=None, **kw):
    """Iterate `epochs` epochs of cls(dataset, **kw), keeping every batch.  Global RNGs are
    reseeded first, and a fresh torch.Generator seeded with gen_seed is passed if given, so
    that torch's DataLoader and the class under test see the same random state."""
    reseed_globals(seed)
    if gen_seed is not None:
        g = torch.Generator()
        g.manual_seed(gen_seed)
        kw["generator"] = g
    loader = cls(dataset, **kw)
    out = []
    for _ in range(epochs):
        out.append(list(loader))
    if hasattr(loader, "close") and cls is not TorchDataLoader:
        loader.close()
    del loader
    return out


def compare_with_torch(dataset, epochs=1, seed=1234, gen_seed=None, **kw):
    want = run_epochs(TorchDataLoader, dataset, epochs, seed, gen_seed, **kw)
    got = run_epochs(PIMDataLoader, dataset, epochs, seed, gen_seed, **kw)
    for e in range(epochs):
        assert_same_batches(got[e], want[e], f"epoch{e}")
    return got, want


# --------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------
Point = collections.namedtuple("Point", ["x", "y"])


def _base(i, shape=(3, 4), dtype=torch.float32):
    n = int(np.prod(shape)) if shape else 1
    t = torch.arange(n, dtype=torch.float64).reshape(shape) + 100 * i
    return t.to(dtype)


class TensorDS(Dataset):
    """Fixed-shape samples of various structures.  kind selects the sample structure."""

    def __init__(self, n=10, kind="tuple", shape=(3, 4), dtype=torch.float32):
        self.n, self.kind, self.shape, self.dtype = n, kind, shape, dtype

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        k = self.kind
        x = _base(i, self.shape, self.dtype)
        if k == "tensor":
            return x
        if k == "tuple":  # (tensor, python int) -> collated to a list
            return x, i
        if k == "dict":
            return {"x": x, "y": torch.tensor(i % 3), "name": f"s{i}", "w": i / 4, "flag": bool(i % 2)}
        if k == "namedtuple":
            return Point(x, torch.tensor([i, -i], dtype=torch.int16))
        if k == "nested":
            return {
                "a": (x, [torch.tensor(float(i)), i]),
                "b": {"c": np.full((2, 2), i, dtype=np.int32), "d": Point(i, f"n{i}")},
                "e": [f"t{i}", 1.5 * i],
            }
        if k == "numpy":
            return np.arange(6, dtype=np.float32).reshape(2, 3) + i, np.int64(i), np.float64(i / 2)
        if k == "numpy_only":
            return np.arange(5, dtype=np.uint8) + i
        if k == "bf16":
            return x.to(torch.bfloat16) / 3, torch.tensor(i % 2 == 0)
        if k == "bool":
            return (torch.arange(6) % (i + 2) == 0), torch.tensor(i, dtype=torch.int64)
        if k == "scalar0d":
            return x, torch.tensor(i), torch.tensor(i / 7, dtype=torch.float64)
        if k == "noncontig":
            return x.t(), x[:, ::2]
        if k == "uint8img":
            return torch.full((3, 8, 8), i % 256, dtype=torch.uint8), i
        if k == "strings":
            return f"name{i}", i, i * 0.5
        raise ValueError(k)


class GrowingDS(Dataset):
    """Samples whose shape (and, from index 6, dtype) changes from batch to batch but is
    uniform within a batch of 2: sample i has shape (2 + i // 2,)."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        dt = torch.float32 if i < 6 else torch.int64
        return torch.arange(2 + i // 2, dtype=dt) + i, i


class VarDS(Dataset):
    """Variable-length samples (need a custom collate_fn with batching)."""

    def __len__(self):
        return 9

    def __getitem__(self, i):
        return torch.arange(i + 1, dtype=torch.float32), i


def pad_collate(batch):
    xs, ys = zip(*batch)
    m = max(len(x) for x in xs)
    out = torch.zeros(len(xs), m)
    for j, x in enumerate(xs):
        out[j, : len(x)] = x
    return {"x": out, "len": torch.tensor([len(x) for x in xs]), "y": list(ys)}


def sum_collate(batch):
    """A custom collate that returns a tuple (not a list) and plain python numbers."""
    xs = [b[0] for b in batch]
    return torch.stack(xs).sum(0), tuple(b[1] for b in batch)


class GetItemsDS(Dataset):
    """Has __getitems__ that returns values different from __getitem__: an implementation
    that ignores __getitems__ gives other batches."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([float(i)]), i

    def __getitems__(self, indices):
        return [(torch.tensor([float(i) + 1000.0]), i + 1000) for i in indices]


class ShardedIterDS(IterableDataset):
    """Iterable dataset sharded with get_worker_info(); optionally has __len__."""

    def __init__(self, n=11, with_len=False):
        self.n, self.with_len = n, with_len

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, nw):
            yield torch.full((2,), float(i)), i

    def __len__(self):
        if not self.with_len:
            raise TypeError("no len")
        return self.n


class IterWithLen(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


class IterNoLen(IterableDataset):
    def __iter__(self):
        return iter(range(5))


# worker_init_fn bookkeeping (a module global: each worker has its own copy)
INIT_ID = -1


def record_init(worker_id):
    global INIT_ID
    INIT_ID = worker_id
    info = get_worker_info()
    assert info is not None and info.id == worker_id


class SeedDS(Dataset):
    """Returns everything that depends on the per-worker seeding."""

    def __init__(self, n=12):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        if info is None:
            wid, nw, seed = -1, 0, -1
        else:
            wid, nw, seed = info.id, info.num_workers, info.seed % (1 << 62)
        return {
            "i": i,
            "t": torch.rand(3),  # torch's RNG stream (fixed shape -> shared path)
            "initial_seed": torch.initial_seed() % (1 << 62),
            "random": random.random(),
            "np": float(np.random.rand()),
            "wid": wid,
            "nw": nw,
            "seed": seed,
            "init_id": INIT_ID,
        }


class SleepDS(Dataset):
    """Fixed-shape samples, each taking `delay` seconds to fetch."""

    def __init__(self, n=8, delay=0.002):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.full((4,), float(i)), i


# ---- faults -------------------------------------------------------------------------
class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"two-arg error {a} {b}")
        self.a, self.b = a, b


class FailDS(Dataset):
    """Raises at index fail_at (ValueError / KeyError / TwoArgError)."""

    def __init__(self, n=12, fail_at=5, exc="value"):
        self.n, self.fail_at, self.exc = n, fail_at, exc

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            if self.exc == "value":
                raise ValueError(f"bad sample value {i}")
            if self.exc == "key":
                raise KeyError(f"missing key {i}")
            if self.exc == "twoarg":
                raise TwoArgError("first", i)
            raise RuntimeError(self.exc)
        return torch.full((2,), float(i)), i


def failing_init(worker_id):
    raise ValueError(f"init failed in {worker_id}")


class KillDS(Dataset):
    """In a worker, writes its pid into pid_dir and kills itself (sig) or exits (code) at
    index kill_at.  In the main process it only raises (never kills the test process)."""

    def __init__(self, pid_dir, n=12, kill_at=4, sig=signal.SIGKILL, exit_code=None):
        self.pid_dir, self.n, self.kill_at, self.sig, self.exit_code = pid_dir, n, kill_at, sig, exit_code

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.kill_at:
            if get_worker_info() is None:
                raise RuntimeError("KillDS used without workers")
            with open(os.path.join(self.pid_dir, f"{os.getpid()}.pid"), "w") as f:
                f.write(str(os.getpid()))
            if self.exit_code is not None:
                os._exit(self.exit_code)
            os.kill(os.getpid(), self.sig)
            time.sleep(30)
        return torch.full((2,), float(i)), i


class SlowAtDS(Dataset):
    def __init__(self, n=8, slow_at=2, delay=2.0):
        self.n, self.slow_at, self.delay = n, slow_at, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.slow_at:
            time.sleep(self.delay)
        return torch.full((2,), float(i)), i


def outcomes(loader_iter, limit=100):
    """Drive an iterator past errors: a list of ('ok', batch) / ('err', exc type)."""
    out = []
    for _ in range(limit):
        try:
            out.append(("ok", next(loader_iter)))
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001
            out.append(("err", type(e)))
    return out


# --------------------------------------------------------------------------------------
# Leak snapshots
# --------------------------------------------------------------------------------------
def child_pids():
    pid = os.getpid()
    kids = set()
    for f in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(f) as fh:
                kids |= {int(p) for p in fh.read().split()}
        except OSError:
            pass
    return kids


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_helper_singleton(pid):
    # multiprocessing's resource tracker (and a forkserver) are per-interpreter singletons
    # started lazily on first use and kept for the life of the process by design; they are
    # not loader workers.
    c = _cmdline(pid)
    return "resource_tracker" in c or "forkserver" in c


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def fd_count():
    return len(os.listdir("/proc/self/fd"))


class Snapshot:
    def __init__(self):
        gc.collect()
        self.kids = child_pids()
        self.shm = shm_entries()
        self.fds = fd_count()
        self.fd_targets = self._fd_targets()

    @staticmethod
    def _fd_targets():
        out = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                out[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return out

    def leaks(self, procs_only=False):
        gc.collect()
        import multiprocessing

        multiprocessing.active_children()  # reaps finished children
        procs = [p for p in child_pids() - self.kids if not _is_helper_singleton(p)]
        active = [p.pid for p in multiprocessing.active_children() if p.pid not in self.kids]
        active = [p for p in active if not _is_helper_singleton(p)]
        problems = {}
        if procs:
            problems["child processes"] = {p: _cmdline(p)[:120] for p in procs}
        if active:
            problems["multiprocessing.active_children"] = active
        if procs_only:
            return problems
        shm = sorted(_not_foreign(shm_entries() - self.shm))
        fds = fd_count() - self.fds
        if shm:
            problems["new /dev/shm entries"] = shm
        if fds > 0:
            now = self._fd_targets()
            problems["extra fds"] = (fds, {k: v for k, v in now.items() if self.fd_targets.get(k) != v})
        return problems

    def assert_clean(self, wait=5.0, what="", procs_only=False):
        """Poll (shutdown may be asynchronous for a moment) and fail with details."""
        deadline = time.monotonic() + wait
        while True:
            problems = self.leaks(procs_only)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not problems, f"leak after {what}: {problems}"


def _descendants(root):
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        for f in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                with open(f) as fh:
                    kids = {int(x) for x in fh.read().split()}
            except OSError:
                continue
            todo += list(kids - out)
            out |= kids
    return out


def _not_foreign(names):
    """/dev/shm is machine-wide: other sessions' processes (e.g. a forkserver's named
    semaphores) come and go there.  Drop the entries that a process outside this test
    process's tree has open or mapped; what is left is ours, or orphaned."""
    # Named POSIX semaphores (sem.mp-*) come from multiprocessing's spawn/forkserver
    # contexts only (with fork they are unlinked at creation), and other sessions sharing this
    # machine leave them behind; the cleanup tests run the loaders with fork.
    names = {n for n in names if not n.startswith("sem.mp-")}
    names = {n for n in names if os.path.exists(os.path.join("/dev/shm", n))}
    if not names:
        return names
    ours = {os.getpid()} | _descendants(os.getpid())
    foreign = set()
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d.rsplit("/", 1)[1])
        if pid in ours:
            continue
        try:
            with open(f"{d}/maps") as fh:
                text = fh.read()
        except OSError:
            text = ""
        try:
            links = [os.readlink(f"{d}/fd/{fd}") for fd in os.listdir(f"{d}/fd")]
        except OSError:
            links = []
        text += "\n".join(links)
        for n in names - foreign:
            if f"/dev/shm/{n}" in text:
                foreign.add(n)
    return names - foreign



# --------------------------------------------------------------------------------------
# torch.distributed (spawned ranks)
# --------------------------------------------------------------------------------------
def distributed_rank_main(rank, world_size, port, out_dir, n, epochs):
    """One rank: DistributedSampler over TensorDS, torch's DataLoader and PIMDataLoader, each
    with 2 workers; writes both batch sequences to out_dir/rank{rank}.pt."""
    import datetime

    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        ds = TensorDS(n, "tuple")
        result = {}
        for name, cls in (("torch", TorchDataLoader), ("pim", PIMDataLoader)):
            # num_replicas and rank come from the process group, as in user code
            sampler = DistributedSampler(ds, shuffle=True, seed=17)
            # ranks started by torch.multiprocessing.spawn default to the spawn start method;
            # under torchrun they would fork: fork keeps this test fast
            loader = cls(ds, batch_size=3, sampler=sampler, num_workers=2,
                         multiprocessing_context="fork")
            per_epoch = []
            for e in range(epochs):
                sampler.set_epoch(e)
                per_epoch.append(list(loader))
            result[name] = per_epoch
            del loader
        # the ranks really are in one group: gather the index lists over gloo
        mine = [int(i) for b in result["pim"][0] for i in b[1]]
        gathered = [None] * world_size
        dist.all_gather_object(gathered, mine)
        result["gathered"] = gathered
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------
# The oracle of T.Decode(): items (encoded bytes, target) decoded by torchvision
# --------------------------------------------------------------------------------------
class DecodedItems(torch.utils.data.Dataset):
    """Items (bytes, target) of `items` decoded by torchvision's `decode_image` (RGB) and
    given to `transform` (a callable, or a list of steps made a v2 Compose), as Python:
    what PIMDataLoader's native path over the same items with T.Decode() first must equal."""

    def __init__(self, items, transform):
        import torchvision.transforms.v2 as v2
        self.items = items
        self.transform = v2.Compose(transform) if isinstance(transform, list) else transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        from torchvision.io import ImageReadMode, decode_image
        data, target = self.items[index]
        image = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                             mode=ImageReadMode.RGB)
        return self.transform(image), target


def seeded_batches(make_loader, seed=0):
    """(batches, loader) of `make_loader(generator)`, torch's global seed set to seed + 100
    first and the sampler's generator seeded with `seed`: the same draws for every loader
    the tests compare."""
    torch.manual_seed(seed + 100)
    loader = make_loader(torch.Generator().manual_seed(seed))
    return list(loader), loader
