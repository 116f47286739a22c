"""Batch slots: preallocated buffers that producers fill and the main process lends out.

Each producer (a worker process, or the main process when num_workers=0) owns a growing
list of slots and one row of a `flags` array (shared memory when producers are
processes), one byte per slot: 1 while the slot holds a batch that is in flight or still
referenced by the user, 0 when it may be refilled. Producers set flags to 1; the main
process sets them back to 0.

A delivered batch is a set of tensor views over a fresh numpy view of its slot; the slot is
released when that numpy view dies, which is when the last tensor the user derived from the
batch is freed. A user who keeps every batch therefore keeps every slot, and the list grows
(up to `MAX_SLOTS_PER_PRODUCER`, after which batches take the ordinary collate path).

A `SlotPool` keeps the flags and every slot the main process has seen, so that the next
epoch's workers inherit the slots of the last (no new shared memory, no page faults). A
slot id always names the same buffer: a worker whose layout differs from the inherited
one leaves the inherited ids unused and numbers its new slots after them.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .arena import ArenaPool
from .layout import (
    Layout, NotSlottable, collate_skeletons, compile_batch_splitter, split_sample)
from ._pages import populate_for_writing

MAX_SLOTS_PER_PRODUCER = 1024

Allocator = Callable[[int], torch.Tensor]
InheritedSlots = list  # list[tuple[torch.Tensor, Layout] | None], indexed by slot id


@dataclass
class SlotBatch:
    """A batch written into slot `slot_id` of producer `producer_id`, as sent to the consumer.

    `new_slot` carries the slot's buffer and layout the first time the slot is used.
    """

    producer_id: int
    slot_id: int
    count: int
    skeletons: list
    new_slot: tuple[torch.Tensor, Layout] | None = None


class SlotWriter:
    """The producer side: lays out the first batch, then writes samples into free slots."""

    def __init__(self, producer_id: int, flags: torch.Tensor, allocate: Allocator,
                 inherited: InheritedSlots = ()) -> None:
        self.producer_id = producer_id
        self._flags = flags.numpy()[producer_id]
        self._allocate = allocate
        self._inherited = list(inherited)
        self._layout: Layout | None = None
        self._splitter = None
        self._columns: list[list] = []
        self._slots: list[torch.Tensor | None] = []
        self._full_views: dict[int, list[torch.Tensor]] = {}  # slot id -> its field views
        self._announced: set[int] = set()
        self._mapped: set[int] = set()  # slots whose pages this process has populated

    def write(self, samples: list, render_first=None) -> SlotBatch | None:
        """Write `samples` into a free slot, or return None if they need the ordinary path.

        With `render_first`, the samples' first field (the first leaf of each) holds only
        stand-ins of the right shape and dtype: `render_first(rows)` writes that field's
        rows of the slot, and the other fields are stacked as usual. It is called only
        once a slot is taken."""
        if not isinstance(samples, list) or not samples:
            return None
        if self._layout is None and not self._lay_out(samples):
            return None
        if self._splitter is None or len(samples) > self._layout.capacity:
            return None  # laid out for direct writes (write_with), or too many samples
        for column in self._columns:
            column.clear()
        try:
            skeletons = self._splitter(samples)
        except NotSlottable:
            return None
        slot_id = self._acquire()
        if slot_id is None:
            return None
        try:
            self._fill(self._field_views(slot_id, len(samples)), render_first)
        except BaseException:
            self._flags[slot_id] = 0
            raise
        return self._sent(slot_id, len(samples), skeletons)

    def write_with(self, layout: Layout, fill) -> SlotBatch | None:
        """Let `fill(views)` write a batch of `layout` straight into a free slot.

        `fill` gets one view per field, each with room for `layout.capacity` samples, and
        returns the skeletons of the samples it wrote (in rows 0..n-1). Returns None, having
        called nothing, when no slot of that layout is free.
        """
        if self._layout is None:
            self._adopt(layout)
        if self._layout != layout:
            return None
        slot_id = self._acquire()
        if slot_id is None:
            return None
        try:
            skeletons = fill(layout.field_views(self._slots[slot_id], layout.capacity))
        except BaseException:
            self._flags[slot_id] = 0
            raise
        return self._sent(slot_id, len(skeletons), skeletons)

    def _sent(self, slot_id: int, count: int, skeletons: list) -> SlotBatch:
        """The message for a filled slot, carrying the buffer the first time it is sent."""
        new_slot = None
        if slot_id not in self._announced:
            new_slot = (self._slots[slot_id], self._layout)
            self._announced.add(slot_id)
        return SlotBatch(self.producer_id, slot_id, count, skeletons, new_slot)

    def _lay_out(self, samples: list) -> bool:
        """Fix the layout from the first sample; False if it has nothing to put in a slot."""
        leaves: list = []
        try:
            skeleton = split_sample(samples[0], leaves)
        except NotSlottable:
            return False
        if not leaves:
            return False
        self._adopt(Layout.for_leaves(leaves, capacity=len(samples)))
        self._columns = [[] for _ in leaves]
        self._splitter = compile_batch_splitter(skeleton, self._layout, self._columns)
        return True

    def _adopt(self, layout: Layout) -> None:
        """Fix the layout; inherited slots of the same layout are reused, the rest idle."""
        self._layout = layout
        self._slots = [slot[0] if slot is not None and slot[1] == layout else None
                       for slot in self._inherited]
        self._full_views = {}
        self._announced = {i for i, slot in enumerate(self._slots) if slot is not None}

    def _acquire(self) -> int | None:
        slot_id = self._free_slot()
        if slot_id is None:
            if len(self._slots) >= MAX_SLOTS_PER_PRODUCER:
                return None
            slot_id = len(self._slots)
            self._slots.append(self._allocate(self._layout.nbytes))
        self._flags[slot_id] = 1
        if slot_id not in self._mapped:
            populate_for_writing(self._slots[slot_id])
            self._mapped.add(slot_id)
        return slot_id

    def _free_slot(self) -> int | None:
        """The lowest id of a slot of this layout that holds no batch, if any."""
        flags = self._flags[:len(self._slots)].tobytes()
        slot_id = flags.find(0)
        while slot_id >= 0 and self._slots[slot_id] is None:
            slot_id = flags.find(0, slot_id + 1)
        return slot_id if slot_id >= 0 else None

    def _field_views(self, slot_id: int, count: int) -> list[torch.Tensor]:
        """The slot's field views (`Layout.field_views`) for `count` samples."""
        views = self._full_views.get(slot_id)
        if views is None:
            views = self._layout.field_views(self._slots[slot_id], self._layout.capacity)
            self._full_views[slot_id] = views
        return views if count == self._layout.capacity else [view[:count] for view in views]

    def _fill(self, views: list[torch.Tensor], render_first=None) -> None:
        """Stack each field's column straight into its view (as default_collate's `out=`),
        or render the first field with `render_first`."""
        for index, (column, view) in enumerate(zip(self._columns, views)):
            if index == 0 and render_first is not None:
                render_first(view)
            elif {*map(type, column)} == {torch.Tensor}:
                torch.stack(column, out=view)
            else:
                np.stack([_as_numpy(leaf) for leaf in column], out=view.numpy())
            column.clear()


