"""Constructor arguments: same signature, defaults, errors and warnings as torch's DataLoader."""
import inspect
import multiprocessing
import warnings

import pytest
import torch
from torch.utils.data import RandomSampler, SequentialSampler

from _helpers import (
    IterWithLen,
    PIMDataLoader,
    TensorDS,
    TorchDataLoader,
    assert_same_batches,
    compare_with_torch,
    run_epochs,
)

pytestmark = pytest.mark.timeout(60)


def test_is_a_torch_dataloader():
    loader = PIMDataLoader(TensorDS(4), batch_size=2)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert PIMDataLoader is not torch.utils.data.DataLoader


def test_signature_matches_torch():
    """Every torch parameter exists with the same kind (positional/keyword-only), the same
    default and, for positional ones, the same position.  Extra parameters are allowed only
    as keyword-only (or after torch's positional ones) so that no positional call changes."""
    want = list(inspect.signature(TorchDataLoader.__init__).parameters.values())
    got = inspect.signature(PIMDataLoader.__init__).parameters
    got_list = list(got.values())
    for pos, p in enumerate(want):
        assert p.name in got, f"missing parameter {p.name}"
        q = got[p.name]
        assert q.kind == p.kind, f"{p.name}: kind {q.kind} != torch's {p.kind}"
        assert q.default == p.default or (q.default is p.default), (
            f"{p.name}: default {q.default!r} != torch's {p.default!r}")
        if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD:
            assert got_list[pos].name == p.name, f"positional parameter {pos} is {got_list[pos].name}, torch's is {p.name}"
    for q in got_list:
        if q.name not in {p.name for p in want}:
            assert q.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD), (
                f"extra parameter {q.name} must be keyword-only")


def test_positional_arguments_as_torch():
    ds = TensorDS(9, "tuple")
    g1, g2 = torch.Generator(), torch.Generator()
    g1.manual_seed(3)
    g2.manual_seed(3)
    # dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
    # drop_last, timeout, worker_init_fn, multiprocessing_context, generator
    args = (4, True, None, None, 0, None, False, True, 0, None, None)
    want = list(TorchDataLoader(ds, *args, g1))
    got = list(PIMDataLoader(ds, *args, g2))
    assert_same_batches(got, want)
    # prefetch_factor is keyword-only in torch: a 14th positional argument is a TypeError
    with pytest.raises(TypeError):
        TorchDataLoader(ds, *args, None, 2)
    with pytest.raises(TypeError):
        PIMDataLoader(ds, *args, None, 2)


ATTRS = ["batch_size", "drop_last", "num_workers", "prefetch_factor", "pin_memory", "timeout",
         "worker_init_fn", "persistent_workers", "pin_memory_device", "in_order", "generator",
         "multiprocessing_context", "collate_fn", "dataset"]


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(batch_size=3, shuffle=True), dict(num_workers=2), dict(batch_size=None),
     dict(num_workers=1, prefetch_factor=5, persistent_workers=True, timeout=3.5, in_order=False),
     dict(batch_sampler=[[0, 1]])],
)
def test_attributes_and_defaults_as_torch(kw):
    ds = TensorDS(6)
    p, t = PIMDataLoader(ds, **kw), TorchDataLoader(ds, **kw)
    for a in ATTRS:
        assert getattr(p, a) == getattr(t, a), f"{a}: {getattr(p, a)!r} != torch's {getattr(t, a)!r}"
    assert type(p.sampler) is type(t.sampler)
    assert type(p.batch_sampler) is type(t.batch_sampler)


def _err(cls, *args, **kw):
    try:
        cls(*args, **kw)
    except Exception as e:  # noqa: BLE001
        return type(e), str(e).replace("PIMDataLoader", "DataLoader")
    return None


_ds = TensorDS(6)
_it = IterWithLen(6)
_sampler = SequentialSampler(_ds)

