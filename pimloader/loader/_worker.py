"""The worker process: fetch the batches it is sent, write them into its slots, report back.

Protocol (one index queue per worker, one result queue shared by all):
  main -> worker   (send_idx, index)          produce this batch
                   ResumeIteration(seed)       a new epoch of persistent workers
                   None                        exit (after done_event, skip all else)
  worker -> main   (send_idx, Produced)        a batch (a SlotBatch or collated data)
                   (send_idx, WorkerError)     the batch failed; re-raised in the main process
                   (send_idx, IterableEnd)     this worker's IterableDataset is exhausted
                   (ResumeIteration, snapshot) acknowledges a ResumeIteration
A batch (or its error) carries the worker's state after making it (_resume.attach): the
main process keeps the one of the last batch it delivers from each worker, for state_dict().
Look-ahead: having taken a batch, the worker hints it to its producer (`prefetch`); where
that hint went to a source that fetches ahead (tar shards over HTTP: else nothing more is
done), it also takes the next message early, keeps it to handle next, in order, as if it
were read then (a None or a ResumeIteration included) and, when it is a batch, hints it too:
the source fetches the next batch while this one is computed, after this one's members. The
main process sends that message as it receives the worker's batch before (about
prefetch_factor batches are queued per worker), often while this one is being made: a
producer that can (the image producer, between chunks of a batch) asks again through
`look_ahead` (ProducerContext), and then the worker takes only what has come when a batch
starts; for others it waits up to LOOK_AHEAD_WAIT for it there.
Seeding, `get_worker_info()` and the handling of `worker_init_fn` follow torch's worker loop
so that a dataset sees exactly what it would see under torch's DataLoader.
"""
from __future__ import annotations

import os
import queue
import random
import time
from dataclasses import dataclass

import torch
from torch.utils.data import IterDataPipe
from torch.utils.data._utils import worker as torch_worker
from torch.utils.data.graph_settings import apply_random_seed

from pimloader import decode
from pimloader.errors import TOO_MANY_OPEN_FILES, WorkerError

from ._snapshots import attach, producer_snapshot, resume_dataset, resume_producer
from .arena import ArenaWriter, set_current as set_current_arena
from .produce import ProducerContext, make_producer
from .resources import ProcessResources
from .slots import SlotBatch, SlotWriter

STATUS_CHECK_INTERVAL = 0.5
LOOK_AHEAD_WAIT = 0.01     # seconds a worker whose source fetches ahead waits for the next
_NONE_WAITING = object()   # no message was waiting behind the batch taken


@dataclass(frozen=True)
class ResumeIteration:
    seed: int | None = None


@dataclass(frozen=True)
class IterableEnd:
    worker_id: int


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs, fixed for the worker's lifetime (picklable for spawn)."""

    is_iterable: bool
    auto_collation: bool
    collate_fn: object
    drop_last: bool
    base_seed: int
    init_fn: object
    worker_id: int
    num_workers: int
    shared_seed: int | None
    pipeline: object = None   # the loader's (tasks.pipeline_for; None: torch's path)
    on_error: str = "raise"   # the loader's: "skip" drops bad samples (bad_samples.py)
    resume: object = None   # the worker's saved snapshot (_resume) when resuming mid-epoch
    # the decoders' pixel limit in the main process when the epoch started (a spawned
    # worker would otherwise start from Pillow's default); "inherit": leave it as it is
    max_image_pixels: object = "inherit"
    max_audio_samples: object = "inherit"   # the same for audio (decode.MAX_AUDIO_SAMPLES)


def _seed_like_torch(base_seed: int, worker_id: int) -> int:
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    import numpy as np
    np.random.seed(torch_worker._generate_state(base_seed, worker_id))
    return seed


def _where(config: WorkerConfig, doing: str) -> str:
    return f"in PIMDataLoader worker {config.worker_id} (pid {os.getpid()}) {doing}"


