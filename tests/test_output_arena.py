"""The workers' output arena (pimloader/loader/arena.py): collated batches whose tensors
(detection images of different sizes, padded batches, targets) lie in shared memory the
loader reuses. Batches against torchvision's (torch's DataLoader, same seed); reuse seen
through the shared segments the tensors lie in (/proc/self/maps); a batch still held is
never overwritten; nothing left after close or a killed worker; a clear error when shared
memory cannot hold a block."""
from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import signal
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from _coco import assert_same_samples, collate_list, make_coco, torchvision_coco
from _helpers import Snapshot
from pimloader import PaddedBatch, PIMDataLoader
from pimloader.datasets import CocoDetection
from pimloader.errors import WorkerDiedError
from pimloader.loader import arena
from pimloader.loader.slots import SlotPool

EPOCHS = 3


def faster_rcnn():   # the Faster R-CNN recipe at a test's sizes: images of several sizes
    return v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.Resize(120, max_size=150),
                       v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("coco"), count=9, empty=1)


def loader_pair(coco, collate_fn, persistent_workers=True, **kwargs):
    """(torch's DataLoader over torchvision's wrapped CocoDetection, PIMDataLoader over
    pimloader's), same seed and arguments, two workers."""
    root, ann_file = coco
    common = dict(batch_size=3, shuffle=True, num_workers=2,
                  persistent_workers=persistent_workers, collate_fn=collate_fn, **kwargs)
    torch.manual_seed(7)
    theirs = DataLoader(torchvision_coco(root, ann_file, faster_rcnn()),
                        generator=torch.Generator().manual_seed(7), **common)
    want = [list(theirs) for _ in range(EPOCHS)]
    torch.manual_seed(7)
    ours = PIMDataLoader(CocoDetection(root, ann_file, transforms=faster_rcnn()),
                         generator=torch.Generator().manual_seed(7), **common)
    return want, ours


def images_of(batch) -> list[torch.Tensor]:
    images = batch[0]
    return [images.tensors] if isinstance(images, tuple) and hasattr(images, "tensors") \
        else list(images)


def segment_of(tensor: torch.Tensor) -> tuple:
    """(inode, name) of the shared-memory mapping `tensor`'s memory lies in."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(value, 16) for value in fields[0].split("-"))
        if start <= address < end:
            return int(fields[4]), fields[5] if len(fields) > 5 else ""
    raise AssertionError(f"no mapping holds address {address:#x}")


def shared_mappings() -> set:
    """The shared-memory segments this process maps (torch's, named /dev/shm/torch_*)."""
    return {line.split(maxsplit=5)[-1] for line in Path("/proc/self/maps").read_text()
            .splitlines() if "/dev/shm/" in line or "/memfd:" in line}


@pytest.mark.parametrize("collate_fn, persistent", [
    (collate_list, True), (PaddedBatch(size_divisibility=32), True), (collate_list, False)],
    ids=["list", "padded", "list-fresh-workers"])   # fresh workers inherit the blocks
def test_batches_equal_torchvisions_and_their_memory_is_reused(coco, collate_fn, persistent):
    want, ours = loader_pair(coco, collate_fn, persistent)
    segments_per_batch = []
    for epoch in range(EPOCHS):
        for index, batch in enumerate(ours):
            assert_same_samples(batch, want[epoch][index], f"epoch {epoch} batch {index}")
            segments_per_batch.append({segment_of(image) for image in images_of(batch)})
            del batch   # the consumer drops it: its blocks may be refilled
    ours.close()
    used = [segment for segments in segments_per_batch for segment in segments]
    assert all(name.startswith("/dev/shm/") or name.startswith("/memfd:")
               for _, name in used), used
    # torch's workers put each image (each padded batch) in a segment of its own; the
    # arena's blocks recur: a few per worker, each refilled batch after batch
    assert len(set(used)) <= len(segments_per_batch) // 2, segments_per_batch
    assert ours.stats()[-1].kernel_samples == len(ours.dataset)


def test_a_batch_still_held_is_never_overwritten(coco):
    want, ours = loader_pair(coco, collate_list)
    batches = iter(ours)
    held = next(batches)
    copy = [image.clone() for image in held[0]]
    held_ranges = [(image.data_ptr(), image.data_ptr() + image.nbytes) for image in held[0]]
    for epoch in range(EPOCHS):
        for index, batch in enumerate(batches, start=epoch == 0):
            assert_same_samples(batch, want[epoch][index], f"epoch {epoch} batch {index}")
            for image in batch[0]:   # none in the memory of the batch held
                start, end = image.data_ptr(), image.data_ptr() + image.nbytes
                assert all(end <= first or start >= last for first, last in held_ranges)
            del batch
        batches = iter(ours)
    assert all(torch.equal(image, kept) for image, kept in zip(held[0], copy))
    ours.close()   # batches still held stay valid after close, as slots' do
    assert all(torch.equal(image, kept) for image, kept in zip(held[0], copy))
    assert_same_samples(held, want[0][0], "the batch held across three epochs")


def test_nothing_is_left_after_close(coco):
    want, ours = loader_pair(coco, collate_list)
    del want   # torch's batches, each image in a segment of its own
    before, mapped = Snapshot(), shared_mappings()
    kept = None
    for epoch in range(EPOCHS):
        for batch in ours:
            kept = batch
    ours.close()
    assert shared_mappings() - mapped, "a batch held after close keeps its block mapped"
    del kept, batch, ours
    before.assert_clean(what="closing a loader whose workers used the arena")
    assert shared_mappings() <= mapped


def record_pid(folder: str, worker_id: int) -> None:
    Path(folder, f"{os.getpid()}.pid").write_text(str(worker_id))


def test_nothing_is_left_after_a_killed_worker(coco, tmp_path):
    root, ann_file = coco
    before, mapped = Snapshot(), shared_mappings()
    loader = PIMDataLoader(CocoDetection(root, ann_file, transforms=faster_rcnn()),
                           batch_size=2, num_workers=2, collate_fn=collate_list,
                           prefetch_factor=1,
                           worker_init_fn=functools.partial(record_pid, str(tmp_path)))
    batches = iter(loader)
    first = next(batches)
    victim = int(next(tmp_path.glob("*.pid")).stem)
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=str(victim)):
        while True:
            next(batches)   # dropped at once: a batch held would hold its block
    assert first[0][0].isfinite().all()   # a batch received before stays readable
    del first, batches
    loader.close()
    del loader
    before.assert_clean(what="a worker killed while its arena held batches")
    assert shared_mappings() <= mapped


