"""Coordinated prep: one job of a group prepares the batches, every job reads each of them.

The first job to attach to a group (`PIMDataLoader(share_with=name, share_jobs=N)`, at its
first `iter()`) is the group's *producer*: it runs its loader as usual (its workers write
each batch into a slot) and publishes every batch it is given to the others, the
*consumers*, which start no workers. A consumer receives a slot's memory once (its file
descriptor), then only the slot's number, layout and labels per batch, and lends views over
that memory, as the producer does over its own (docs/loader.md "Coordinated prep").

Releases: a shared array holds one byte per consumer and batch of a window of WINDOW
batches; the producer sets a consumer's byte as it publishes, the consumer clears it when
its user drops the batch. The producer keeps its own reference to a published batch (so its
slot is not refilled) until every consumer has released it, and waits before publishing a
batch while the one WINDOW earlier is still held. A consumer that dies is dropped from the
group (its bytes are ignored from then on) and the others go on; the producer's death or an
error in its epoch reaches every consumer as an exception.
"""
from __future__ import annotations

import mmap
import os
import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data.dataloader import _BaseDataLoaderIter

from pimloader.errors import LoaderTimeoutError, SharedPrepError, WorkerError
from . import _group
from ._pin import register_slot
from .produce import Produced, deliver
from .slots import SlotBatch, SlotPool

WINDOW = 4  # batches published that consumers may hold at once
_POLL_S = 0.002


def attach(name: str, jobs: int, config: dict, timeout: float):
    """This job's side of group `name`: a Producer if it is the first to attach, else a
    Consumer (joined, or refused with a ValueError)."""
    connection, first = _group.bind_or_connect(name)
    if first:
        return Producer(name, jobs, connection, config, timeout)
    return Consumer(name, jobs, connection, config, timeout)


@dataclass
class Member:
    index: int
    pid: int
    connection: object
    alive: bool = True