INVALID = {
    "shuffle_with_sampler": (dict(sampler=_sampler, shuffle=True), _ds),
    "batch_sampler_with_batch_size": (dict(batch_sampler=[[0]], batch_size=2), _ds),
    "batch_sampler_with_shuffle": (dict(batch_sampler=[[0]], shuffle=True), _ds),
    "batch_sampler_with_sampler": (dict(batch_sampler=[[0]], sampler=_sampler), _ds),
    "batch_sampler_with_drop_last": (dict(batch_sampler=[[0]], drop_last=True), _ds),
    "batch_size_none_drop_last": (dict(batch_size=None, drop_last=True), _ds),
    "negative_num_workers": (dict(num_workers=-1), _ds),
    "negative_timeout": (dict(timeout=-1), _ds),
    "prefetch_without_workers": (dict(prefetch_factor=2), _ds),
    "negative_prefetch": (dict(num_workers=1, prefetch_factor=-1), _ds),
    "persistent_without_workers": (dict(persistent_workers=True), _ds),
    "iterable_shuffle": (dict(shuffle=True), _it),
    "iterable_sampler": (dict(sampler=[0, 1]), _it),
    "iterable_batch_sampler": (dict(batch_sampler=[[0, 1]]), _it),
    "bad_context_string": (dict(num_workers=2, multiprocessing_context="bogus"), _ds),
    "bad_context_type": (dict(num_workers=2, multiprocessing_context=42), _ds),
    "context_without_workers": (dict(multiprocessing_context="fork"), _ds),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_combinations_as_torch(name):
    kw, ds = INVALID[name]
    want = _err(TorchDataLoader, ds, **kw)
    assert want is not None, "oracle: torch accepted this combination"
    got = _err(PIMDataLoader, ds, **kw)
    assert got is not None, f"accepted {kw}; torch raises {want[0].__name__}: {want[1]}"
    assert got[0] is want[0], f"raised {got[0].__name__}: {got[1]}; torch raises {want[0].__name__}: {want[1]}"
    assert got[1] == want[1], f"message {got[1]!r} != torch's {want[1]!r}"


def test_valid_edge_combinations_accepted():
    # combinations torch accepts must be accepted (shuffle=False with an IterableDataset,
    # sampler with shuffle=False, prefetch_factor=0 is rejected later by torch only on iter)
    for kw, ds in [(dict(shuffle=False), _it), (dict(sampler=_sampler, shuffle=False), _ds),
                   (dict(batch_sampler=[[0]], batch_size=1, drop_last=False), _ds)]:
        assert _err(TorchDataLoader, ds, **kw) is None
        assert _err(PIMDataLoader, ds, **kw) is None, kw


@pytest.mark.parametrize("attr,value", [("batch_size", 4), ("drop_last", True),
                                        ("sampler", [0]), ("batch_sampler", [[0]]),
                                        ("dataset", TensorDS(2)), ("persistent_workers", True)])
def test_setting_attribute_after_init(attr, value):
    def attempt(cls):
        loader = cls(TensorDS(6), batch_size=2)
        try:
            setattr(loader, attr, value)
        except Exception as e:  # noqa: BLE001
            return type(e), str(e).replace("PIMDataLoader", "DataLoader")
        return None

    want = attempt(TorchDataLoader)
    assert want is not None and want[0] is ValueError
    assert attempt(PIMDataLoader) == want


def test_setting_multiprocessing_context_after_init_as_torch():
    ds = TensorDS(6)
    for cls in (TorchDataLoader, PIMDataLoader):
        loader = cls(ds, num_workers=2)
        loader.multiprocessing_context = "fork"  # allowed, converted to a context object
        assert isinstance(loader.multiprocessing_context, multiprocessing.context.BaseContext)
        with pytest.raises(ValueError):
            loader.multiprocessing_context = "bogus"


def _iter_outcome(cls, ds, **kw):
    loader = cls(ds, **kw)
    try:
        return ("ok", list(loader))
    except Exception as e:  # noqa: BLE001
        return ("exc", type(e), str(e))


def test_timeout_without_workers_as_torch():
    # torch accepts timeout>0 with num_workers=0 at construction and fails on iteration
    # (its single-process iterator requires timeout == 0)
    ds = TensorDS(4, "tuple")
    want = _iter_outcome(TorchDataLoader, ds, batch_size=2, timeout=1.0)
    got = _iter_outcome(PIMDataLoader, ds, batch_size=2, timeout=1.0)
    assert want[0] == "exc"  # the oracle's behaviour in torch 2.14
    assert got == want, f"{got} != torch's {want}"  # same type, same message


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # torch's own __del__
def test_prefetch_factor_zero_as_torch():
    # torch accepts prefetch_factor=0 at construction, then fails when iterating
    ds = TensorDS(4, "tuple")
    kw = dict(batch_size=2, num_workers=1, prefetch_factor=0)
    assert _err(TorchDataLoader, ds, **kw) is None
    assert _err(PIMDataLoader, ds, **kw) is None
    want = _iter_outcome(TorchDataLoader, ds, **kw)
    got = _iter_outcome(PIMDataLoader, ds, **kw)
    assert want[0] == "exc"  # torch 2.14: AssertionError, "prefetch_factor must be greater
    assert got == want, f"{got} != torch's {want}"  # than 0 for MultiProcessingDataLoaderIter"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_memory_without_accelerator(num_workers):
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is present: pinned memory is expected")
    ds = TensorDS(6, "dict")
    with pytest.warns(UserWarning, match="no accelerator is found"):
        got = run_epochs(PIMDataLoader, ds, 1, batch_size=4, pin_memory=True,
                         num_workers=num_workers)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = run_epochs(TorchDataLoader, ds, 1, batch_size=4, pin_memory=True,
                          num_workers=num_workers)[0]
    assert_same_batches(got, want)
    assert not any(b["x"].is_pinned() for b in got)


def test_pin_memory_device_deprecation_warning_as_torch():
    ds = TensorDS(4)
    with warnings.catch_warnings(record=True) as w_t:
        warnings.simplefilter("always")
        list(TorchDataLoader(ds, batch_size=2, pin_memory=True, pin_memory_device="cpu"))
    with warnings.catch_warnings(record=True) as w_p:
        warnings.simplefilter("always")
        list(PIMDataLoader(ds, batch_size=2, pin_memory=True, pin_memory_device="cpu"))
    want = sorted({str(w.message) for w in w_t if "pin_memory" in str(w.message)})
    got = sorted({str(w.message) for w in w_p if "pin_memory" in str(w.message)})
    assert want and got == want


def test_too_many_workers_warning_as_torch():
    import os

    n = len(os.sched_getaffinity(0)) + 1
    with warnings.catch_warnings(record=True) as w_t:
        warnings.simplefilter("always")
        TorchDataLoader(TensorDS(4), num_workers=n)
    with warnings.catch_warnings(record=True) as w_p:
        warnings.simplefilter("always")
        PIMDataLoader(TensorDS(4), num_workers=n)
    assert any("worker processes in total" in str(w.message) for w in w_t)
    assert any("worker processes in total" in str(w.message) for w in w_p)


def test_random_sampler_generator_used():
    # the same generator object passed in is the one used by the default RandomSampler
    g = torch.Generator()
    loader = PIMDataLoader(TensorDS(6), shuffle=True, generator=g)
    assert isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is g
    compare_with_torch(TensorDS(6, "tuple"), gen_seed=9, shuffle=True, batch_size=2)
