"""Snapshots of a producer (a worker, or the main process with num_workers=0) for mid-epoch
resume (see _resume.py): its global random states, its dataset's and its iterator's
state_dict, and what replaying its fetches needs; in the form that crosses the result queue
(bytes) and in the form a state_dict holds (plain values and tensors)."""
from __future__ import annotations

import array
import random

import numpy as np
import torch


# -- random states ----------------------------------------------------------------------

def capture_globals() -> dict:
    """This process's global random states (torch CPU, `random`, numpy's legacy global), in
    a form that is cheap to pickle (bytes, not tensors: tensors would cross the result queue
    through shared memory)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, words, gauss = random.getstate()
    return {"torch": torch.get_rng_state().numpy().tobytes(),
            "random": (version, array.array("I", words).tobytes(), gauss),
            "numpy": (name, keys.tobytes(), int(pos), int(has_gauss), float(cached))}


def restore_globals(states: dict) -> None:
    torch.set_rng_state(torch.frombuffer(bytearray(states["torch"]), dtype=torch.uint8))
    version, words, gauss = states["random"]
    random.setstate((version, tuple(array.array("I", words)), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.frombuffer(keys, dtype=np.uint32).copy(), pos, has_gauss,
                         cached))


def globals_saved(states: dict | None):
    """`capture_globals()` as plain values and tensors (what `torch.load` loads with
    weights_only=True)."""
    if states is None:
        return None
    version, words, gauss = states["random"]
    name, keys, pos, has_gauss, cached = states["numpy"]
    return {"torch": torch.frombuffer(bytearray(states["torch"]), dtype=torch.uint8),
            "random": (version, torch.frombuffer(bytearray(words), dtype=torch.int32), gauss),
            "numpy": (name, torch.frombuffer(bytearray(keys), dtype=torch.uint8), pos,
                      has_gauss, cached)}


def globals_loaded(saved) -> dict | None:
    if saved is None:
        return None
    version, words, gauss = saved["random"]
    name, keys, pos, has_gauss, cached = saved["numpy"]
    return {"torch": saved["torch"].numpy().tobytes(),
            "random": (version, words.numpy().tobytes(), gauss),
            "numpy": (name, keys.numpy().tobytes(), pos, has_gauss, cached)}


# -- stateful objects (torchdata's Stateful protocol) -----------------------------------

def is_stateful(obj) -> bool:
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


def base_fetcher(producer):
    """The dataset fetcher under a producer's wrappers (None for the native image path)."""
    fetcher = getattr(producer, "fetcher", None)
    while hasattr(fetcher, "fetcher"):
        fetcher = fetcher.fetcher
    return fetcher


# -- producer side (a worker, or the main process with num_workers=0) -------------------

def producer_snapshot(dataset, producer, batches: int, last_index) -> dict:
    """The state of one producer after `batches` fetches this epoch: its random states, the
    dataset's and its iterator's state_dict (when they have one), what replaying needs."""
    snapshot = {"rng": capture_globals(), "batches": batches,
                "index": None, "dataset": None, "iterator": None, "ended": False}
    if is_stateful(dataset):
        snapshot["dataset"] = dataset.state_dict()
    fetcher = base_fetcher(producer)
    if fetcher is not None and hasattr(fetcher, "iterator"):  # an IterableDataset
        snapshot["index"] = last_index
        snapshot["ended"] = fetcher.ended
        if fetcher.iterator is not dataset and is_stateful(fetcher.iterator):
            snapshot["iterator"] = fetcher.iterator.state_dict()
    return snapshot


def resume_dataset(dataset, snapshot: dict | None) -> None:
    """Restore a dataset's own state (before its iterator is made, as torchdata does)."""
    if snapshot is not None and snapshot["dataset"] is not None:
        if not is_stateful(dataset):
            raise ValueError("the saved state holds a dataset state_dict, but this loader's "
                             "dataset has no load_state_dict")
        dataset.load_state_dict(snapshot["dataset"])


def resume_producer(dataset, producer, snapshot: dict | None) -> None:
    """Bring a freshly made producer to `snapshot`: an IterableDataset's iterator gets its
    state_dict, or, when neither it nor the dataset has one, is replayed by fetching the
    batches this producer had fetched (torchdata fast-forwards the same way); then the random
    states are set to those after the last batch delivered."""
    if snapshot is None:
        return
    fetcher = base_fetcher(producer)
    if fetcher is not None and hasattr(fetcher, "iterator"):
        if snapshot["iterator"] is not None:
            fetcher.iterator.load_state_dict(snapshot["iterator"])
            fetcher.ended = snapshot["ended"]
        elif snapshot["dataset"] is None:
            _replay_fetches(producer, snapshot["batches"], snapshot["index"])
        else:
            fetcher.ended = snapshot["ended"]
    if snapshot["rng"] is not None:
        restore_globals(snapshot["rng"])


def _replay_fetches(producer, batches: int, index) -> None:
    fetcher = producer.fetcher
    for _ in range(batches):
        try:
            fetcher.fetch(index)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001 - a batch that failed then fails again: skip it
            pass


def attach(result, snapshot: dict) -> None:
    """Send `snapshot` with a worker's result (a Produced or a WorkerError)."""
    result.resume_snapshot = snapshot


def attached(result):
    return getattr(result, "resume_snapshot", None)


def snapshot_saved(snapshot):
    """A snapshot in the form a state_dict holds (random states as tensors)."""
    if snapshot is None:
        return None
    saved = dict(snapshot)
    saved["rng"] = globals_saved(snapshot["rng"])
    return saved


def snapshot_loaded(saved):
    """`snapshot_saved`'s inverse."""
    if saved is None:
        return None
    snapshot = dict(saved)
    snapshot["rng"] = globals_loaded(saved["rng"])
    return snapshot