class Producer:
    is_producer = True

    def __init__(self, name: str, jobs: int, listener, config: dict, timeout: float) -> None:
        self.name, self.jobs, self._timeout = name, jobs, timeout
        self._listener, self._config = listener, config
        self._fingerprint = _group.fingerprint(config)
        self._holds_fd, holds_map = _group.shared_bytes(jobs * WINDOW, "pimloader-share")
        self._holds = np.frombuffer(holds_map, dtype=np.uint8).reshape(jobs, WINDOW)
        self._members: list[Member] = []
        self._gathered = False
        self._seq = 0
        self._epoch = 0
        self._epoch_open = False
        self._kept: list = [None] * WINDOW   # batches consumers may still read
        self._announced: dict[tuple[int, int], int] = {}  # slot -> its storage's address

    # -- membership ---------------------------------------------------------------------

    def _gather(self) -> None:
        """Wait until every other job of the group has joined (the loader's timeout, if any)."""
        deadline = None if self._timeout <= 0 else time.monotonic() + self._timeout
        while len(self._members) < self.jobs - 1:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _group.readable(self._listener, remaining):
                raise LoaderTimeoutError(
                    f"PIMDataLoader(share_with={self.name!r}): {len(self._members) + 1} of "
                    f"{self.jobs} jobs had joined after {self._timeout} seconds")
            self._admit()
        self._gathered = True
        os.close(self._holds_fd)  # every consumer has its own mapping now
        self._holds_fd = None

    def _admit(self) -> None:
        connection, _ = self._listener.accept()
        connection.settimeout(5.0)  # a joining job sends its hello at once
        try:
            hello, _ = _group.receive(connection)
        except (EOFError, OSError):
            connection.close()
            return
        connection.settimeout(None)
        pid, uid = _group.peer(connection)
        reason = self._refusal(hello) or (
            f"it runs as user {uid}, the group as {os.getuid()}" if uid != os.getuid() else "")
        if reason:
            _send_quietly(connection, ("refused", reason))
            connection.close()
            return
        member = Member(len(self._members) + 1, pid, connection)
        _group.send(connection, ("welcome", member.index, WINDOW, os.getpid()),
                    [self._holds_fd])
        self._members.append(member)

    def _refusal(self, hello: dict) -> str:
        if self._gathered:
            return f"the group is already running with its {self.jobs} jobs"
        if hello["jobs"] != self.jobs:
            return f"share_jobs={hello['jobs']} here, {self.jobs} in the group"
        if hello["fingerprint"] != self._fingerprint:
            return ("its loader is configured differently ("
                    + _group.differences(self._config, hello["config"]) + ")")
        return ""

    def _alive(self) -> list[Member]:
        return [member for member in self._members if member.alive]

    def _watch(self, timeout: float) -> None:
        """Notice consumers that left or died, and refuse late joiners, for `timeout` s."""
        watched = {member.connection: member for member in self._alive()}
        ready = _group.select.select([self._listener, *watched], [], [], timeout)[0]
        for connection in ready:
            if connection is self._listener:
                self._admit()
                continue
            member = watched[connection]
            try:
                message, _ = _group.receive(connection)
                self._lose(member, died=message != ("leave",))
            except (EOFError, OSError):
                self._lose(member, died=True)

    def _lose(self, member: Member, died: bool) -> None:
        member.alive = False
        member.connection.close()
        if died:
            warnings.warn(f"pimloader: job {member.index} (pid {member.pid}) of group "
                          f"{self.name!r} ended without closing its loader; the group goes "
                          f"on without it", RuntimeWarning, stacklevel=4)

    # -- the stream ---------------------------------------------------------------------

    def begin_epoch(self) -> None:
        if not self._gathered:
            self._gather()
        self.end_epoch()
        self._broadcast(("begin", self._epoch))
        self._epoch += 1
        self._epoch_open = True

    def end_epoch(self) -> None:
        if self._epoch_open:
            self._broadcast(("end",))
            self._epoch_open = False

    def fail(self, error: BaseException) -> None:
        """Tell the consumers that this epoch's next batch raised `error` here."""
        where = f"in the producing job (pid {os.getpid()}) of group {self.name!r}"
        self._broadcast(("error", WorkerError(where, (type(error), error,
                                                      error.__traceback__))))

    def publish(self, produced: Produced, pool, batch) -> None:
        """Send a batch just lent to this job's user to every consumer (the hook deliver()
        calls); a slot batch is kept from reuse until each consumer has released it."""
        window_slot = self._seq % WINDOW
        self._wait_released(window_slot)
        self._kept[window_slot] = None
        data = produced.data
        if isinstance(data, SlotBatch):
            fds, body = self._slot_message(data, pool)
            self._kept[window_slot] = batch
        else:
            fds, body = [], ("collated", data)
        self._broadcast(("batch", self._seq, produced.count, body), fds, window_slot)
        self._seq += 1

    def _slot_message(self, data: SlotBatch, pool) -> tuple[list[int], tuple]:
        buffer, layout = pool.slot(data)
        key = (data.producer_id, data.slot_id)
        storage = buffer.untyped_storage()
        fds, mapping = [], None
        if self._announced.get(key) != storage.data_ptr():
            fds = [_descriptor(storage)]
            mapping = (storage.nbytes(), buffer.storage_offset(), buffer.numel())
            self._announced[key] = storage.data_ptr()
        return fds, ("slot", key, mapping, layout, data.skeletons)

    def _wait_released(self, window_slot: int) -> None:
        deadline = None if self._timeout <= 0 else time.monotonic() + self._timeout
        self._watch(0)
        while True:
            holding = [m for m in self._alive() if self._holds[m.index, window_slot]]
            if not holding:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise LoaderTimeoutError(
                    f"PIMDataLoader(share_with={self.name!r}) timed out after "
                    f"{self._timeout} seconds waiting for job(s) "
                    f"{', '.join(f'{m.index} (pid {m.pid})' for m in holding)} to release "
                    f"batch {self._seq - WINDOW}")
            self._watch(_POLL_S)

    def _broadcast(self, message, fds=(), window_slot: int | None = None) -> None:
        for member in self._alive():
            if window_slot is not None:
                self._holds[member.index, window_slot] = 1
            try:
                _group.send(member.connection, message, fds)
            except OSError:
                self._lose(member, died=True)

    def close(self) -> None:
        """Tell the consumers the stream has ended, and leave the group."""
        if self._listener is None:
            return
        for member in self._alive():  # a consumer that has left cannot be told
            _send_quietly(member.connection, ("closed",))
        for member in self._members:
            member.connection.close()
        self._listener.close()
        if self._holds_fd is not None:
            os.close(self._holds_fd)
        self._listener, self._kept, self._holds = None, [None] * WINDOW, None


def _descriptor(storage) -> int:
    try:
        return storage._share_fd_cpu_()[0]
    except RuntimeError as error:
        raise RuntimeError(
            "share_with needs torch's 'file_descriptor' sharing strategy (the default on "
            "Linux): a batch slot's memory is handed to the other jobs as a file "
            f"descriptor; torch.multiprocessing.get_sharing_strategy() is "
            f"{torch.multiprocessing.get_sharing_strategy()!r}") from error


def _send_quietly(connection, message) -> None:
    try:
        _group.send(connection, message)
    except OSError:
        pass


class ProducerIter:
    """The producing job's iterator: its loader's own, telling the group where epochs
    begin and end and which batches raised (each batch is published as it is lent)."""

    def __init__(self, inner, producer: Producer) -> None:
        self._inner = inner
        self._producer = producer
        producer.begin_epoch()

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._inner)

    def __next__(self):
        try:
            return next(self._inner)
        except StopIteration:
            self._producer.end_epoch()
            raise
        except Exception as error:
            self._producer.fail(error)
            raise


