"""Shared batch slots: batches the user keeps stay unchanged, slots are reused only after
the user lets go, and stats() reports which path each batch took."""
import dataclasses
import time

import pytest
import torch

import pimloader
from _helpers import (
    GrowingDS,
    PIMDataLoader,
    SleepDS,
    TensorDS,
    TorchDataLoader,
    VarDS,
    assert_same,
    assert_same_batches,
    pad_collate,
    run_epochs,
)

pytestmark = pytest.mark.timeout(60)

NW = [0, 2]


def _torch_batches(ds, **kw):
    return run_epochs(TorchDataLoader, ds, 1, **kw)[0]


@pytest.mark.parametrize("num_workers", NW)
@pytest.mark.parametrize("kind", ["tuple", "dict", "uint8img"])
def test_list_of_epoch_unchanged(kind, num_workers):
    # 40 samples in batches of 2: 20 batches, far more than a ring of slots holds
    ds = TensorDS(40, kind)
    want = _torch_batches(ds, batch_size=2, num_workers=num_workers)
    got = run_epochs(PIMDataLoader, ds, 1, batch_size=2, num_workers=num_workers)[0]
    assert_same_batches(got, want)


@pytest.mark.parametrize("num_workers", NW)
def test_every_third_batch_kept(num_workers):
    ds = TensorDS(60, "tuple")
    want = _torch_batches(ds, batch_size=2, num_workers=num_workers)
    kept = {}
    for i, b in enumerate(PIMDataLoader(ds, batch_size=2, num_workers=num_workers)):
        assert_same(b, want[i], f"batch[{i}] on arrival")
        if i % 3 == 0:
            kept[i] = b
        del b
    assert len(kept) == 10
    for i, b in kept.items():
        assert_same(b, want[i], f"kept batch[{i}] after the epoch")


@pytest.mark.parametrize("num_workers", NW)
@pytest.mark.parametrize("how", ["tensor_only", "derived_view", "numpy_view", "storage_view"])
def test_partial_references_keep_slot(how, num_workers):
    """Keeping only a piece of a batch (one tensor, a view of it, a numpy array over it)
    must keep its memory from being reused, like keeping the whole batch."""
    ds = TensorDS(40, "tuple")
    want = _torch_batches(ds, batch_size=4, num_workers=num_workers)
    kept = []
    for i, (x, y) in enumerate(PIMDataLoader(ds, batch_size=4, num_workers=num_workers)):
        if i % 2 == 0:
            if how == "tensor_only":
                kept.append((i, x))
            elif how == "derived_view":
                kept.append((i, x[1:, 0]))
            elif how == "numpy_view":
                kept.append((i, x.numpy()))
            else:
                kept.append((i, torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(),
                                                                     x.storage_offset(),
                                                                     x.shape, x.stride())))
        del x, y
    for i, piece in kept:
        ref = want[i][0]
        if how == "derived_view":
            ref = ref[1:, 0]
        if how == "numpy_view":
            ref = ref.numpy()
            assert (piece == ref).all(), f"batch[{i}] changed after the user kept a numpy view"
        else:
            assert torch.equal(piece, ref), f"batch[{i}] changed after the user kept a {how}"


@pytest.mark.parametrize("num_workers", NW)
def test_user_writes_into_batch_do_not_leak(num_workers):
    # the user scribbles over each batch after use; later batches (written into reused
    # slots) must still be exactly torch's, including the partial last batch
    ds = TensorDS(23, "dict")
    want = _torch_batches(ds, batch_size=4, num_workers=num_workers)
    for i, b in enumerate(PIMDataLoader(ds, batch_size=4, num_workers=num_workers)):
        assert_same(b, want[i], f"batch[{i}]")
        b["x"].fill_(-7)
        b["y"].fill_(99)
        del b


def test_persistent_epoch_one_kept_through_epoch_two():
    ds = TensorDS(20, "tuple")
    kw = dict(batch_size=2, num_workers=2, persistent_workers=True, shuffle=True)
    want = run_epochs(TorchDataLoader, ds, 2, gen_seed=4, **kw)
    got = run_epochs(PIMDataLoader, ds, 2, gen_seed=4, **kw)
    assert_same_batches(got[0], want[0], "epoch0 (held through epoch 1)")
    assert_same_batches(got[1], want[1], "epoch1")