class _Worker:
    def __init__(self, config: WorkerConfig, dataset, flags: torch.Tensor,
                 inherited_slots: list, arena: tuple | None = None) -> None:
        self.config = config
        self.dataset = dataset
        self.shared_rng = torch.Generator()
        self.writer = SlotWriter(config.worker_id, flags, _allocate_shared, inherited_slots)
        self.arena = None  # the output arena (arena.py) of collated batches, if any
        if arena is not None:
            self.arena = ArenaWriter(config.worker_id, arena[0], _allocate_shared, arena[1])
        set_current_arena(self.arena)
        self.producer = None
        self.resources = ProcessResources()  # this worker's own (DPU sets), closed as it exits
        self.pending_error: WorkerError | None = None
        self.iteration_end = False
        self.fetches, self.last_index = 0, None  # this epoch's, for state snapshots
        self.index_queue = None                # set by worker_loop: where messages come from
        self.waiting = _NONE_WAITING           # the message after the current one, taken early
        self.fetching_ahead = False            # the last hint went to a source fetching ahead
        self.asked_mid_batch = False           # the producer calls look_ahead while it works

    def start(self) -> None:
        config = self.config
        seed = _seed_like_torch(config.base_seed, config.worker_id)
        self._reseed_datapipe(config.shared_seed)
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=config.worker_id, num_workers=config.num_workers, seed=seed,
            dataset=self.dataset)
        if config.max_image_pixels != "inherit":  # before worker_init_fn, which may change it
            from PIL import Image
            Image.MAX_IMAGE_PIXELS = config.max_image_pixels
        if config.max_audio_samples != "inherit":
            decode.MAX_AUDIO_SAMPLES = config.max_audio_samples
        try:
            if config.init_fn is not None:
                config.init_fn(config.worker_id)
            resume_dataset(self.dataset, config.resume)
            self._new_producer()
        except Exception:
            self.pending_error = WorkerError(_where(config, "while starting (worker_init_fn)"))
            return
        try:
            resume_producer(self.dataset, self.producer, config.resume)
            if config.resume is not None:
                self.fetches, self.last_index = config.resume["batches"], config.resume["index"]
        except Exception:
            self.pending_error = WorkerError(_where(config, "while resuming its saved state"))

    def _reseed_datapipe(self, shared_seed) -> None:
        if isinstance(self.dataset, IterDataPipe):
            self.shared_rng.manual_seed(shared_seed)
            self.dataset = apply_random_seed(self.dataset, self.shared_rng)

    def _new_producer(self) -> None:
        config = self.config
        self.producer = make_producer(ProducerContext(
            self.dataset, config.is_iterable, config.auto_collation, config.collate_fn,
            config.drop_last, self.writer, self.resources, config.on_error,
            look_ahead=self.look_ahead), config.pipeline)

    def resume(self, seed) -> None:
        self.iteration_end = False
        self.fetches, self.last_index = 0, None
        self._reseed_datapipe(seed)
        try:
            self._new_producer()
            self.pending_error = None
        except Exception:
            self.pending_error = WorkerError(_where(self.config, "while restarting iteration"))

    def close(self) -> None:
        """Free what the worker holds: its producer, then its resources (DPU sets)."""
        self.producer = None
        try:
            self.resources.close()
        except Exception:  # exiting anyway: a DPU set that fails to close is freed with us
            pass

    def hint(self, index) -> bool:
        """Tell the producer that batch `index` comes soon (a hint: its errors are left to
        the batch's own reads); whether it went to a source that fetches ahead."""
        prefetch = getattr(self.producer, "prefetch", None)
        if prefetch is None or self.pending_error is not None:
            return False
        try:
            return bool(prefetch(index))
        except Exception:
            return False

    def look_ahead(self) -> None:
        """The producer's call while it makes a batch: the next message, if it has come."""
        self.asked_mid_batch = True
        self.take_next(0.0)

    def take_next(self, wait: float) -> None:
        """Where the source fetches ahead: take the next message if it has come (within
        `wait` seconds), keep it for the loop and hint its batch, after the current one."""
        if not self.fetching_ahead or self.waiting is not _NONE_WAITING or \
                self.index_queue is None:
            return
        try:
            message = self.index_queue.get(timeout=wait) if wait else \
                self.index_queue.get_nowait()
        except queue.Empty:
            return
        self.waiting = message
        if isinstance(message, tuple):
            self.hint(message[1])

    def next_waiting(self):
        """The message taken early (_NONE_WAITING: none), now the loop's to handle."""
        message, self.waiting = self.waiting, _NONE_WAITING
        return message

    def handle(self, index):
        if self.pending_error is not None:
            return self.pending_error  # every batch fails until a restart succeeds
        self.fetches, self.last_index = self.fetches + 1, index
        try:
            return self._produce(index)
        except StopIteration:
            if self.config.is_iterable:
                self.iteration_end = True
                return IterableEnd(self.config.worker_id)
            return WorkerError(_where(self.config, f"while fetching {self.producer.current}"))
        except Exception:
            return WorkerError(_where(self.config, f"while fetching {self.producer.current}"))

    def _produce(self, index):
        """The producer's batch; a collated one with its tensors in the output arena."""
        if self.arena is None:
            return self.producer.produce(index)
        self.arena.begin()
        try:
            produced = self.producer.produce(index)
            if not isinstance(produced.data, SlotBatch):
                start = time.perf_counter()
                produced.data = self.arena.pack(produced.data)
                produced.write_s += time.perf_counter() - start
            return produced
        finally:
            self.arena.abandon()  # what pack did not take (a failed batch, a slot batch)

    def with_snapshot(self, result):
        """`result` carrying this worker's state after it (none after a failed start)."""
        if self.pending_error is None and not isinstance(result, IterableEnd):
            attach(result, self.epoch_snapshot())
        return result

    def epoch_snapshot(self):
        """This worker's state now; a dataset whose state_dict() fails makes the loader's
        state_dict() raise, not the batch (None after a failed start or restart)."""
        if self.pending_error is not None:
            return None
        try:
            return self.snapshot()
        except Exception:
            return {"worker_id": self.config.worker_id, "error": WorkerError(
                _where(self.config, "while taking its dataset's state_dict"))}

    def snapshot(self) -> dict:
        snapshot = producer_snapshot(self.dataset, self.producer, self.fetches,
                                     self.last_index)
        snapshot["worker_id"] = self.config.worker_id
        return snapshot


