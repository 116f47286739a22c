"""num_workers>0: worker processes fill shared slots; the main process lends them out.

The bookkeeping (which batch goes to which worker, the order batches are returned in,
how IterableDataset workers end, how persistent workers start a new epoch) is that of
torch's `_MultiProcessingDataLoaderIter`, so batches come in the same order. What differs
is the data path (slots instead of per-batch shared tensors) and how failure is noticed:
the main process waits on the result queue *and* on every worker's process sentinel, so a
worker that dies is reported at once, by pid and signal, instead of after a poll interval.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import signal
import tempfile
import time
import warnings
from multiprocessing.connection import wait
from pickle import PicklingError

import torch
from PIL import Image
from torch.utils.data import IterDataPipe, MapDataPipe
from torch.utils.data import _utils as torch_utils
from torch.utils.data.dataloader import (
    _BaseDataLoaderIter, _DatasetKind, _sharding_worker_init_fn)

from pimloader import decode
from pimloader.errors import TOO_MANY_OPEN_FILES, LoaderTimeoutError, WorkerDiedError, WorkerError
from .produce import Produced, deliver
from ._resume import EpochTracker, WorkerCycle
from .arena import ArenaBatch
from .slots import SlotBatch
from ._worker import IterableEnd, ResumeIteration, WorkerConfig, worker_loop

JOIN_TIMEOUT_S = 5.0


class MultiProcessIter(_BaseDataLoaderIter):
    def __init__(self, loader, state, resume=None) -> None:
        self._resume, self._resume_before = resume, None
        if resume is not None:
            self._resume_before = resume.before_iterator(loader)
        super().__init__(loader)
        if resume is not None:
            resume.seeds(self, loader, self._resume_before)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        if self._num_workers <= 0:
            raise AssertionError("num_workers must be greater than 0 for MultiProcessIter")
        if self._prefetch_factor <= 0:
            raise AssertionError(
                "prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
        self._state = state
        self._workers, self._index_queues = [], []
        context = loader.multiprocessing_context or torch.multiprocessing
        self._result_queue = context.Queue()
        self._done_event = context.Event()
        self._pool = state.take_shared_pool(self._num_workers, self._pin_memory)
        self._shutdown = False
        try:
            self._start_workers(context, loader)
            self._reset(loader, first_iter=True)  # may refuse a loaded state
        except BaseException:
            self._shutdown_workers()
            raise

    def _start_workers(self, context, loader) -> None:
        init_fn = loader.worker_init_fn
        if isinstance(self._dataset, (IterDataPipe, MapDataPipe)):
            init_fn = functools.partial(
                _sharding_worker_init_fn, init_fn, self._world_size, self._rank)
        for worker_id in range(self._num_workers):
            config = WorkerConfig(
                is_iterable=self._dataset_kind == _DatasetKind.Iterable,
                auto_collation=self._auto_collation, collate_fn=self._collate_fn,
                drop_last=self._drop_last, base_seed=self._base_seed, init_fn=init_fn,
                worker_id=worker_id, num_workers=self._num_workers,
                shared_seed=self._shared_seed, pipeline=loader._pipeline,
                on_error=loader._on_error,
                resume=self._resume and self._resume.worker_snapshot(worker_id),
                max_image_pixels=Image.MAX_IMAGE_PIXELS,
                max_audio_samples=decode.MAX_AUDIO_SAMPLES)
            index_queue = context.Queue()
            index_queue.cancel_join_thread()
            process = context.Process(
                target=worker_loop, daemon=True,
                args=(config, [self._dataset], index_queue, self._result_queue,
                      self._done_event, self._pool.flags, self._pool.inherited(worker_id),
                      self._arena_of(worker_id)))
            try:
                process.start()
            except (TypeError, AttributeError, PicklingError):
                warnings.warn(
                    "Got pickle error when attempting to start a worker Process. This might "
                    "be because the worker Process arguments (the dataset, collate_fn, "
                    "worker_init_fn, transform) are not picklable, which the 'spawn' and "
                    "'forkserver' start methods need (Python 3.14+ defaults to "
                    "'forkserver' on Linux). You can also try "
                    "multiprocessing.set_start_method('fork').", stacklevel=3)
                raise
            self._index_queues.append(index_queue)
            self._workers.append(process)

    def _arena_of(self, worker_id: int):
        """(flags, inherited blocks) of a worker's output arena; None for a loader that
        publishes its batches to a coordinated-prep group, which sends collated batches
        by value, not as views of this process's memory."""
        if self._state.publish is not None:
            return None
        return self._pool.arena.flags, self._pool.arena.inherited(worker_id)

    # -- epoch bookkeeping (torch's semantics) ------------------------------------------

    def _reset(self, loader, first_iter=False) -> None:
        tracker = EpochTracker(loader, self._num_workers)
        super()._reset(loader, first_iter)
        self._stats = self._state.begin_epoch()
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info: dict[int, tuple] = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._workers_num_tasks = [0] * self._num_workers
        self._workers_retired = [False] * self._num_workers
        self._sampler_exhausted = False
        self._workers_exited = [False] * self._num_workers
        self._worker_queue_idx_cycle = WorkerCycle(self._num_workers)
        self._tracker = self._state.tracker = tracker
        tracker.attach(self)
        if not first_iter:
            self._resume_workers()
        resume, self._resume = self._resume, None
        if resume is not None:
            resume.continue_sampling(self, loader, tracker, self._resume_before)
            resume.continue_tasks(self, self._send_task)
        for _ in range(self._prefetch_factor * self._num_workers - self._tasks_outstanding):
            self._try_put_index()

    def _resume_workers(self) -> None:
        for index_queue in self._index_queues:
            index_queue.put(ResumeIteration(self._shared_seed))
        acknowledged = 0
        while acknowledged < self._num_workers:
            key, data = self._get_data()
            if isinstance(key, ResumeIteration):
                acknowledged += 1
                if data is not None:
                    self._tracker.epoch_started(data)
            else:
                self._discard(data)

    def _next_data(self):
        start = time.perf_counter()
        try:
            return self._next_in_order()
        except StopIteration:
            self._tracker.finished = True
            self._tracker.observe("finished")
            raise
        finally:
            self._stats.wait_s += time.perf_counter() - start

    def _next_in_order(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info:
                    worker_id = info[0]
                    if len(info) == 2 or self._workers_status[worker_id]:
                        break
                    del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration

            if len(self._task_info[self._rcvd_idx]) == 2:
                worker_id, data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, IterableEnd):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                if not self._in_order:
                    worker_id = self._task_info.pop(idx)[0]
                    return self._process_data(data, worker_id)
                self._task_info[idx] += (data,)
                self._retire_workers()
            else:
                worker_id = self._task_info.pop(idx)[0]
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

    def _try_put_index(self) -> None:
        max_tasks = self._prefetch_factor * self._num_workers
        try:
            index = self._next_index()
        except StopIteration:
            self._sampler_exhausted = True
            self._retire_workers()
            return
        for _ in range(self._num_workers):
            worker_id = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_id]:
                if self._in_order:
                    break
                if self._workers_num_tasks[worker_id] < max_tasks // sum(self._workers_status):
                    break
        else:
            return
        self._send_task(worker_id, index)

    def _send_task(self, worker_id: int, index) -> None:
        self._tracker.sent_task(self._send_idx, worker_id, index)
        self._index_queues[worker_id].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_id,)
        self._workers_num_tasks[worker_id] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data, worker_id: int):
        self._tracker.delivered_from(worker_id, data, not isinstance(data, WorkerError))
        self._workers_num_tasks[worker_id] -= 1
        self._try_put_index()
        self._retire_workers()
        if isinstance(data, WorkerError):
            data.reraise()
        return self._deliver(data)

    def _deliver(self, produced: Produced):
        pin_device = self._pin_memory_device if self._pin_memory else None
        return deliver(produced, self._pool, self._stats, pin_device, self._state.publish)

    def _discard(self, data) -> None:
        if isinstance(data, Produced) and isinstance(data.data, SlotBatch):
            self._pool.discard(data.data)
        elif isinstance(data, Produced) and isinstance(data.data, ArenaBatch):
            self._pool.arena.discard(data.data)

    def _retire_workers(self) -> None:
        """Once the sampler is exhausted, a fresh (non-persistent) worker whose batches have
        all been received is told to exit, so that its exit (tearing down its copy of this
        process's address space: tens of milliseconds for a large process) overlaps the
        last batches rather than following them. Not before: a batch in a new slot carries
        the slot's file descriptor, which its worker must still be alive to hand over."""
        if self._persistent_workers or not self._sampler_exhausted:
            return
        for worker_id in range(self._num_workers):
            if (self._workers_status[worker_id] and not self._workers_retired[worker_id]
                    and not self._owes_results(worker_id)):
                self._index_queues[worker_id].put(None)
                self._workers_retired[worker_id] = True

    def _died(self, ended: list[int]) -> list[int]:
        """Of the workers whose processes ended, those that had no business ending."""
        return [w for w in ended if self._must_live(w)]

    def _must_live(self, worker_id: int) -> bool:
        """A worker must live until it is told to exit and owes no batch."""
        return not self._workers_retired[worker_id] or self._owes_results(worker_id)

    def _owes_results(self, worker_id: int) -> bool:
        return any(len(info) == 1 and info[0] == worker_id for info in self._task_info.values())

    def _mark_worker_as_unavailable(self, worker_id: int) -> None:
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    # -- waiting, with failure detection ------------------------------------------------

    def _get_data(self):
        if self._timeout > 0:
            received = self._wait_for_result(self._timeout)
            if received is None:
                raise LoaderTimeoutError(
                    f"PIMDataLoader timed out after {self._timeout} seconds waiting for "
                    f"batch {self._rcvd_idx} from its workers")
            return received
        while True:
            received = self._wait_for_result(None)
            if received is not None:
                return received

    def _wait_for_result(self, timeout):
        """The next message, or None after `timeout` seconds (None: wait as long as it takes).
        A worker that ends while it still owes batches has died; a retired one that owes
        nothing has just finished."""
        reader = self._result_queue._reader
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sentinels = {self._workers[w].sentinel: w for w in range(self._num_workers)
                         if self._workers_status[w] and not self._workers_exited[w]}
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([reader, *sentinels], remaining)
            if reader in ready:
                return self._receive(sentinels)
            ended = [sentinels[s] for s in ready if s in sentinels]
            dead = self._died(ended)
            if dead:
                self._raise_worker_died(dead)
            if not ended:
                return None
            for worker_id in ended:
                self._workers_exited[worker_id] = True

    def _receive(self, sentinels: dict):
        """One message; a slot's file descriptor handed over by a worker that died since it
        sent the message cannot be received, and that is reported as the worker's death."""
        try:
            return self._result_queue.get()
        except Exception as error:  # what fd passing raises varies: EOFError, OSError, ...
            _raise_if_out_of_file_descriptors(error)
            if not isinstance(error, (EOFError, OSError)):
                raise
            suspects = [s for s, w in sentinels.items() if self._must_live(w)]
            dead = [sentinels[s] for s in wait(suspects, timeout=JOIN_TIMEOUT_S)]
            if not dead:
                raise
            self._raise_worker_died(dead, cause=error)

    def _raise_worker_died(self, worker_ids: list[int], cause=None) -> None:
        reports = [self._death_report(w) for w in worker_ids]
        for worker_id in worker_ids:
            self._workers_status[worker_id] = False
        self._shutdown_workers()
        raise WorkerDiedError(
            " ".join(torch_words for torch_words, _ in reports) + " PIMDataLoader "
            + "; ".join(detail for _, detail in reports)
            + f". The batches {'it was' if len(reports) == 1 else 'they were'} making are "
            "lost; the loader has shut its workers down.") from cause

    def _death_report(self, worker_id: int) -> tuple[str, str]:
        """torch's sentence for a dead worker (code and tests match on it), and ours."""
        process = self._workers[worker_id]
        process.join(timeout=JOIN_TIMEOUT_S)  # it has ended: this waits for its exit status
        return death_report(worker_id, process.pid, process.exitcode)

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown_workers(self) -> None:
        if getattr(self, "_tracker", None) is not None:
            self._tracker.freeze(self._task_info)  # its state outlives the workers
        if self._shutdown or torch_utils.python_exit_status in (True, None):
            return
        self._shutdown = True
        try:
            self._done_event.set()
            for index_queue in self._index_queues:
                index_queue.put(None)
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            for process in self._workers:
                process.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for process in self._workers:
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=JOIN_TIMEOUT_S)
                if process.is_alive():
                    process.kill()
                    process.join()
            for index_queue in self._index_queues:
                index_queue.close()
            self._result_queue.cancel_join_thread()
            self._result_queue.close()
            self._state.return_shared_pool(self._pool)

    def __del__(self) -> None:
        if hasattr(self, "_shutdown"):
            self._shutdown_workers()


