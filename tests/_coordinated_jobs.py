"""Jobs of a coordinated-prep group (share_with=), for tests/test_coordinated_prep.py: at
module level so that spawned processes can import them."""
from __future__ import annotations

import glob
import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset

from pimloader import PIMDataLoader

BATCH_SIZE = 4


class CountingDataset(Dataset):
    """Samples that depend on the index and on the fetching process's torch RNG (so worker
    seeds matter); each fetch appends the index to `log`, one line per fetch (O_APPEND
    writes of a few bytes: whole lines, from any number of processes)."""

    def __init__(self, size: int = 30, log: str | None = None) -> None:
        self.size, self.log = size, log

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if self.log is not None:
            with open(self.log, "a") as log:
                log.write(f"{index}\n")
        image = torch.arange(12, dtype=torch.float32).view(3, 2, 2) * index + torch.rand(1)
        return image, index


def make_loader(dataset, num_workers: int, loader_class=PIMDataLoader, **extra):
    """The loader every job builds alike. With num_workers=0 the samples' random numbers
    come from the process's global RNG, which every job (and each oracle) seeds alike."""
    torch.manual_seed(11)
    if num_workers:  # a spawned job's loader would spawn its workers too (slow here)
        extra.setdefault("multiprocessing_context", "fork")
    return loader_class(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=num_workers,
                        generator=torch.Generator().manual_seed(7), **extra)


def reference_batches(num_workers: int, epochs: int, loader_class=PIMDataLoader,
                      size: int = 30) -> list:
    loader = make_loader(CountingDataset(size), num_workers, loader_class)
    return [(x.clone(), y.clone()) for _ in range(epochs) for x, y in loader]


def torch_reference(num_workers: int, epochs: int, size: int = 30) -> list:
    return reference_batches(num_workers, epochs, DataLoader, size)


def job(name: str, jobs: int, num_workers: int, epochs: int, out: str, log: str | None = None,
        die_after: int | None = None, size: int = 30, kill_worker_at: int | None = None,
        **extra) -> None:
    """One job of group `name`: iterate `epochs` epochs and save its batches to `out`; with
    `die_after`, write the pids of its children (its workers, if it produces) next to `out`
    and kill itself with SIGKILL once it has that many batches; with `kill_worker_at`, its
    dataset is a WorkerKillingDataset (and the job's error, if any, is saved to `out`)."""
    dataset = (CountingDataset(size, log) if kill_worker_at is None
               else WorkerKillingDataset(kill_worker_at, size))
    loader = make_loader(dataset, num_workers, share_with=name, share_jobs=jobs, **extra)
    if kill_worker_at is not None:
        try:
            list(loader)
        except RuntimeError as error:
            torch.save({"error": f"{type(error).__name__}: {error}"}, out)
        loader.close()
        return
    batches = []
    for _ in range(epochs):
        for image, label in loader:
            batches.append((image.clone(), label.clone()))
            if die_after is not None and len(batches) == die_after:
                with open(out + ".children", "w") as children:
                    children.write(" ".join(_children()))
                os.kill(os.getpid(), signal.SIGKILL)
    stats = [(s.samples, s.fetch_s) for s in loader.stats()]
    loader.close()
    torch.save({"batches": batches, "stats": stats}, out)


def _children() -> list[str]:
    kids = []
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(path) as f:
            kids += f.read().split()
    return kids


class FailingDataset(CountingDataset):
    """CountingDataset whose sample `bad` raises ValueError."""

    def __init__(self, bad: int, size: int = 30) -> None:
        super().__init__(size)
        self.bad = bad

    def __getitem__(self, index: int):
        if index == self.bad:
            raise ValueError(f"sample {index} is broken")
        return super().__getitem__(index)


class WorkerKillingDataset(CountingDataset):
    """CountingDataset whose sample `victim`, fetched in a worker process, SIGKILLs that
    worker (in a main process it is an ordinary sample)."""

    def __init__(self, victim: int, size: int = 30) -> None:
        super().__init__(size)
        self.victim = victim

    def __getitem__(self, index: int):
        if index == self.victim and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)