class Consumer:
    is_producer = False

    def __init__(self, name: str, jobs: int, connection, config: dict,
                 timeout: float) -> None:
        self.name, self._connection, self._timeout = name, connection, timeout
        _group.send(connection, {"jobs": jobs, "config": config,
                                 "fingerprint": _group.fingerprint(config)})
        reply, fds = self._message(join=True)
        if reply[0] == "refused":
            connection.close()
            raise ValueError(f"PIMDataLoader(share_with={name!r}): the group refused this "
                             f"job: {reply[1]}")
        _, index, self._window, self._producer_pid = reply
        holds_map = mmap.mmap(fds[0], jobs * self._window)
        os.close(fds[0])
        holds = torch.from_numpy(np.frombuffer(holds_map, dtype=np.uint8))
        self._holds = holds.view(jobs, self._window)[index:index + 1]
        self._pool = SlotPool(1, shared=False, flags=self._holds)
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}
        self.pinned = False

    def _message(self, join: bool = False):
        if self._connection is None:
            raise SharedPrepError(f"PIMDataLoader(share_with={self.name!r}): the group has "
                                  f"ended (its producing job closed it)")
        if self._timeout > 0 and not _group.readable(self._connection, self._timeout):
            raise LoaderTimeoutError(
                f"PIMDataLoader(share_with={self.name!r}) timed out after {self._timeout} "
                f"seconds waiting for the group's producing job")
        try:
            message, fds = _group.receive(self._connection)
        except EOFError:
            self._end()
            who = "job that" if join else f"job (pid {self._producer_pid}) that"
            raise SharedPrepError(
                f"PIMDataLoader(share_with={self.name!r}): the {who} prepares the group's "
                f"batches ended without closing the group (killed?); no more batches "
                f"will come") from None
        if message == ("closed",):
            self._end()
            raise SharedPrepError(
                f"PIMDataLoader(share_with={self.name!r}): the producing job (pid "
                f"{self._producer_pid}) closed the group; no more batches will come")
        return message, fds

    def _end(self) -> None:
        self._connection.close()
        self._connection = None

    def await_epoch(self) -> None:
        """Skip to the next epoch's start, releasing batches of one this job left early."""
        while True:
            message, fds = self._message()
            if message[0] == "begin":
                return
            if message[0] == "batch":
                self._map(message[3], fds)
                self._holds[0, message[1] % self._window] = 0

    def next_batch(self, stats, pin_device: str | None):
        message, fds = self._message()
        kind = message[0]
        if kind == "end":
            raise StopIteration
        if kind == "error":
            message[1].reraise()
        _, seq, count, body = message
        if body[0] == "collated":
            produced = Produced(body[1], count, 0.0, 0.0)
        else:
            _, key, _, layout, skeletons = body
            buffer = self._map(body, fds)
            produced = Produced(SlotBatch(0, seq % self._window, count, skeletons,
                                          (buffer, layout)), count, 0.0, 0.0)
        return deliver(produced, self._pool, stats, pin_device)

    def _map(self, body: tuple, fds: list[int]) -> torch.Tensor | None:
        """The consumer's view of a slot's memory, mapped the first time it comes."""
        if body[0] != "slot":
            return None
        key, mapping = body[1], body[2]
        if fds:
            nbytes, offset, numel = mapping
            memory = mmap.mmap(fds[0], nbytes)
            os.close(fds[0])
            buffer = torch.from_numpy(np.frombuffer(memory, np.uint8, numel, offset))
            if self.pinned:
                register_slot(buffer)
            self._buffers[key] = buffer
        return self._buffers[key]

    def close(self) -> None:
        if self._connection is not None:
            _send_quietly(self._connection, ("leave",))
            self._end()
        # batches the user holds keep their own mappings (and release into theirs)
        self._buffers, self._pool, self._holds = {}, None, None


class ConsumerIter(_BaseDataLoaderIter):
    """A consuming job's iterator: the group's batches of one epoch, no workers. It draws
    the same seeds from the loader as torch's iterator, so this job's random states move as
    they would without sharing."""

    def __init__(self, loader, consumer: Consumer, state) -> None:
        super().__init__(loader)
        self._consumer = consumer
        consumer.pinned = self._pin_memory
        self._stats = state.begin_epoch()
        consumer.await_epoch()

    def _next_data(self):
        start = time.perf_counter()
        try:
            pin_device = self._pin_memory_device if self._pin_memory else None
            return self._consumer.next_batch(self._stats, pin_device)
        finally:
            self._stats.wait_s += time.perf_counter() - start
