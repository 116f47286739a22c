"""A reusable shared-memory arena for the variable-size outputs of a worker's batches.

Batches that a collate_fn makes (lists of images of different sizes, padded batches, the
targets' small tensors) cannot live in the fixed-layout slots of slots.py. torch's
workers place each tensor of such a batch in a fresh shared-memory segment when they send
it, and the main process maps each one: for a 10 MB float32 detection image, creating the
segment, faulting in its pages on the first write, passing its file descriptor and mapping
it on the other side cost several times what the kernel that renders it does.

The arena keeps those segments instead. Each producer (worker) owns a list of *blocks*
(shared uint8 buffers, as slots are) and one row of a `flags` array, one byte per block:
1 while the block holds tensors of a batch in flight or still referenced by the user, 0
when it may be refilled. A batch takes blocks as it needs room and carves its tensors out
of them, one after another, 64-byte aligned:

- `output_tensor(shape, dtype)`, called by a pipeline or a collate_fn, returns memory of
  the batch being made (in a PIMDataLoader worker; elsewhere plain or fresh shared memory);
- `pack(data)` turns the collated batch into an `ArenaBatch`: the data pickled with every
  arena tensor replaced by a reference (block, byte offset, shape, strides, dtype, tensor
  subclass and its attributes), and every other CPU tensor torch would have moved into a
  fresh segment copied into the arena first (storage by storage, so views of one storage
  stay views of one storage). A block goes to the main process once, the first time it is
  used; later batches carry only references.

The main process's `ArenaPool` rebuilds the tensors as views over a fresh numpy view of
each block; a block is released (its flag set to 0) when that numpy view dies, which is
when the last tensor the user derived from the batch is freed, exactly as a slot is. So a
block is never refilled while any tensor of a batch in it is alive.

The segments are torch's shared memory (`share_memory_()`): with torch's default
"file_descriptor" strategy their names are unlinked at once, so the memory goes back to
the system when the last process that maps it (a worker, the main process) drops it or
dies: nothing can leak past the processes, a killed worker included.
"""
from __future__ import annotations

import errno
import io
import math
import os
import pickle
import shutil
import weakref
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ._pages import populate_for_writing

ALIGNMENT = 64
MAX_BLOCKS_PER_PRODUCER = 64  # beyond these (a user keeping every batch): fresh memory
MIN_BLOCK_BYTES = 1 << 20
BLOCK_SLACK = 8               # a new block has 1/8 more room than asked for (the targets)

Allocator = Callable[[int], torch.Tensor]


@dataclass
class ArenaBatch:
    """A collated batch whose tensors lie in blocks of producer `producer_id`'s arena."""

    producer_id: int
    payload: bytes          # the batch, pickled, tensors as indices into `tensors`
    tensors: list           # per tensor: a TensorRef into the arena, or the tensor itself
                            # (one torch sends: CUDA, already shared...), so that the
                            # payload holds no file descriptor to fetch later
    blocks: tuple           # ids of the blocks the batch took
    new_blocks: dict = field(default_factory=dict)  # block id -> buffer, first use only


@dataclass(frozen=True)
class TensorRef:
    block: int
    offset: int             # bytes from the block's start to the tensor's storage offset 0
    dtype: torch.dtype
    size: tuple
    stride: tuple
    storage_offset: int     # in elements
    kind: type              # torch.Tensor or a subclass (tv_tensors.Image, BoundingBoxes...)
    state: Any              # the subclass's attributes (torch._utils._get_obj_state)


class ArenaFull(Exception):
    """No block can take the allocation (the block count is at its limit)."""