_SIGNAL_HINTS = {
    signal.SIGKILL: " (often the kernel's out-of-memory killer)",
    signal.SIGBUS: " (often /dev/shm is too small for the batch slots)",
}


def death_report(worker_id: int, pid: int, code: int | None) -> tuple[str, str]:
    """What to say of worker `worker_id` (`pid`) that ended with exit status `code`:
    torch's own sentence, word for word (built in torch/csrc/DataLoader.cpp, with the C
    library's strsignal(): "DataLoader worker (pid 42) is killed by signal: Segmentation
    fault. "), then pimloader's detail (the worker's number, the signal's name, a hint)."""
    where = f"worker {worker_id} (pid {pid})"
    if code is not None and code < 0:
        number = -code
        try:
            name = signal.Signals(number).name
        except ValueError:  # a real-time signal has no name of its own
            name = f"signal {number}"
        words = signal.strsignal(number) or f"Unknown signal {number}"
        torch_words = f"DataLoader worker (pid {pid}) is killed by signal: {words}."
        if number == signal.SIGBUS:
            torch_words += (" It is possible that dataloader's workers are out of shared "
                            "memory. Please try to raise your shared memory limit.")
        return torch_words, f"{where} was killed by {name}{_SIGNAL_HINTS.get(number, '')}"
    torch_words = (f"DataLoader worker (pid {pid}) exited unexpectedly with exit code "
                   f"{code}. Details are lost due to multiprocessing. Rerunning with "
                   "num_workers=0 may give better error trace.")
    return torch_words, f"{where} exited unexpectedly with exit code {code}"


def _raise_if_out_of_file_descriptors(cause: BaseException) -> None:
    """Receiving a batch fails oddly (EOFError) when the process has no file descriptor
    left for the shared memory it carries; say so, and what to do, as torch does."""
    try:
        with contextlib.ExitStack() as stack:
            for _ in range(10):
                stack.enter_context(tempfile.NamedTemporaryFile())
    except OSError as error:
        if error.errno == errno.EMFILE:
            raise RuntimeError(TOO_MANY_OPEN_FILES) from cause
