"""Mid-epoch resume: `PIMDataLoader.state_dict()` / `load_state_dict()`.

The semantics are those of torchdata's `StatefulDataLoader` (see docs/loader.md, "Resuming
mid-epoch"): a state taken between batches describes the position after the batches the user
has received; loaded into a loader before it is iterated, it makes the next `iter()` continue
from there. Beyond torchdata, the random state of every producer (each worker, or the main
process with num_workers=0) is saved as it was after the last batch the user received from
it, so random transforms continue with the same draws.

How the parts fit:

- `EpochTracker` (main process, one per epoch): counts the index batches drawn from the
  sampler, remembers the random state the sampler drew from, the tasks sent to workers and
  not yet delivered, the round-robin position, and per worker the snapshot that came with
  the last batch delivered from it. Its `state_dict()` needs no worker: it can be taken at
  any time, also after the iterator has shut its workers down.
- Workers attach a snapshot (`_snapshots.producer_snapshot`) to each batch they send, and to
  their acknowledgement of a new epoch (persistent workers); a resumed worker applies its
  saved snapshot when it starts (`resume_dataset`, then `resume_producer`).
- `Resume` (a loaded state, checked against the loader) continues the iteration in a fresh
  iterator: base seed, sampler (its own state_dict, or replayed from the recorded random
  state and fast-forwarded), tasks in flight re-sent to the workers that had them, the
  round-robin position, the random states.
"""
from __future__ import annotations

import copy
import weakref

import torch
from torch.utils.data import BatchSampler, IterDataPipe, MapDataPipe
from torch.utils.data.dataloader import _DatasetKind, _InfiniteConstantSampler

from ._snapshots import (attached, capture_globals, globals_loaded, globals_saved, is_stateful,
                         producer_snapshot, restore_globals, resume_dataset, resume_producer,
                         snapshot_loaded, snapshot_saved)

VERSION = 1
FORMAT = "pimloader.PIMDataLoader"


# -- the random states sampling draws from ------------------------------------------------