def _allocate_shared(nbytes: int) -> torch.Tensor:
    """A new slot. Each slot holds a file descriptor in the worker and in the main
    process, so a user keeping many batches can exhaust them on either side: here the
    failure says what torch's DataLoader says when the main process runs out."""
    try:
        return torch.empty(nbytes, dtype=torch.uint8).share_memory_()
    except RuntimeError as error:
        if "Too many open files" not in str(error):
            raise
        raise RuntimeError(f"{TOO_MANY_OPEN_FILES} (a new batch slot: {error})") from error


def _look_ahead(worker: _Worker, index) -> None:
    """Hint batch `index` to the producer; where the hint goes to a source that fetches
    ahead, take the message behind it (waiting up to LOOK_AHEAD_WAIT for it unless the
    producer asks again while it works) and hint its batch too, after this one."""
    worker.fetching_ahead = worker.hint(index)
    worker.take_next(0.0 if worker.asked_mid_batch else LOOK_AHEAD_WAIT)


def worker_loop(config: WorkerConfig, dataset_holder: list, index_queue, result_queue,
                done_event, flags: torch.Tensor, inherited_slots: list,
                arena: tuple | None = None) -> None:
    parent = os.getppid()
    worker = None
    try:
        torch._C._set_worker_signal_handlers()
        torch.set_num_threads(1)
        worker = _Worker(config, dataset_holder.pop(), flags, inherited_slots, arena)
        worker.index_queue = index_queue
        worker.start()
        while os.getppid() == parent:
            message = worker.next_waiting()
            if message is _NONE_WAITING:
                try:
                    message = index_queue.get(timeout=STATUS_CHECK_INTERVAL)
                except queue.Empty:
                    if done_event.is_set():
                        break  # shutting down, even if the final None cannot reach us
                    continue
            if message is None:
                break
            if isinstance(message, ResumeIteration):
                worker.resume(message.seed)
                result_queue.put((message, worker.epoch_snapshot()))
                continue
            if worker.iteration_end or done_event.is_set():
                continue
            send_idx, index = message
            _look_ahead(worker, index)
            result_queue.put((send_idx, worker.with_snapshot(worker.handle(index))))
            del message, index
    except KeyboardInterrupt:
        pass
    finally:
        torch_worker._worker_info = None
        if worker is not None:
            worker.close()
        if done_event.is_set():
            result_queue.cancel_join_thread()  # the loader is shutting down: don't flush
        result_queue.close()  # otherwise flush, releasing the lock all workers write under
