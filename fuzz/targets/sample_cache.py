"""The sample cache's table (csrc/sample_cache.c through pimloader/datasets/cache.py): a
run of puts and gets, from the bytes, against a model of what the cache promises.

Input: budget (byte 0), number of samples (byte 1 % 16 + 1), then (kind, index, length)
triples: kind even is a get, odd a put of `length` bytes; the index is a signed byte, so
it also falls out of range and counts from the end. Documented error: IndexError for an
index out of range (a list's rule). What is checked: a put succeeds exactly when the
index holds nothing yet and the value fits in what the budget has left (the first value
stays: nothing is evicted); a get returns the value put, or None; the fill pointer counts
the bytes handed out."""
from __future__ import annotations

from pimloader.datasets.cache import SampleCache

CORPUS = "sample_cache"
MAX_LEN = 256


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    budget, size = data[0], data[1] % 16 + 1
    cache = SampleCache(budget, size)
    cache.open()
    model: dict[int, bytes] = {}
    try:
        for at in range(2, len(data) - 2, 3):
            kind, index, length = data[at], int.from_bytes(data[at + 1:at + 2], "little", signed=True), data[at + 2]
            step(cache, model, kind, index, bytes([at % 251]) * length)
        assert cache.cached() == {i: len(v) for i, v in model.items()}
        assert cache.filled_bytes() == sum(len(v) for v in model.values())
    finally:
        cache.close()


def step(cache: SampleCache, model: dict, kind: int, index: int, value: bytes) -> None:
    if not -cache.size <= index < cache.size:
        try:
            cache.put(index, value) if kind & 1 else cache.get(index)
        except IndexError:
            return
        raise AssertionError(f"index {index} of {cache.size} samples was taken")
    slot = index % cache.size
    if kind & 1:
        fits = slot not in model and len(value) <= cache.budget - sum(len(v) for v in model.values())
        assert cache.put(index, value) == fits, (index, len(value), model)
        if fits:
            model[slot] = value
    else:
        assert cache.get(index) == model.get(slot), (index, model)
