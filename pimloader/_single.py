"""num_workers=0: the main process fetches each batch and writes it into a local slot."""
from __future__ import annotations

import time

import torch.utils.data.graph_settings
from torch.utils.data import IterDataPipe, MapDataPipe
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from ._pin import pin_collated
from ._produce import Produced, make_producer
from ._slots import SlotBatch


class SingleProcessIter(_BaseDataLoaderIter):
    def __init__(self, loader, state) -> None:
        super().__init__(loader)
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        if isinstance(self._dataset, (IterDataPipe, MapDataPipe)):
            torch.utils.data.graph_settings.apply_sharding(
                self._dataset, self._world_size, self._rank)
        self._pool, writer = state.local_slots(self._pin_memory)
        self._producer = make_producer(
            self._dataset, self._dataset_kind == _DatasetKind.Iterable, self._auto_collation,
            self._collate_fn, self._drop_last, writer, loader._image_pipeline,
            loader._sample_transform)
        self._stats = state.begin_epoch()

    def _next_data(self):
        start = time.perf_counter()
        try:
            index = self._next_index()
            produced = self._produce(index)
            return self._deliver(produced)
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
        shared = isinstance(produced.data, SlotBatch)
        self._stats.add_batch(produced, shared)
        if shared:
            return self._pool.lend(produced.data)
        if self._pin_memory:
            return pin_collated(produced.data, self._pin_memory_device)
        return produced.data
