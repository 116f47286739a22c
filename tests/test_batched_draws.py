"""Plan.draw_many (transforms/_batched_draws.py): many samples' RandomResizedCrop (+ flip)
draws at once from torch's generator state, continued by an emulation of its MT19937.

Oracle: torchvision's own calls one sample after another (`RandomResizedCrop.make_params`
on an image of the size, then the flip's `torch.rand(1) >= p` test), the fused Geometry of
`draw_sample` (the per-sample path), and torch's generator state after them."""
from __future__ import annotations

import random

import pytest
import torch
import torchvision.transforms.v2 as v2

from pimloader import transforms as T
from pimloader.transforms import _batched_draws, lower
from pimloader.transforms._draw import draw_sample


REAL_GENERATOR_CHECK = _batched_draws._generator_is_ours


@pytest.fixture(autouse=True)
def generator_is_ours(monkeypatch):
    """As in a loader worker: the suite's own threads (servers, timeouts of other tests)
    never draw, so the batched draws may run here whatever threads are alive."""
    monkeypatch.setattr(_batched_draws, "_generator_is_ours", lambda: True)


def plan_of(*steps):
    return lower(T.Compose([*steps, v2.ToDtype(torch.float32, scale=True)]))


PLANS = {
    "crop+flip": lambda: plan_of(v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()),
    "crop": lambda: plan_of(v2.RandomResizedCrop(224, scale=(0.5, 0.6), ratio=(0.2, 5.0))),
    "narrow crop, p=0.3": lambda: plan_of(
        v2.RandomResizedCrop((100, 50), scale=(0.9, 1.0), ratio=(3.0, 4.0)),
        v2.RandomHorizontalFlip(p=0.3)),
    "bicubic, p=1": lambda: plan_of(
        v2.RandomResizedCrop(64, interpolation=v2.InterpolationMode.BICUBIC),
        v2.RandomHorizontalFlip(p=1.0)),
}


def batched(plan, sizes):
    """The batched draws themselves (never the one-by-one fallback of Plan.draw_many)."""
    drawn = _batched_draws.draw_many(plan, sizes, 3)
    assert drawn is not None, "the batched draws declined this plan or this process"
    return drawn


def torchvision_draws(plan, sizes):
    """(box, flipped) per size, drawn by torchvision's own calls in order."""
    crop, *flip = plan.native_steps
    drawn = []
    for height, width in sizes:
        params = crop.make_params([torch.empty(3, height, width, dtype=torch.uint8)])
        box = (params["top"], params["left"], params["height"], params["width"])
        flipped = bool(flip) and not bool(torch.rand(1) >= flip[0].p)
        drawn.append((box, flipped))
    return drawn


def sizes_of(rng: random.Random, count: int):
    """Image sizes, slivers (1 x n, n x 1) among them: the central fallback's empty boxes."""
    return [(rng.choice([1, 2, rng.randint(1, 700)]), rng.randint(1, 700)) if rng.random() < 0.2
            else (rng.randint(30, 700), rng.randint(30, 700)) for _ in range(count)]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_draws_are_torchvisions_and_leave_the_generator_where_it_does(name):
    plan = PLANS[name]()
    rng = random.Random(name)
    for seed in range(12):
        sizes = sizes_of(rng, rng.randint(1, 48))
        torch.manual_seed(seed)
        expected = torchvision_draws(plan, sizes)
        expected_next = torch.rand(4)
        torch.manual_seed(seed)
        drawn = batched(plan, sizes)
        assert torch.equal(torch.rand(4), expected_next)
        crop, *flip = plan.native_steps
        for params, (box, flipped) in zip(drawn, expected, strict=True):
            assert params.steps[0][0] is crop
            assert tuple(params.steps[0][1][key] for key in ("top", "left", "height",
                                                              "width")) == box
            if flip:
                assert params.steps[1] == (flip[0], {} if flipped else None)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_params_and_geometry_are_the_per_sample_paths(name):
    plan = PLANS[name]()
    sizes = sizes_of(random.Random(1), 300)
    torch.manual_seed(11)
    expected = [draw_sample(plan, height, width, 3) for height, width in sizes]
    torch.manual_seed(11)
    drawn = batched(plan, sizes)
    for params, one in zip(drawn, expected, strict=True):
        assert params.steps == one.steps
        assert params.geometry == one.geometry


def test_a_long_run_crosses_the_generators_refills():
    """Thousands of numbers: the emulated state is refilled (twisted) several times, and
    the stream grows past its first guess when samples need many attempts."""
    plan = PLANS["crop"]()   # ratio (0.2, 5): many rejected attempts on small images
    sizes = [(40, 41)] * 600 + [(300, 200)] * 600
    torch.manual_seed(0)
    torch.rand(100)   # start mid-state
    expected = torchvision_draws(plan, sizes)
    expected_next = torch.rand(4)
    torch.manual_seed(0)
    torch.rand(100)
    drawn = batched(plan, sizes)
    assert torch.equal(torch.rand(4), expected_next)
    assert [tuple(p.steps[0][1].values()) for p in drawn] == [box for box, _ in expected]