def test_packing_keeps_views_strides_subclasses_and_releases_on_drop():
    """In one process: what pack() sends and lend() rebuilds, and when a block is freed."""
    pool = SlotPool(1, shared=False)
    writer = arena.ArenaWriter(0, pool.arena.flags, lambda n: torch.empty(n, dtype=torch.uint8))
    writer.begin()
    image = writer.tensors([((3, 5, 7), torch.float32)])[0]
    image.copy_(torch.randn(3, 5, 7))
    base = torch.arange(24, dtype=torch.int64).reshape(4, 6)
    boxes = tv_tensors.BoundingBoxes(torch.rand(2, 4) * 10, format="XYWH", canvas_size=(5, 7))
    grad = torch.ones(2, requires_grad=True)
    data = {"image": tv_tensors.Image(image), "columns": base[:, ::2], "row": base[1],
            "boxes": boxes, "grad": grad, "again": boxes, "label": 3}
    sent = writer.pack(data)
    assert isinstance(sent, arena.ArenaBatch) and sent.blocks == (0,)
    assert pool.arena.flags[0, 0] == 1
    got = pool.arena.lend(sent)
    assert torch.equal(got["image"], image) and type(got["image"]) is tv_tensors.Image
    assert torch.equal(got["columns"], base[:, ::2]) and got["columns"].stride() == (6, 2)
    got["columns"][1, 0] = -1   # views of one storage stay views of one storage
    assert got["row"][0] == -1
    assert type(got["boxes"]) is tv_tensors.BoundingBoxes
    assert (got["boxes"].format, got["boxes"].canvas_size) == (boxes.format, (5, 7))
    assert got["again"] is got["boxes"] and got["grad"] is grad and got["label"] == 3
    keep = got["row"]
    del got
    assert pool.arena.flags[0, 0] == 1, "a block was freed while a tensor of it is alive"
    del keep
    assert pool.arena.flags[0, 0] == 0
    writer.begin()
    assert writer.tensors([((3, 5, 7), torch.float32)])[0].data_ptr() == image.data_ptr()


def test_no_arena_tensor_outside_a_worker_batch():
    assert arena.output_tensor((2, 3), torch.float32).shape == (2, 3)   # plain memory
    pool = SlotPool(1, shared=False)
    writer = arena.ArenaWriter(0, pool.arena.flags, lambda n: torch.empty(n, dtype=torch.uint8))
    assert writer.tensors([((2,), torch.uint8)]) is None   # not within begin() .. pack()
    writer.begin()
    assert writer.pack({"label": 1, "name": "x"}) == {"label": 1, "name": "x"}  # no tensor