def _as_numpy(leaf) -> np.ndarray:
    return leaf if isinstance(leaf, np.ndarray) else leaf.resolve_conj().resolve_neg().numpy()


class SlotPool:
    """The main process's side: every known slot, the flags, and lending slots out."""

    def __init__(self, num_producers: int, shared: bool,
                 register: Callable[[torch.Tensor], None] | None = None,
                 flags: torch.Tensor | None = None) -> None:
        """`flags`: given flags (num_producers rows) instead of new ones (coordinated prep
        lends batches of another job's slots and releases them in a shared array)."""
        if flags is None:
            flags = torch.zeros(num_producers, MAX_SLOTS_PER_PRODUCER, dtype=torch.uint8)
            flags = flags.share_memory_() if shared else flags
        self.flags = flags
        self.num_producers = num_producers
        self.pinned = register is not None
        self._flag_bytes = self.flags.numpy()
        self._register = register
        self._slots: dict[tuple[int, int], tuple[torch.Tensor, Layout]] = {}
        self._lent: set[tuple[int, int]] = set()
        self.arena = ArenaPool(num_producers, shared)  # variable-size outputs (arena.py)

    def lend(self, batch: SlotBatch) -> Any:
        """The user's batch: the skeletons collated over views of the batch's slot."""
        key = self._remember(batch)
        buffer, layout = self._slots[key]
        lent = buffer.numpy()[:]
        self._lent.add(key)
        weakref.finalize(lent, _release, self._flag_bytes, self._lent, key)
        views = layout.lent_views(torch.from_numpy(lent), batch.count)
        return collate_skeletons(batch.skeletons, views)

    def slot(self, batch: SlotBatch) -> tuple[torch.Tensor, Layout]:
        """The buffer and layout of the slot a batch lent by this pool was written into."""
        return self._slots[(batch.producer_id, batch.slot_id)]

    def discard(self, batch: SlotBatch) -> None:
        """Free the slot of a batch that will never be handed to the user."""
        self._flag_bytes[self._remember(batch)] = 0

    def release_unlent(self) -> None:
        """After the producers have stopped: free every slot the user does not hold."""
        for key in self._slots:
            if key not in self._lent:
                self._flag_bytes[key] = 0
        self.arena.release_unlent()

    def inherited(self, producer_id: int) -> InheritedSlots:
        ids = [slot_id for (producer, slot_id) in self._slots if producer == producer_id]
        slots: InheritedSlots = [None] * (max(ids) + 1 if ids else 0)
        for slot_id in ids:
            slots[slot_id] = self._slots[(producer_id, slot_id)]
        return slots

    def _remember(self, batch: SlotBatch) -> tuple[int, int]:
        key = (batch.producer_id, batch.slot_id)
        if batch.new_slot is not None:
            buffer, layout = batch.new_slot
            if self._register is not None:
                self._register(buffer)
            self._slots[key] = (buffer, layout)
        return key


def _release(flags: np.ndarray, lent: set, key: tuple[int, int]) -> None:
    lent.discard(key)
    flags[key] = 0