@pytest.mark.parametrize("steps", [
    lambda: [v2.RandomResizedCrop(32), v2.ColorJitter(0.4)],
    lambda: [v2.RandomCrop(16), v2.RandomHorizontalFlip()],
    lambda: [v2.RandomHorizontalFlip(), v2.RandomResizedCrop(32)],
    lambda: [v2.RandomResizedCrop(32), v2.RandomVerticalFlip()],
    lambda: [type("OwnDraw", (v2.RandomResizedCrop,), {
        "make_params": lambda self, inputs: dict(top=0, left=0, height=2, width=2)})(32)],
])
def test_other_pipelines_are_drawn_one_by_one_with_the_same_numbers(steps):
    plan = plan_of(*steps())
    sizes = [(50, 60), (61, 40), (45, 45)]
    assert _batched_draws.draw_many(plan, sizes, 3) is None
    torch.manual_seed(3)
    expected = [draw_sample(plan, height, width, 3) for height, width in sizes]
    torch.manual_seed(3)
    assert repr([params.steps for params in plan.draw_many(sizes)]) == \
        repr([params.steps for params in expected])   # (ColorJitter's params hold tensors)


def test_another_default_dtype_is_drawn_one_by_one():
    plan = PLANS["crop+flip"]()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert _batched_draws.draw_many(plan, [(50, 60)], 3) is None
    finally:
        torch.set_default_dtype(previous)


def test_the_check_against_torch_leaves_the_generator_untouched():
    _batched_draws.rounding.cache_clear()
    torch.manual_seed(9)
    expected = torch.rand(3)
    torch.manual_seed(9)
    assert _batched_draws.agrees_with_torch()
    assert torch.equal(torch.rand(3), expected)


def test_float32_rounding_of_exact_halfway_sums():
    """uniform32's fused rounding of x * span + low where the double sum lands exactly
    halfway between two float32s: the exact value decides (here against exact fractions)."""
    from fractions import Fraction

    import numpy as np
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64)
    for low, high in [(0.08, 1.0), (-0.2876821, 0.2876821), (0.3, 0.30000003)]:
        ours = _batched_draws.uniform32(raw, low, high, fused=True)
        low32, high32 = np.float32(low), np.float32(high)
        span = Fraction(float(np.float32(high32 - low32)))
        sample = rng.choice(len(raw), 2000, replace=False)
        for k in sample:
            exact = Fraction(int(raw[k]) & 0xFFFFFF, 2 ** 24) * span + Fraction(float(low32))
            assert ours[k] == _nearest_float32(exact)


def _nearest_float32(value):
    """The float32 nearest an exact fraction (ties to even)."""
    import numpy as np
    guess = np.float32(float(value))
    below, above = (np.nextafter(guess, np.float32(-np.inf)), guess) if guess > value else \
        (guess, np.nextafter(guess, np.float32(np.inf)))
    to_below, to_above = value - _fraction(below), _fraction(above) - value
    if to_below != to_above:
        return below if to_below < to_above else above
    return below if int(below.view(np.uint32)) % 2 == 0 else above


def _fraction(value):
    from fractions import Fraction
    return Fraction(float(value))


def test_a_double_sum_halfway_between_float32s_rounds_the_exact_way():
    """total + error exactly: where the double total lies halfway between two float32s, the
    sign of the error picks the float32 (ties to even only when the error is 0)."""
    import numpy as np
    halfway = np.array([1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 0.5 + 2.0 ** -25], np.float64)
    for error in (2.0 ** -60, -(2.0 ** -60), 0.0):
        got = _batched_draws._round_to_float32(halfway, np.full(3, error))
        for total, value in zip(halfway, got):
            from fractions import Fraction
            assert value == _nearest_float32(Fraction(float(total)) + Fraction(error))


def test_a_process_with_other_threads_draws_one_by_one(monkeypatch):
    """Another thread could draw from the generator between the state read and the state
    written back: outside a loader worker, threads of its own mean one by one; in a worker
    (get_worker_info() set) the threads are the loader's, and the draws are batched."""
    import threading

    import torch.utils.data
    monkeypatch.setattr(_batched_draws, "_generator_is_ours", REAL_GENERATOR_CHECK)
    plan = PLANS["crop+flip"]()
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _batched_draws.draw_many(plan, [(50, 60)], 3) is None
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
        assert _batched_draws.draw_many(plan, [(50, 60)], 3) is not None
    finally:
        release.set()
        other.join()