def unbacked_buffer(tmp_path) -> tuple[torch.Tensor, callable]:
    """Two pages mapped over a one-page file: the second has no backing (as a page of a
    full /dev/shm has none); writing it would raise SIGBUS."""
    path = tmp_path / "one_page"
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    with open(path, "r+b") as file:
        address = libc.mmap(None, 2 * mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE,
                            mmap.MAP_SHARED, file.fileno(), 0)
    assert address not in (None, ctypes.c_void_p(-1).value)
    memory = (ctypes.c_uint8 * (2 * mmap.PAGESIZE)).from_address(address)
    return torch.frombuffer(memory, dtype=torch.uint8), \
        lambda: libc.munmap(address, 2 * mmap.PAGESIZE)


def test_a_block_shared_memory_cannot_hold_is_a_clear_error(tmp_path):
    buffer, unmap = unbacked_buffer(tmp_path)
    try:
        if arena.populate_for_writing(buffer) == errno.EINVAL:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
        with pytest.raises(MemoryError, match=r"no room in shared memory for a 8\.0 KiB "
                                              r"block .*/dev/shm.*Enlarge /dev/shm"):
            arena.populate_or_raise(buffer)
    finally:
        del buffer
        unmap()


def test_a_worker_that_cannot_place_its_batch_names_itself_and_the_samples(coco, monkeypatch):
    root, ann_file = coco
    monkeypatch.setattr(arena, "populate_for_writing", lambda block: 14)   # EFAULT
    loader = PIMDataLoader(CocoDetection(root, ann_file, transforms=faster_rcnn()),
                           batch_size=2, num_workers=1, collate_fn=collate_list)
    with pytest.raises(MemoryError, match="no room in shared memory") as caught:
        next(iter(loader))
    assert "worker 0" in str(caught.value) and "samples [0, 1]" in str(caught.value)
    loader.close()


def writer_and_pool(monkeypatch=None, max_blocks=None):
    if max_blocks is not None:
        monkeypatch.setattr(arena, "MAX_BLOCKS_PER_PRODUCER", max_blocks)
    pool = SlotPool(1, shared=False)
    writer = arena.ArenaWriter(0, pool.arena.flags, lambda n: torch.empty(n, dtype=torch.uint8))
    return writer, pool


def test_what_torch_must_send_leaves_as_torch_sends_it():
    writer, pool = writer_and_pool()
    dataset_tensor = torch.arange(1 << 20, dtype=torch.float32)
    writer.begin()
    image, needing_grad = writer.tensors([((4,), torch.float32), ((4,), torch.float32)])
    image.copy_(torch.arange(4.0))
    needing_grad.copy_(torch.arange(4.0)).requires_grad_()
    weight = torch.nn.Parameter(torch.ones(3))
    data = {"image": image, "row": dataset_tensor[10:20], "weight": weight,
            "in_arena_needing_grad": needing_grad}
    got = pool.arena.lend(writer.pack(data))
    assert torch.equal(got["image"], torch.arange(4.0))
    assert got["row"] is data["row"]      # a slice of a larger storage: torch shares it once
    assert got["weight"] is weight        # a Parameter: torch's own reduction
    kept = got["in_arena_needing_grad"]   # an arena tensor torch must send: a copy of it
    assert kept.requires_grad and torch.equal(kept.detach(), torch.arange(4.0))
    assert writer.block_of(kept) is None


def test_a_full_arena_falls_back_to_fresh_memory(monkeypatch):
    writer, pool = writer_and_pool(monkeypatch, max_blocks=1)
    writer.begin()
    first = writer.tensors([((8,), torch.float32)])[0].fill_(1)
    held = pool.arena.lend(writer.pack({"image": first, "boxes": torch.ones(2, 4)}))
    writer.begin()   # block 0 is held: no block left for this batch
    assert writer.tensors([((8,), torch.float32)]) is None
    image = arena.output_tensor((8,), torch.float32).fill_(2)   # plain memory, not the arena
    sent = writer.pack({"image": image, "boxes": torch.zeros(2, 4)})
    assert not isinstance(sent, arena.ArenaBatch) and sent["image"] is image
    assert torch.equal(held["image"], torch.ones(8)) and torch.equal(held["boxes"], torch.ones(2, 4))
