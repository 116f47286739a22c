"""PIMDataLoader yields exactly what torch.utils.data.DataLoader yields (torch is the oracle)."""
import collections
import multiprocessing

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from _helpers import (
    GetItemsDS,
    GrowingDS,
    IterNoLen,
    IterWithLen,
    PIMDataLoader,
    SeedDS,
    ShardedIterDS,
    SleepDS,
    TensorDS,
    TorchDataLoader,
    VarDS,
    assert_same,
    assert_same_batches,
    canonical,
    compare_with_torch,
    pad_collate,
    record_init,
    reseed_globals,
    run_epochs,
    sum_collate,
)

pytestmark = pytest.mark.timeout(60)

KINDS = ["tensor", "tuple", "dict", "namedtuple", "nested", "numpy", "numpy_only", "bf16",
         "bool", "scalar0d", "noncontig", "uint8img", "strings"]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_sample_structures(kind, num_workers):
    # 10 samples in batches of 4: the last batch is partial (2 samples)
    got, _ = compare_with_torch(TensorDS(10, kind), batch_size=4, num_workers=num_workers)
    assert len(got[0]) == 3


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffle_generator_two_epochs(num_workers, drop_last):
    # two epochs over one loader: the generator's state carries from one epoch to the next
    got, want = compare_with_torch(TensorDS(11, "tuple"), epochs=2, gen_seed=7, batch_size=3,
                                   shuffle=True, drop_last=drop_last, num_workers=num_workers)
    order = [int(i) for b in want[0] for i in b[1]]
    assert order != sorted(order)  # the oracle really shuffled
    assert len(got[0]) == (3 if drop_last else 4)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_global_seed(num_workers):
    # no generator: RandomSampler and the base seed draw from torch's global RNG
    compare_with_torch(TensorDS(9, "tuple"), epochs=2, seed=99, batch_size=2, shuffle=True,
                       num_workers=num_workers)


class EveryOther(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n - 1, -1, -2))

    def __len__(self):
        return (self.n + 1) // 2


def _gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sampler_kind", ["list", "custom", "subset_random", "weighted"])
def test_sampler(sampler_kind, num_workers):
    ds = TensorDS(10, "tuple")
    samplers = {
        "list": lambda: [7, 3, 3, 0, 9],
        "custom": lambda: EveryOther(10),
        "subset_random": lambda: SubsetRandomSampler([1, 2, 5, 8, 9], generator=_gen(3)),
        "weighted": lambda: WeightedRandomSampler([0.1] * 5 + [1.0] * 5, 8, generator=_gen(4)),
    }
    want = run_epochs(TorchDataLoader, ds, 2, sampler=samplers[sampler_kind](), batch_size=2,
                      num_workers=num_workers)
    got = run_epochs(PIMDataLoader, ds, 2, sampler=samplers[sampler_kind](), batch_size=2,
                     num_workers=num_workers)
    for e in range(2):
        assert_same_batches(got[e], want[e], f"epoch{e}")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("bs_kind", ["lists", "batch_sampler"])