class ArenaWriter:
    """A producer's side: its blocks, the batch being made, and packing it."""

    def __init__(self, producer_id: int, flags: torch.Tensor, allocate: Allocator,
                 inherited: list = ()) -> None:
        self.producer_id = producer_id
        self._flags = flags.numpy()[producer_id]
        self._allocate = allocate
        self._blocks: list[torch.Tensor | None] = list(inherited)
        self._announced = {i for i, block in enumerate(self._blocks) if block is not None}
        self._populated: set[int] = set()   # blocks whose pages this process has mapped
        self._taken: list[list[int]] = []   # [block id, bytes used] of the batch being made
        self._in_batch = False
        self._largest_batch = 0             # bytes, so a batch's first block holds it all

    # -- the batch being made -----------------------------------------------------------

    def begin(self) -> None:
        """Start a batch (an unfinished one's blocks are freed)."""
        self.abandon()
        self._in_batch = True

    def abandon(self) -> None:
        """Free the blocks of the batch being made (it failed, or was not sent)."""
        for block_id, _ in self._taken:
            self._flags[block_id] = 0
        self._taken, self._in_batch = [], False

    def tensors(self, specs: list[tuple[tuple, torch.dtype]]) -> list[torch.Tensor] | None:
        """Uninitialised tensors of `specs` ((shape, dtype) pairs), one after another in one
        block of the batch being made; None outside a batch or when the arena is full."""
        sizes = [_aligned(math.prod(shape) * _itemsize(dtype)) for shape, dtype in specs]
        if not self._in_batch:
            return None
        try:
            block_id, offset = self.place(sum(sizes))
        except ArenaFull:
            return None
        block, views = self._blocks[block_id], []
        for (shape, dtype), nbytes in zip(specs, sizes):
            count = math.prod(shape) * _itemsize(dtype)
            views.append(block[offset:offset + count].view(dtype).view(shape))
            offset += nbytes
        return views

    def pack(self, data) -> Any:
        """The batch `data` as an ArenaBatch over this batch's blocks (ends the batch);
        `data` itself when it holds no tensor placed in the arena. No tensor of the arena
        ever leaves through torch's own sharing (its block could be refilled while the
        user holds it): one that cannot be referenced is sent as a copy."""
        packer = _Packer(self)
        payload = packer.dumps(data)
        if not packer.placed:
            self.abandon()
            return data
        blocks = tuple(block_id for block_id, _ in self._taken)
        new_blocks = {block_id: self._blocks[block_id] for block_id in blocks
                      if block_id not in self._announced}
        self._announced.update(new_blocks)
        self._largest_batch = max(self._largest_batch, sum(used for _, used in self._taken))
        self._taken, self._in_batch = [], False
        return ArenaBatch(self.producer_id, payload, packer.refs, blocks, new_blocks)

    def block_of(self, tensor: torch.Tensor) -> int | None:
        """The id of the block that is `tensor`'s storage, if any."""
        if tensor.device.type != "cpu" or tensor.layout is not torch.strided \
                or tensor.is_nested:
            return None   # sparse, nested, device tensors: not memory of a block
        pointer = tensor.untyped_storage().data_ptr()
        for block_id, block in enumerate(self._blocks):
            if block is not None and block.untyped_storage().data_ptr() == pointer:
                return block_id
        return None

    def block(self, block_id: int) -> torch.Tensor:
        return self._blocks[block_id]

    def takes(self, block_id: int) -> bool:
        """Whether the batch being made took block `block_id`."""
        return any(taken == block_id for taken, _ in self._taken)

    # -- blocks -------------------------------------------------------------------------

    def place(self, nbytes: int) -> tuple[int, int]:
        """(block id, byte offset) of `nbytes` of room in the batch's blocks."""
        for taken in self._taken:
            block_id, used = taken
            if self._blocks[block_id].numel() - used >= nbytes:
                taken[1] += nbytes
                return block_id, used
        batch_bytes = sum(used for _, used in self._taken)
        wanted = max(nbytes, self._largest_batch - batch_bytes)
        block_id = self._acquire(nbytes, wanted)
        self._taken.append([block_id, nbytes])
        return block_id, 0

    def _acquire(self, needed: int, wanted: int) -> int:
        """A free block of at least `needed` bytes (the smallest holding `wanted`, if
        one does), else a new one of `wanted` bytes and some slack: in a new id, or in
        place of a free block too small to be of use."""
        free = [(block.numel(), block_id) for block_id, block in enumerate(self._blocks)
                if block is not None and self._flags[block_id] == 0]
        fitting = sorted(entry for entry in free if entry[0] >= needed)
        if fitting:
            roomy = [entry for entry in fitting if entry[0] >= wanted]
            block_id = (roomy or fitting[::-1])[0][1]
            if block_id not in self._populated:   # inherited: a fork maps it afresh
                populate_for_writing(self._blocks[block_id])
                self._populated.add(block_id)
        else:
            block_id = min(free)[1] if free else len(self._blocks)
            if block_id >= MAX_BLOCKS_PER_PRODUCER:
                raise ArenaFull
            self._new_block(block_id, max(MIN_BLOCK_BYTES, wanted + wanted // BLOCK_SLACK))
        self._flags[block_id] = 1
        return block_id

    def _new_block(self, block_id: int, nbytes: int) -> None:
        nbytes = _aligned(nbytes, MIN_BLOCK_BYTES)
        if block_id < len(self._blocks):
            self._blocks[block_id] = None   # the old buffer goes once the main process has
        else:                               # the new one (its view is free: nothing lent)
            self._blocks.append(None)
        block = self._allocate(nbytes)
        populate_or_raise(block)
        self._blocks[block_id] = block
        self._populated.add(block_id)
        self._announced.discard(block_id)


class _Packer(ForkingPickler):
    """Pickles a batch with its tensors placed in the arena (see the module's doc)."""

    def __init__(self, writer: ArenaWriter) -> None:
        self._file = io.BytesIO()
        super().__init__(self._file, pickle.HIGHEST_PROTOCOL)
        self.writer = writer
        self.refs: list = []                    # TensorRef, or a tensor for torch to send
        self.placed = 0                         # how many are TensorRefs
        self._ids: dict[int, int] = {}          # id(tensor) -> index in refs
        self._copies: dict[int, tuple] = {}     # storage pointer -> (block id, offset)
        self._keep: list = []                   # the tensors seen, alive while pickling

    def dumps(self, data) -> bytes:
        self.dump(data)
        return self._file.getvalue()

    def persistent_id(self, obj):
        if not isinstance(obj, torch.Tensor):
            return None
        index = self._ids.get(id(obj))
        if index is not None:
            return index
        ref = self._ref(obj)
        if isinstance(ref, TensorRef):
            self.placed += 1
        self._keep.append(obj)
        self._ids[id(obj)] = len(self.refs)
        self.refs.append(ref)
        return len(self.refs) - 1

    def _ref(self, tensor: torch.Tensor):
        """A TensorRef into the arena for `tensor`, or the tensor torch is to send (itself,
        or a copy of it when it lies in a block the batch cannot reference)."""
        state = _plain_state(tensor)
        block_id = self.writer.block_of(tensor)
        if block_id is not None:
            if state is _NOT_PLAIN or not self.writer.takes(block_id):
                return _outside_arena(tensor)
            offset = 0   # a view of the block: its storage is the block's
        elif state is _NOT_PLAIN or tensor.is_shared() or _views_a_larger_storage(tensor):
            return tensor   # torch sends it as it would: a handle to its whole storage
        else:
            try:
                block_id, offset = self._copy_storage(tensor.untyped_storage())
            except ArenaFull:
                return tensor
        return TensorRef(block_id, offset, tensor.dtype, tuple(tensor.shape), tensor.stride(),
                         tensor.storage_offset(), type(tensor), state)

    def _copy_storage(self, storage: torch.UntypedStorage) -> tuple[int, int]:
        key = storage.data_ptr()
        if key not in self._copies:
            nbytes = storage.nbytes()
            block_id, offset = self.writer.place(_aligned(max(nbytes, 1)))
            block = self.writer.block(block_id)
            if nbytes:
                source = torch.empty(0, dtype=torch.uint8).set_(storage)
                block[offset:offset + nbytes].copy_(source)
            self._copies[key] = (block_id, offset)
        return self._copies[key]


_NOT_PLAIN = object()
LARGER_STORAGE_SLACK = 64 << 10


def _views_a_larger_storage(tensor: torch.Tensor) -> bool:
    """A view of a storage much larger than itself (a slice of a dataset's tensor): torch
    moves that storage into shared memory once and sends its handle after; the arena would
    copy all of it for every batch."""
    return tensor.untyped_storage().nbytes() > 2 * tensor.nbytes + LARGER_STORAGE_SLACK


def _outside_arena(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of `tensor` in ordinary memory, for torch to send (a Parameter stays one; a
    non-leaf tensor that requires grad is left for torch to refuse, with its own error)."""
    if tensor.requires_grad and not tensor.is_leaf:
        return tensor
    with torch.no_grad():
        copy = tensor.clone()
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=tensor.requires_grad)
    return copy.requires_grad_(tensor.requires_grad)


def _plain_state(tensor: torch.Tensor):
    """The attributes of a tensor the arena can carry (those of its subclass: a
    tv_tensors.BoundingBoxes' format and canvas_size), or _NOT_PLAIN for one that torch
    must send itself (not a dense CPU tensor, grad, conjugate or negative bits...)."""
    if (tensor.device.type != "cpu" or tensor.layout is not torch.strided or tensor.is_nested
            or tensor.requires_grad or tensor.is_quantized or tensor.is_conj()
            or tensor.is_neg() or isinstance(tensor, torch.nn.Parameter)):
        return _NOT_PLAIN
    if type(tensor) is torch.Tensor:
        return None
    state = torch._utils._get_obj_state(tensor)
    return state if state is None or isinstance(state, dict) else _NOT_PLAIN


class ArenaPool:
    """The main process's side: every block it has been sent, the flags, and lending."""

    def __init__(self, num_producers: int, shared: bool) -> None:
        flags = torch.zeros(num_producers, MAX_BLOCKS_PER_PRODUCER, dtype=torch.uint8)
        self.flags = flags.share_memory_() if shared else flags
        self._flag_bytes = self.flags.numpy()
        self._blocks: dict[tuple[int, int], torch.Tensor] = {}
        self._lent: dict[tuple[int, int], int] = {}   # block -> lent batches alive

    def lend(self, batch: ArenaBatch) -> Any:
        """The user's batch: its tensors as views of its blocks, which stay taken until
        the last of them is freed."""
        self._remember(batch)
        bases = {block_id: self._lent_base((batch.producer_id, block_id))
                 for block_id in batch.blocks}
        return _Unpacker(io.BytesIO(batch.payload), batch.tensors, bases).load()

    def discard(self, batch: ArenaBatch) -> None:
        """Free the blocks of a batch that will never be handed to the user."""
        self._remember(batch)
        for block_id in batch.blocks:
            self._flag_bytes[batch.producer_id, block_id] = 0

    def release_unlent(self) -> None:
        """After the producers have stopped: free every block the user does not hold."""
        for key in self._blocks:
            if key not in self._lent:
                self._flag_bytes[key] = 0

    def inherited(self, producer_id: int) -> list:
        """The blocks a new producer `producer_id` starts with (by id; None: unknown)."""
        ids = [block_id for producer, block_id in self._blocks if producer == producer_id]
        blocks: list = [None] * (max(ids) + 1 if ids else 0)
        for block_id in ids:
            blocks[block_id] = self._blocks[(producer_id, block_id)]
        return blocks

    def _remember(self, batch: ArenaBatch) -> None:
        for block_id, buffer in batch.new_blocks.items():
            self._blocks[(batch.producer_id, block_id)] = buffer

    def _lent_base(self, key: tuple[int, int]) -> torch.Tensor:
        lent = self._blocks[key].numpy()[:]
        self._lent[key] = self._lent.get(key, 0) + 1
        weakref.finalize(lent, _release, self._flag_bytes, self._lent, key)
        return torch.from_numpy(lent)


def _release(flags: np.ndarray, lent: dict, key: tuple[int, int]) -> None:
    lent[key] -= 1
    if not lent[key]:
        del lent[key]
        flags[key] = 0


class _Unpacker(pickle.Unpickler):
    def __init__(self, file, refs: list[TensorRef], bases: dict[int, torch.Tensor]) -> None:
        super().__init__(file)
        self._refs, self._bases, self._made = refs, bases, {}

    def persistent_load(self, index: int) -> torch.Tensor:
        ref = self._refs[index]
        if not isinstance(ref, TensorRef):
            return ref
        if index not in self._made:
            self._made[index] = _view(ref, self._bases[ref.block])
        return self._made[index]


def _view(ref: TensorRef, base: torch.Tensor) -> torch.Tensor:
    """The tensor `ref` describes, over `base` (a lent view of its block)."""
    itemsize = _itemsize(ref.dtype)
    if ref.offset % itemsize:
        raise AssertionError(f"an arena tensor at byte {ref.offset} is not {itemsize}-aligned")
    tensor = torch.empty(0, dtype=ref.dtype).set_(
        base.untyped_storage(), ref.offset // itemsize + ref.storage_offset, ref.size,
        ref.stride)
    if ref.kind is not torch.Tensor:
        tensor = tensor.as_subclass(ref.kind)
        if ref.state:
            torch._utils._set_obj_state(tensor, ref.state)
    return tensor


# -- what pipelines and collate_fns call ----------------------------------------------------

_CURRENT: ArenaWriter | None = None   # the arena of this worker process, if it has one


def set_current(writer: ArenaWriter | None) -> None:
    global _CURRENT
    _CURRENT = writer


def output_tensors(specs: list[tuple[tuple, torch.dtype]]) -> list[torch.Tensor]:
    """Uninitialised plain tensors of `specs` ((shape, dtype) pairs) for a batch's output:
    in a PIMDataLoader worker, memory of its arena, reused across batches; in another
    DataLoader's worker, fresh shared memory (sent as a handle); else ordinary memory."""
    if _CURRENT is not None:
        tensors = _CURRENT.tensors(specs)
        if tensors is not None:
            return tensors
    if get_worker_info() is None:
        return [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
    return [_fresh_shared(shape, dtype) for shape, dtype in specs]


def output_tensor(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """One output tensor (see output_tensors)."""
    return output_tensors([(tuple(shape), dtype)])[0]


def _fresh_shared(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    storage = torch.UntypedStorage._new_shared(max(1, math.prod(shape) * _itemsize(dtype)))
    return torch.tensor([], dtype=dtype).set_(storage, 0, shape)


def populate_or_raise(block: torch.Tensor) -> None:
    """Map a new block's pages for writing, or raise if shared memory cannot hold them.

    A shared segment is created without its pages; where /dev/shm is too small, the first
    write past its room kills the process with SIGBUS. MADV_POPULATE_WRITE (Linux 5.14+)
    allocates every page now and fails instead, which turns that into this error."""
    failure = populate_for_writing(block)
    if failure in (errno.EFAULT, errno.ENOMEM, errno.ENOSPC, errno.EIO):
        raise MemoryError(_no_room_message(block.numel(), failure))


def _no_room_message(nbytes: int, failure: int) -> str:
    try:
        free = f"{_in_units(shutil.disk_usage('/dev/shm').free)} free in /dev/shm"
    except OSError:
        free = "no /dev/shm to measure"
    return (f"pimloader: no room in shared memory for a {_in_units(nbytes)} block of "
            f"the worker's output arena (the batch's images and targets; {free}; "
            f"{os.strerror(failure)}). Enlarge /dev/shm (docker: --shm-size), or lower "
            f"batch_size, num_workers or prefetch_factor")


def _in_units(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def _aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    return (nbytes + alignment - 1) // alignment * alignment


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