@pytest.mark.parametrize("num_workers", NW)
def test_slots_are_reused_when_dropped(num_workers):
    """Batches dropped right away are served from a small ring of slots, not fresh memory."""
    ds = TensorDS(60, "tensor")
    loader = PIMDataLoader(ds, batch_size=2, num_workers=num_workers)
    ptrs = set()
    n = 0
    for b in loader:
        ptrs.add(b.untyped_storage().data_ptr())
        n += 1
        del b
    assert n == 30
    st = loader.stats()[-1]
    assert st.shared_batches == 30
    ring = 2 * max(num_workers, 1) * 2 + 2
    assert len(ptrs) <= ring, f"{len(ptrs)} distinct buffers for 30 dropped batches"


# ---- stats() ----------------------------------------------------------------------------
def _check_fields(st):
    assert isinstance(st, pimloader.EpochStats)
    names = {f.name for f in dataclasses.fields(st)} if dataclasses.is_dataclass(st) else set(vars(st))
    for f in ("epoch", "batches", "samples", "shared_batches", "collated_batches"):
        assert f in names or hasattr(st, f), f
        assert isinstance(getattr(st, f), int), f"{f} = {getattr(st, f)!r}"
    for f in ("wait_s", "fetch_s", "write_s"):
        v = getattr(st, f)
        assert isinstance(v, (int, float)) and v >= 0, f"{f} = {v!r}"


@pytest.mark.parametrize("num_workers", NW)
def test_stats_fixed_shape_shared(num_workers):
    ds = SleepDS(16, delay=0.01)
    loader = PIMDataLoader(ds, batch_size=4, num_workers=num_workers)
    assert loader.stats() == []
    t0 = time.monotonic()
    batches = list(loader)
    wall = time.monotonic() - t0
    stats = loader.stats()
    assert len(stats) == 1
    st = stats[0]
    _check_fields(st)
    assert st.epoch == 0
    assert st.batches == len(batches) == len(loader) == 4
    assert st.samples == len(ds) == 16
    assert st.shared_batches > 0, st
    assert st.shared_batches + st.collated_batches == st.batches, st
    # the dataset sleeps 10 ms per sample: 160 ms of fetching, in workers or here
    assert 0.12 <= st.fetch_s <= wall * max(num_workers, 1) + 0.5, (st, wall)
    assert st.wait_s <= wall + 0.05, (st, wall)
    if num_workers == 0:
        assert st.fetch_s <= wall + 0.05


@pytest.mark.parametrize("num_workers", NW)
@pytest.mark.parametrize("collate_fn", [None, pad_collate])
def test_stats_deliver_is_part_of_wait(num_workers, collate_fn):
    """deliver_s (lending slot views, or handing collated data over) is counted once per
    batch, inside wait_s; wait_s is inside the time the loop itself spent in next()."""
    ds = VarDS() if collate_fn else SleepDS(12, delay=0.005)
    extra = {"collate_fn": collate_fn} if collate_fn else {}
    loader = PIMDataLoader(ds, batch_size=4, num_workers=num_workers, **extra)
    in_next, iterator = 0.0, iter(loader)
    while True:
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            break
        finally:
            in_next += time.perf_counter() - start
    st = loader.stats()[-1]
    assert st.batches == len(loader)
    assert 0 < st.deliver_s <= st.wait_s <= in_next, (st, in_next)
    if num_workers == 0:  # producing happens inside next(): every stage is part of wait_s
        assert st.fetch_s + st.decode_s + st.write_s + st.deliver_s <= st.wait_s, st


@pytest.mark.parametrize("num_workers", NW)
def test_stats_custom_collate_is_collated(num_workers):
    loader = PIMDataLoader(VarDS(), batch_size=4, num_workers=num_workers, collate_fn=pad_collate)
    got = list(loader)
    assert_same_batches(got, _torch_batches(VarDS(), batch_size=4, num_workers=num_workers,
                                            collate_fn=pad_collate))
    st = loader.stats()[-1]
    _check_fields(st)
    assert st.collated_batches == st.batches == 3, st
    assert st.shared_batches == 0, st
    assert st.samples == 9


