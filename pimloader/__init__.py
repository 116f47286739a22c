"""pimloader: a drop-in torch DataLoader that moves memory-bound preprocessing off the CPUs."""
from torch.utils.data import get_worker_info

from ._stats import EpochStats
from .loader import PIMDataLoader

__all__ = ["PIMDataLoader", "EpochStats", "get_worker_info"]
__version__ = "0.1.0"
