"""An order of a shard dataset's samples that is shuffled yet reads each shard forward.

    sampler = ShardOrderSampler(dataset, window=4, seed=0)   # dataset.shard_bounds
    sampler.set_epoch(epoch)
    DataLoader(dataset, sampler=sampler, ...)

Each epoch the shards are shuffled, then taken `window` at a time; within a window the
samples of its shards are interleaved at random, each shard's samples in their tar order.
So every read goes forward in its shard (over HTTP, one streaming GET per shard), while a
batch mixes `window` shards. With shuffle=False the order is the index order.
`num_replicas` / `rank` give each rank every num_replicas-th window of shards (the ranks'
sample counts then differ with the shards'); DistributedSampler also works on shard
datasets, at the cost of random reads.

It is stateful, as torchdata's samplers: `state_dict()` holds the seed, the epoch and how
many indices this epoch's iterator has given; after `load_state_dict()` the next iterator
continues from there (PIMDataLoader's mid-epoch resume restores it rather than replaying).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Sampler


class ShardOrderSampler(Sampler):
    def __init__(self, dataset, window: int = 4, shuffle: bool = True, seed: int = 0,
                 num_replicas: int = 1, rank: int = 0) -> None:
        if window < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"ShardOrderSampler: window >= 1 and 0 <= rank < num_replicas, "
                             f"got window={window}, rank={rank}, num_replicas={num_replicas}")
        self.bounds = np.asarray(dataset.shard_bounds, dtype=np.int64)
        self.window, self.shuffle, self.seed = window, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self.given = 0          # indices the current epoch's iterator has given
        self._start = 0         # where the next iterator starts (load_state_dict)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = self.order().tolist()
        start, self._start = self._start, 0
        self.given = start
        for index in order[start:]:
            self.given += 1
            yield index

    def state_dict(self) -> dict:
        return {"seed": self.seed, "epoch": self.epoch, "given": self.given}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.epoch = state["seed"], state["epoch"]
        self._start = self.given = state["given"]

    def __len__(self) -> int:
        return len(self.order())

    def order(self) -> np.ndarray:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        shards = len(self.bounds) - 1
        shard_order = (torch.randperm(shards, generator=generator).numpy() if self.shuffle
                       else np.arange(shards))
        windows = [shard_order[start:start + self.window]
                   for start in range(0, shards, self.window)]
        mine = windows[self.rank::self.num_replicas]
        parts = [self._interleave(window, generator) for window in mine]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _interleave(self, window, generator) -> np.ndarray:
        counts = self.bounds[window + 1] - self.bounds[window]
        labels = np.repeat(np.arange(len(window)), counts)
        if self.shuffle:
            labels = labels[torch.randperm(len(labels), generator=generator).numpy()]
        order = np.empty(len(labels), dtype=np.int64)
        for slot, shard in enumerate(window):
            where = labels == slot
            order[where] = np.arange(self.bounds[shard], self.bounds[shard + 1])
        return order