def _generators(loader) -> list:
    """The torch.Generators a loader's sampling can draw from: the loader's own `generator`
    (first, None when it has none) and those its sampler or batch sampler hold."""
    found = [loader.generator]
    samplers = [loader._index_sampler, getattr(loader._index_sampler, "sampler", None)]
    for sampler in samplers:
        generator = getattr(sampler, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def _capture_rngs(loader) -> dict:
    return {"globals": capture_globals(),
            "generators": [None if g is None else g.get_state() for g in _generators(loader)]}


def _restore_rngs(loader, states: dict, globals_too: bool = True) -> None:
    if globals_too:
        restore_globals(states["globals"])
    for generator, state in zip(_generators(loader), states["generators"]):
        if generator is not None and state is not None:
            generator.set_state(state)


def _rngs_saved(states):
    if states is None:
        return None
    return {"globals": globals_saved(states["globals"]),
            "generators": [None if s is None else s.clone() for s in states["generators"]]}


def _rngs_loaded(saved):
    if saved is None:
        return None
    return {"globals": globals_loaded(saved["globals"]), "generators": list(saved["generators"])}


def _stateful_sampler(index_sampler):
    """The object whose state_dict describes the sampling position: the index sampler when it
    has one, else the sampler inside torch's own BatchSampler (which holds no state of its
    own between batches), else None (the sampler is replayed and fast-forwarded)."""
    if is_stateful(index_sampler):
        return index_sampler
    if type(index_sampler) is BatchSampler and is_stateful(index_sampler.sampler):
        return index_sampler.sampler
    return None


# -- main side --------------------------------------------------------------------------

class WorkerCycle:
    """itertools.cycle(range(n)) whose position can be read and set."""

    def __init__(self, n: int, position: int = 0) -> None:
        self.n, self.position = n, position

    def __iter__(self):
        return self

    def __next__(self) -> int:
        worker_id = self.position
        self.position = (self.position + 1) % self.n
        return worker_id


class _CountingSamplerIter:
    """The sampler's iterator, counting the index batches drawn and recording the random
    state the first one is drawn from (torch's samplers draw their permutation then)."""

    def __init__(self, iterator, tracker: "EpochTracker") -> None:
        self.iterator = iterator
        self.tracker = tracker

    def __iter__(self):
        return self

    def __next__(self):
        tracker = self.tracker
        if tracker.rng_at_first_draw is None and tracker.drawn == 0:
            tracker.rng_at_first_draw = _capture_rngs(tracker.loader_ref)
        try:
            index = next(self.iterator)
        except StopIteration:
            tracker.observe("ended")
            raise
        tracker.drawn += 1
        tracker.last_drawn = index
        return index


class EpochTracker:
    """What the main process knows of one epoch's position (see the module docstring). It
    keeps no strong reference to its iterator, so that a dropped iterator still shuts its
    workers down at once; the tasks in flight are read from the live iterator, or, once it
    has shut down, as they were then (`freeze`)."""

    def __init__(self, loader, num_workers: int) -> None:
        self.loader_ref = _LoaderView(loader)
        self.num_workers = num_workers
        self.persistent = bool(loader.persistent_workers) and num_workers > 0
        self.iterable = loader._dataset_kind == _DatasetKind.Iterable
        self.rng_at_iter = _capture_rngs(loader)  # before iter(sampler): eager samplers
        self.rng_at_first_draw = None
        self.drawn = 0
        self.last_drawn = None
        self.delivered = 0
        self.finished = False
        self.base_seed = None
        self.shared_seed = None
        self.sent: dict[int, tuple] = {}
        self.prune_at = 64
        self.iterator = None      # weakref to a multi-process iterator
        self.frozen = None        # its undelivered task numbers once it has shut down
        self.cycle = None
        self.workers: list = [None] * num_workers
        self.main = None          # num_workers=0: (dataset, producer)
        self.fetches = 0          # num_workers=0: batches fetched this epoch
        self.last_index = None
        self.pipeline = getattr(loader, "_pipeline", None)
        self.stats_of = loader._state.history.__getitem__
        self.observer = None  # the pipeline's epoch observer (Pipeline.epoch_observer)

    def attach(self, iterator) -> None:
        """Follow an iterator whose `_reset` has made its sampler iterator."""
        observer_of = getattr(self.pipeline, "epoch_observer", None)  # a Pipeline's, if any
        if observer_of is not None:
            self.observer = observer_of(lambda: self.stats_of(-1))
        self.base_seed = iterator._base_seed
        self.shared_seed = iterator._shared_seed
        iterator._sampler_iter = _CountingSamplerIter(iterator._sampler_iter, self)
        if self.num_workers:
            self.iterator = weakref.ref(iterator)
            self.cycle = iterator._worker_queue_idx_cycle
        else:
            self.main = (iterator._dataset, None)

    # events
    def observe(self, event: str, *args) -> None:
        if self.observer is not None:
            getattr(self.observer, event)(*args)

    def sent_task(self, send_idx: int, worker_id: int, index) -> None:
        """Called before the task is put on the worker's queue."""
        self.observe("announced", index)
        self.sent[send_idx] = (worker_id, index)
        if len(self.sent) > self.prune_at:  # forget delivered tasks, now and then
            undelivered = set(self._undelivered())
            self.sent = {k: v for k, v in self.sent.items() if k in undelivered}
            self.prune_at = 2 * len(self.sent) + 64

    def delivered_from(self, worker_id: int, data, ok: bool) -> None:
        snapshot = attached(data)
        if snapshot is not None:
            self.workers[worker_id] = snapshot
        self.delivered += ok
        self.observe("delivered")

    def epoch_started(self, snapshot: dict) -> None:
        """A persistent worker's state at the start of a new epoch."""
        self.workers[snapshot["worker_id"]] = snapshot

    def fetched(self, index) -> None:
        self.observe("announced", index)
        self.fetches += 1
        self.last_index = index

    def freeze(self, task_numbers) -> None:
        """The iterator shuts down: keep its undelivered task numbers."""
        if self.frozen is None:
            self.frozen = sorted(task_numbers)
            self.iterator = None

    def _undelivered(self) -> list:
        if self.frozen is not None:
            return self.frozen
        iterator = self.iterator() if self.iterator is not None else None
        return sorted(iterator._task_info) if iterator is not None else []

    # the state
    def state_dict(self) -> dict:
        loader = self.loader_ref
        sampler = _stateful_sampler(loader._index_sampler)
        state = {
            "version": VERSION, "format": FORMAT,
            "num_workers": self.num_workers, "persistent_workers": self.persistent,
            "dataset_kind": "iterable" if self.iterable else "map",
            "finished": self.finished, "batches_yielded": self.delivered,
            "base_seed": self.base_seed, "shared_seed": self.shared_seed,
            "sampler": {
                "batches_drawn": self.drawn,
                "state": sampler.state_dict() if sampler is not None else None,
                "last_drawn": self.last_drawn,
                "rng_at_iter": _rngs_saved(self.rng_at_iter),
                "rng_at_first_draw": _rngs_saved(self.rng_at_first_draw)},
            "generators": [None if g is None else g.get_state() for g in _generators(loader)],
            "pending": [], "next_worker": 0, "workers": [], "main": None,
        }
        if self.num_workers == 0:
            dataset, producer = self.main
            snapshot = producer_snapshot(dataset, producer, self.fetches, self.last_index)
            state["main"] = snapshot_saved(snapshot)
        else:
            for snapshot in self.workers:
                if snapshot is not None and "error" in snapshot:
                    snapshot["error"].reraise()
            state["pending"] = [list(self.sent[k]) for k in self._undelivered() if k in self.sent]
            state["next_worker"] = self.cycle.position if self.cycle is not None else 0
            state["workers"] = [snapshot_saved(s) for s in self.workers]
        return copy.deepcopy(state)  # the caller's, whatever happens to the loader next


class _LoaderView:
    """The parts of a loader a tracker reads, without keeping the loader (or its workers)."""

    def __init__(self, loader) -> None:
        self.generator = loader.generator
        self._index_sampler = loader._index_sampler


# -- loading ----------------------------------------------------------------------------

_KEYS = ("version", "format", "num_workers", "persistent_workers", "dataset_kind", "finished",
         "batches_yielded", "base_seed", "shared_seed", "sampler", "generators", "pending",
         "next_worker", "workers", "main")


def check_loadable(loader, state: dict) -> None:
    """Refuse, with a clear error, a state this loader cannot continue from."""
    if not isinstance(state, dict):
        raise TypeError(f"load_state_dict expects the dict state_dict() returned, got "
                        f"{type(state).__name__}")
    if state.get("format") != FORMAT:
        raise ValueError("this state_dict was not made by PIMDataLoader.state_dict() "
                         "(torchdata's StatefulDataLoader states are not interchangeable)")
    if state.get("version") != VERSION:
        raise ValueError(f"PIMDataLoader state_dict version {state.get('version')!r} is not "
                         f"supported (this pimloader reads version {VERSION})")
    missing = [key for key in _KEYS if key not in state]
    if missing:
        raise ValueError(f"PIMDataLoader state_dict lacks {missing}")
    check_supported(loader)
    if state["num_workers"] != loader.num_workers:
        raise ValueError(
            f"the state was saved with num_workers={state['num_workers']} and this loader has "
            f"num_workers={loader.num_workers}: each worker's random and dataset state belongs "
            f"to its worker, so a state resumes only with the same number of workers")
    kind = "iterable" if loader._dataset_kind == _DatasetKind.Iterable else "map"
    if state["dataset_kind"] != kind:
        raise ValueError(f"the state was saved over a {state['dataset_kind']}-style dataset "
                         f"and this loader's dataset is {kind}-style")
    if len(state["generators"]) != len(_generators(loader)):
        raise ValueError("the state's sampler holds a different number of torch.Generators "
                         "than this loader's sampler: not the same sampler")


def check_supported(loader) -> None:
    if isinstance(loader.dataset, (IterDataPipe, MapDataPipe)):
        raise ValueError("state_dict()/load_state_dict() do not support DataPipes (deprecated "
                         "in torch); use a Dataset or IterableDataset")


class Resume:
    """A loaded state, continued by the next iterator the loader makes. The iterators call,
    in this order: before_iterator, (their base class draws its seeds), seeds,
    (workers start with worker_snapshot(i)), continue_sampling, continue_tasks."""

    def __init__(self, loader, state: dict) -> None:
        self.state = state
        self.mid_epoch = not state["finished"]
        self.sampler = state["sampler"]
        self.workers = [snapshot_loaded(s) for s in state["workers"]]
        self.main = snapshot_loaded(state["main"])
        self.rng_at_iter = _rngs_loaded(self.sampler["rng_at_iter"])
        self.rng_at_first_draw = _rngs_loaded(self.sampler["rng_at_first_draw"])
        # a persistent iterator's next epoch keeps its workers (their seeds and states); any
        # other finished epoch is followed by a fresh one
        self.keeps_workers = self.mid_epoch or (state["persistent_workers"] and
                                                bool(loader.persistent_workers))

    def _saved_generators(self) -> dict:
        return {"globals": None, "generators": self.state["generators"]}

    def before_iterator(self, loader) -> dict:
        """Set the sampling generators as they were when the state was taken (a new epoch
        then draws its seeds from them as the saved loader would have), and with
        num_workers=0 the dataset's state and, after a finished epoch, the global random
        states; return the random states as they are now, to undo the iterator's own draws."""
        _restore_rngs(loader, self._saved_generators(), globals_too=False)
        if self.main is not None:
            resume_dataset(loader.dataset, self.main)
            if not self.mid_epoch:
                restore_globals(self.main["rng"])
        return _capture_rngs(loader)

    def seeds(self, iterator, loader, before: dict) -> None:
        """The iterator's seeds as saved (workers seed from them), undoing its own draws."""
        if self.keeps_workers:
            iterator._base_seed = self.state["base_seed"]
            iterator._shared_seed = self.state["shared_seed"]
            _restore_rngs(loader, before)

    def worker_snapshot(self, worker_id: int):
        return self.workers[worker_id] if self.keeps_workers else None

    def continue_sampling(self, iterator, loader, tracker: EpochTracker, before: dict) -> None:
        """Continue the sampler where the saved one was (its state_dict, or replayed and
        fast-forwarded), then set the global random states as they were before the iterator
        was made (with workers) or as saved (num_workers=0)."""
        if self.keeps_workers:
            tracker.workers = list(self.workers)
        if not self.mid_epoch:
            return
        drawn = self.sampler["batches_drawn"]
        raw = iterator._sampler_iter.iterator  # made by _reset, wrapped by tracker.attach
        stateful = _stateful_sampler(loader._index_sampler)
        if isinstance(loader._index_sampler, _InfiniteConstantSampler):
            pass
        elif stateful is not None:
            stateful.load_state_dict(self.sampler["state"])
            raw = iter(loader._index_sampler)
        elif drawn:
            raw = self._replayed(loader, drawn)
        if stateful is not None or not drawn:
            # nothing replayed: the generators as saved (a replay leaves them as the saved
            # sampler had: a sampler may draw again later, e.g. RandomSampler when exhausted)
            _restore_rngs(loader, self._saved_generators(), globals_too=False)
        tracker.rng_at_iter = self.rng_at_iter
        tracker.rng_at_first_draw = self.rng_at_first_draw
        tracker.drawn = drawn
        tracker.last_drawn = self.sampler["last_drawn"]
        tracker.delivered = self.state["batches_yielded"]
        iterator._sampler_iter = _CountingSamplerIter(raw, tracker)
        iterator._num_yielded = self.state["batches_yielded"]
        restore_globals(self.main["rng"] if self.main is not None else before["globals"])

    def _replayed(self, loader, drawn: int):
        """The sampler's iterator remade from the random states it was made and first drew
        from, with the `drawn` index batches it had given skipped; checked on the last one."""
        _restore_rngs(loader, self.rng_at_iter)
        iterator = iter(loader._index_sampler)
        if self.rng_at_first_draw is not None:
            _restore_rngs(loader, self.rng_at_first_draw)
        last = None
        for count in range(drawn):
            try:
                last = next(iterator)
            except StopIteration:
                raise ValueError(
                    f"the sampler gives {count} batches of indices this epoch, fewer than the "
                    f"{drawn} the saved state had drawn: not the same sampler or dataset") \
                    from None
        if not _same(last, self.sampler["last_drawn"]):
            raise ValueError(
                "the sampler cannot be fast-forwarded: replayed from the random state it "
                "started the epoch from, it does not give the indices it gave before the "
                "state was saved (it draws from a random state pimloader does not track, or "
                "the dataset differs); give the sampler state_dict() and load_state_dict()")
        return iterator

    def continue_tasks(self, iterator, send) -> None:
        """Send the tasks in flight at save time again, each to the worker that had it, then
        go on round-robin from where the saved iterator was."""
        if not self.mid_epoch:
            return
        for worker_id, index in self.state["pending"]:
            send(worker_id, index)
        iterator._worker_queue_idx_cycle.position = self.state["next_worker"]

    def continue_producer(self, iterator, tracker: EpochTracker) -> None:
        """num_workers=0: the dataset iterator and the fetch count of the main process (the
        dataset's own state was loaded before its iterator was made)."""
        if not self.mid_epoch:
            return
        resume_producer(iterator._dataset, iterator._producer, dict(self.main, rng=None))
        tracker.fetches = self.main["batches"]
        tracker.last_index = self.main["index"]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# -- the loader's methods ---------------------------------------------------------------

def loader_state_dict(loader) -> dict:
    check_supported(loader)
    pending = loader.__dict__.get(PENDING)
    if pending is not None:  # loaded and not yet iterated: that is still the position
        return copy.deepcopy(pending.state)
    tracker = loader._state.tracker
    if tracker is None:
        return _unstarted_state(loader)
    return tracker.state_dict()


def load_loader_state(loader, state: dict) -> None:
    if state == {}:  # torchdata's "nothing saved"
        loader.__dict__.pop(PENDING, None)
        return
    check_loadable(loader, state)
    iterator, loader._iterator = loader._iterator, None
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()  # persistent workers: the next iter() starts from `state`
    loader.__dict__[PENDING] = Resume(loader, copy.deepcopy(state))


def take_pending(loader):
    """The loaded state the next iterator continues from (once), or None."""
    return loader.__dict__.pop(PENDING, None)


PENDING = "_pimloader_resume"


def _unstarted_state(loader) -> dict:
    """Before the first iter(): the next iter() starts an epoch, drawing from the
    generators as they are now (and with num_workers=0, the global random states)."""
    tracker = EpochTracker(loader, loader.num_workers)
    tracker.finished = True
    tracker.persistent = False
    if loader.num_workers == 0:
        tracker.main = (loader.dataset, None)
    else:
        tracker.freeze([])
    return tracker.state_dict()
