"""Steps 1 and 6 of the flow, sample and deliver: `PIMDataLoader`, its single- and
multi-process iterators, workers, fetchers, producers, batch slots and their layouts,
pinning and per-epoch statistics."""
from ._stats import EpochStats
from .dataloader import PIMDataLoader

__all__ = ["PIMDataLoader", "EpochStats"]
