"""num_workers=0: the main process fetches each batch and writes it into a local slot."""
from __future__ import annotations

import time

import torch.utils.data.graph_settings
from torch.utils.data import IterDataPipe, MapDataPipe
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from .produce import Produced, ProducerContext, deliver, make_producer
from ._resume import EpochTracker


class SingleProcessIter(_BaseDataLoaderIter):
    def __init__(self, loader, state, resume=None) -> None:
        before = resume.before_iterator(loader) if resume is not None else None
        self._tracker = state.tracker = EpochTracker(loader, 0)
        super().__init__(loader)
        if resume is not None:
            resume.seeds(self, loader, before)
        self._tracker.attach(self)
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        if isinstance(self._dataset, (IterDataPipe, MapDataPipe)):
            torch.utils.data.graph_settings.apply_sharding(
                self._dataset, self._world_size, self._rank)
        self._pool, writer = state.local_slots(self._pin_memory)
        self._publish = state.publish
        self._producer = make_producer(ProducerContext(
            self._dataset, self._dataset_kind == _DatasetKind.Iterable, self._auto_collation,
            self._collate_fn, self._drop_last, writer, state.resources, loader._on_error),
            loader._pipeline)
        self._tracker.main = (self._dataset, self._producer)
        if resume is not None:
            resume.continue_producer(self, self._tracker)
            resume.continue_sampling(self, loader, self._tracker, before)
        self._stats = state.begin_epoch()

    def _next_data(self):
        start = time.perf_counter()
        try:
            index = self._next_index()
            self._tracker.fetched(index)
            produced = self._produce(index)
            data = self._deliver(produced)
            self._tracker.delivered += 1
            self._tracker.observe("delivered")
            return data
        except StopIteration:
            self._tracker.finished = True
            self._tracker.observe("finished")
            raise
        finally:
            self._stats.wait_s += time.perf_counter() - start

    def _produce(self, index) -> Produced:
        try:
            return self._producer.produce(index)
        except StopIteration:
            raise
        except Exception as error:
            error.add_note(f"pimloader: raised in the main process (num_workers=0) while "
                           f"fetching {self._producer.current}")
            raise

    def _deliver(self, produced: Produced):
        pin_device = self._pin_memory_device if self._pin_memory else None
        return deliver(produced, self._pool, self._stats, pin_device, self._publish)