@pytest.mark.parametrize("num_workers", NW)
def test_stats_no_tensor_samples_are_collated(num_workers):
    loader = PIMDataLoader(TensorDS(10, "strings"), batch_size=4, num_workers=num_workers)
    list(loader)
    st = loader.stats()[-1]
    assert st.collated_batches == st.batches == 3 and st.shared_batches == 0, st


@pytest.mark.parametrize("num_workers", NW)
def test_stats_changing_shapes_account_every_batch(num_workers):
    loader = PIMDataLoader(GrowingDS(), batch_size=2, num_workers=num_workers)
    got = list(loader)
    assert_same_batches(got, _torch_batches(GrowingDS(), batch_size=2, num_workers=num_workers))
    st = loader.stats()[-1]
    assert st.batches == 5 and st.samples == 10
    assert st.shared_batches + st.collated_batches == 5, st


@pytest.mark.parametrize("persistent", [False, True])
def test_stats_two_epochs_drop_last(persistent):
    loader = PIMDataLoader(TensorDS(10, "tuple"), batch_size=3, drop_last=True, num_workers=2,
                           persistent_workers=persistent)
    for _ in range(2):
        list(loader)
    stats = loader.stats()
    assert [s.epoch for s in stats] == [0, 1]
    for s in stats:
        _check_fields(s)
        assert s.batches == 3 and s.samples == 9, s
        assert s.shared_batches == 3, s
    # stats() returns a snapshot list; mutating it does not change the loader's record
    stats.clear()
    assert len(loader.stats()) == 2


def test_stats_batch_size_none_counts_samples():
    loader = PIMDataLoader(TensorDS(5, "tuple"), batch_size=None)
    got = list(loader)
    assert_same_batches(got, _torch_batches(TensorDS(5, "tuple"), batch_size=None))
    st = loader.stats()[-1]
    assert st.batches == 5 and st.samples == 5, st
    assert st.shared_batches + st.collated_batches == 5, st


def test_batch_splitter_agrees_with_the_per_sample_splitter():
    """The column-by-column split of flat (field, plain...) samples gives the skeletons and
    columns of the per-sample walk (kept by column, collating as the rows do), falls back
    to it for mixed batches, and refuses what it refuses."""
    from collections import namedtuple

    from pimloader.loader.layout import (FlatSkeletons, Layout, NotSlottable, collate_skeletons,
                                   compile_batch_splitter, compile_splitter, split_sample)

    Pair = namedtuple("Pair", "image label")
    image = lambda i: torch.full((2, 3), i, dtype=torch.uint8)  # noqa: E731
    batches = {
        "tuple": [(image(i), i) for i in range(5)],
        "list": [[image(i), f"name{i}", 0.5 * i] for i in range(5)],
        "namedtuple": [Pair(image(i), i) for i in range(5)],
        "mixed tensor and array": [(image(i) if i % 2 else image(i).numpy(), i) for i in range(5)],
        "nested": [(image(i), {"label": i}) for i in range(5)],
    }
    for name, samples in batches.items():
        leaves = []
        skeleton = split_sample(samples[0], leaves)
        layout = Layout.for_leaves(leaves, capacity=len(samples))
        want_columns = [[] for _ in leaves]
        want = [compile_splitter(skeleton, layout, want_columns)(s) for s in samples]
        got_columns = [[] for _ in leaves]
        got = compile_batch_splitter(skeleton, layout, got_columns)(samples)
        if isinstance(got, FlatSkeletons):
            views = [torch.stack(column) for column in got_columns]
            assert_same_batches([collate_skeletons(got, views)],
                                [collate_skeletons(want, views)])
            got = got.rows()
        assert got == want, name
        assert all(len(g) == len(w) and all(a is b for a, b in zip(g, w))
                   for g, w in zip(got_columns, want_columns)), name

    samples = [(image(i), i) for i in range(3)]
    leaves = []
    skeleton = split_sample(samples[0], leaves)
    layout = Layout.for_leaves(leaves, capacity=4)
    split = compile_batch_splitter(skeleton, layout, [[]])
    for bad in ([*samples, (torch.zeros(2, 4, dtype=torch.uint8), 3)],
                [*samples, (image(3).float(), 3)],
                [*samples, (image(3), object())],
                [*samples, (image(3), 3, 4)],
                [*samples, [image(3), 3]]):
        with pytest.raises(NotSlottable):
            split(bad)