def test_batch_sampler(bs_kind, num_workers):
    ds = TensorDS(10, "dict")

    def make():
        if bs_kind == "lists":
            return [[0, 1, 2], [5], [9, 8], [4, 4, 4, 4]]
        return BatchSampler(RandomSampler(ds, generator=_gen(5)), 3, drop_last=False)

    want = run_epochs(TorchDataLoader, ds, 1, batch_sampler=make(), num_workers=num_workers)
    got = run_epochs(PIMDataLoader, ds, 1, batch_sampler=make(), num_workers=num_workers)
    assert_same_batches(got[0], want[0])


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["tuple", "numpy", "dict"])
def test_batch_size_none(kind, num_workers):
    # no auto-collation: default_convert (numpy -> tensors, tuples stay tuples)
    got, _ = compare_with_torch(TensorDS(6, kind), batch_size=None, shuffle=True, gen_seed=11,
                                num_workers=num_workers)
    assert len(got[0]) == 6


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_size_none_iterable(num_workers):
    compare_with_torch(ShardedIterDS(7), batch_size=None, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_custom_collate_variable_length(num_workers):
    compare_with_torch(VarDS(), batch_size=4, collate_fn=pad_collate, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_custom_collate_fixed_shape(num_workers):
    # a custom collate_fn on fixed-shape samples must be called (it returns a tuple and sums)
    got, _ = compare_with_torch(TensorDS(10, "tuple"), batch_size=4, collate_fn=sum_collate,
                                num_workers=num_workers)
    assert type(got[0][0]) is tuple


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shape_and_dtype_change_between_batches(num_workers):
    # uniform within a batch, different across batches: a slot layout inferred from the first
    # batch must not be reused blindly
    compare_with_torch(GrowingDS(), batch_size=2, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_variable_shape_batch_size_one(num_workers):
    compare_with_torch(VarDS(), batch_size=1, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems(num_workers):
    got, _ = compare_with_torch(GetItemsDS(), batch_size=3, num_workers=num_workers)
    assert got[0][0][1].tolist() == [1000, 1001, 1002]  # __getitems__ was used


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_sharded(num_workers, drop_last):
    # 11 items over 2 workers: worker 0 has 6, worker 1 has 5 (its last batch is partial)
    got, want = compare_with_torch(ShardedIterDS(11), batch_size=2, drop_last=drop_last,
                                   num_workers=num_workers)
    n = sum(len(b[1]) for b in want[0])
    assert n == (10 if drop_last else 11)


def test_in_order_false_same_multiset():
    # in_order=False may reorder batches; the multiset of batches must be torch's
    ds = SleepDS(12, delay=0.003)
    want = run_epochs(TorchDataLoader, ds, 1, batch_size=2, num_workers=2, in_order=False,
                      shuffle=True, gen_seed=5)[0]
    got = run_epochs(PIMDataLoader, ds, 1, batch_size=2, num_workers=2, in_order=False,
                     shuffle=True, gen_seed=5)[0]
    assert collections.Counter(map(canonical, got)) == collections.Counter(map(canonical, want))
    assert len(got) == 6


@pytest.mark.parametrize("shuffle", [False, True])
def test_persistent_workers_two_epochs(shuffle):
    # with persistent workers torch draws the base seed once, so epoch 2's shuffle differs
    # from the non-persistent case; the per-worker RNG streams continue across epochs
    compare_with_torch(SeedDS(8), epochs=2, gen_seed=21, batch_size=2, shuffle=shuffle,
                       num_workers=2, persistent_workers=True)


@pytest.mark.parametrize("prefetch_factor", [1, 4])
def test_prefetch_factor(prefetch_factor):
    compare_with_torch(SeedDS(10), gen_seed=2, batch_size=2, shuffle=True, num_workers=2,
                       prefetch_factor=prefetch_factor)


def test_timeout_positive_no_expiry():
    compare_with_torch(TensorDS(8, "tuple"), batch_size=3, num_workers=2, timeout=20)


def test_multiprocessing_context_object():
    ctx = multiprocessing.get_context("fork")
    compare_with_torch(TensorDS(8, "dict"), batch_size=3, num_workers=2,
                       multiprocessing_context=ctx)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_iterators_interleaved(num_workers):
    ds = TensorDS(10, "tuple")

    def interleave(cls):
        reseed_globals()
        loader = cls(ds, batch_size=3, num_workers=num_workers, shuffle=True, generator=_gen(8))
        a, b = iter(loader), iter(loader)
        out = []
        for x, y in zip(a, b):
            out += [x, y]
        del a, b
        return out

    assert_same_batches(interleave(PIMDataLoader), interleave(TorchDataLoader))


# ---- per-worker seeds -----------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("gen_seed", [None, 123])
def test_worker_seeds_match_torch(num_workers, gen_seed):
    kw = dict(batch_size=2, num_workers=num_workers, gen_seed=gen_seed, seed=77)
    if num_workers:
        kw["worker_init_fn"] = record_init
    got, want = compare_with_torch(SeedDS(12), **kw)
    if num_workers:
        wids = [int(w) for b in want[0] for w in b["wid"]]
        assert sorted(set(wids)) == [0, 1]
        # worker_init_fn was called with the worker id in each worker
        assert [int(w) for b in got[0] for w in b["init_id"]] == wids


# ---- spawn (slow: each worker re-imports torch; kept to a few cases) -------------------
# torch's batches and seeds do not depend on the start method, so the oracle runs with fork
# (fast) and only PIMDataLoader pays for spawn.
def _spawn_vs_torch_fork(ds, gen_seed=None, **kw):
    want = run_epochs(TorchDataLoader, ds, 1, gen_seed=gen_seed, multiprocessing_context="fork", **kw)
    got = run_epochs(PIMDataLoader, ds, 1, gen_seed=gen_seed, multiprocessing_context="spawn", **kw)
    assert_same_batches(got[0], want[0])
    return got[0]


@pytest.mark.timeout(120)
def test_spawn_map_seeds_shuffle():
    got = _spawn_vs_torch_fork(SeedDS(8), gen_seed=31, batch_size=2, shuffle=True, num_workers=2,
                               worker_init_fn=record_init)
    assert sorted({int(w) for b in got for w in b["init_id"]}) == [0, 1]


@pytest.mark.timeout(120)
def test_spawn_iterable_sharded():
    _spawn_vs_torch_fork(ShardedIterDS(9), batch_size=2, num_workers=2)


# ---- len() ------------------------------------------------------------------------------
def _len_or_exc(cls, ds, **kw):
    loader = cls(ds, **kw)
    try:
        return ("len", len(loader))
    except Exception as e:  # noqa: BLE001
        return ("exc", type(e))


@pytest.mark.parametrize(
    "ds_name,kw",
    [
        ("map10", dict(batch_size=3)),
        ("map10", dict(batch_size=3, drop_last=True)),
        ("map10", dict(batch_size=None)),
        ("map10", dict(batch_size=4, sampler=[1, 2, 3])),
        ("map10", dict(batch_sampler=[[0], [1, 2], [3, 4, 5]])),
        ("map10", dict(batch_size=1, shuffle=True, num_workers=2)),
        ("iterlen10", dict(batch_size=3)),
        ("iterlen10", dict(batch_size=3, drop_last=True)),
        ("iterlen10", dict(batch_size=None)),
        ("iterlen10", dict(batch_size=4, num_workers=2)),
        ("iternolen", dict(batch_size=2)),
    ],
)
def test_len_as_torch(ds_name, kw):
    ds = {"map10": TensorDS(10), "iterlen10": IterWithLen(10), "iternolen": IterNoLen()}[ds_name]
    assert _len_or_exc(PIMDataLoader, ds, **kw) == _len_or_exc(TorchDataLoader, ds, **kw)


def test_iterable_with_len_yields_as_torch():
    compare_with_torch(IterWithLen(10), batch_size=3, drop_last=True)


def test_default_sampler_types_as_torch():
    for kw in (dict(), dict(shuffle=True), dict(batch_size=None)):
        p, t = PIMDataLoader(TensorDS(4), **kw), TorchDataLoader(TensorDS(4), **kw)
        assert type(p.sampler) is type(t.sampler)
        assert type(p.batch_sampler) is type(t.batch_sampler)
        assert p.collate_fn is t.collate_fn
    assert isinstance(PIMDataLoader(TensorDS(4)).sampler, SequentialSampler)


def test_single_sample_equal_to_dataset_item():
    # a tiny sanity check of the oracle helpers themselves
    ds = TensorDS(3, "tensor")
    batch = next(iter(PIMDataLoader(ds, batch_size=3)))
    assert_same(batch, torch.stack([ds[0], ds[1], ds[2]]))
