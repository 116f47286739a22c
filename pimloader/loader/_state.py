"""What a loader keeps across its iterators: epoch statistics, its slot pools, and what the
main process opened for its producers with `num_workers=0` (its pipeline's backends: DPU
sets), in a ProcessResources.

Iterators hold this object rather than the loader, so that a loader and its persistent
iterator do not form a reference cycle (their workers then stop as soon as the loader is
dropped, not at the next garbage collection).
"""
from __future__ import annotations

import weakref

import torch

from ._pin import register_slot
from ._stats import EpochStats
from .resources import ProcessResources
from .slots import SlotPool, SlotWriter


class LoaderState:
    def __init__(self, kernel_backend: tuple[str, bool] = ("", False), path=None) -> None:
        self.kernel_backend = kernel_backend  # the pipeline's, as each EpochStats says it
        self.path = path                      # tasks.LoaderPath: which path, and why
        self.history: list[EpochStats] = []
        self._shared_pool: SlotPool | None = None
        self._local: tuple[bool, SlotPool, SlotWriter] | None = None
        self.resources = ProcessResources()  # the main process's, for num_workers=0
        weakref.finalize(self, _close_quietly, self.resources)  # a safety net: call close()
        self.tracker = None  # the current epoch's position, for state_dict() (_resume.py)
        self.group = None    # this job's side of a coordinated-prep group (_coordinated.py)
        self.publish = None  # its producer's hook for each delivered batch

    def begin_epoch(self) -> EpochStats:
        backend, dpu_decode = self.kernel_backend
        task, why = (self.path.task, self.path.why) if self.path is not None else ("", "")
        self.history.append(EpochStats(epoch=len(self.history), backend=backend,
                                       dpu_decode=dpu_decode, task=task, path=why))
        return self.history[-1]

    def take_shared_pool(self, num_workers: int, pinned: bool) -> SlotPool:
        """The pool for one multi-process iterator; an iterator running beside it gets its own."""
        pool, self._shared_pool = self._shared_pool, None
        if pool is None or pool.num_producers != num_workers or pool.pinned != pinned:
            pool = SlotPool(num_workers, shared=True,
                            register=register_slot if pinned else None)
        return pool

    def release_buffers(self) -> None:
        """Drop the slots kept for later epochs (batches the user holds stay valid)."""
        self._shared_pool = None
        self._local = None

    def close_resources(self) -> None:
        """Free what the main process opened for its producers (backends: DPU sets)."""
        self.resources.close()

    def return_shared_pool(self, pool: SlotPool) -> None:
        pool.release_unlent()
        self._shared_pool = pool

    def local_slots(self, pinned: bool) -> tuple[SlotPool, SlotWriter]:
        """The main process's own slots (num_workers=0), kept across epochs; in shared
        memory when a coordinated-prep group reads them too."""
        kind = (pinned, self.publish is not None)
        if self._local is None or self._local[0] != kind:
            pool = SlotPool(1, shared=False)
            allocate = _ALLOCATORS[kind]
            self._local = (kind, pool, SlotWriter(0, pool.flags, allocate))
        return self._local[1], self._local[2]

    def close_group(self) -> None:
        """Leave the coordinated-prep group, if this loader is in one."""
        group, self.group, self.publish = self.group, None, None
        if group is not None:
            group.close()


def _allocate_plain(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def _allocate_pinned(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def _allocate_shared(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8).share_memory_()


def _allocate_shared_pinned(nbytes: int) -> torch.Tensor:
    buffer = _allocate_shared(nbytes)
    register_slot(buffer)
    return buffer


_ALLOCATORS = {(False, False): _allocate_plain, (True, False): _allocate_pinned,
               (False, True): _allocate_shared, (True, True): _allocate_shared_pinned}


def _close_quietly(resources: ProcessResources) -> None:
    try:
        resources.close()
    except Exception:
        pass
