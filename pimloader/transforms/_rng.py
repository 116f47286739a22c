"""Single random numbers from torch's generators, as torch.rand(1) and torch.randint(low,
high, (1,)) draw them, without a new tensor per draw.

torch.rand(size) is torch.empty(size).uniform_() and torch.randint(low, high, size) is
torch.empty(size, dtype=torch.int64).random_(low, high): the same kernels on the same
generator, so filling a kept one-element tensor in place draws exactly the same numbers and
leaves the generator in the same state (tests/test_audio_waveform_native.py replays both).
Per-clip transforms draw a dozen such numbers, and a new tensor per draw was most of their
cost. The kept tensors are per thread.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch

_kept = threading.local()


def _scratch(dtype: torch.dtype) -> torch.Tensor:
    tensors = getattr(_kept, "tensors", None)
    if tensors is None:
        tensors = _kept.tensors = {torch.float32: torch.empty(1),
                                   torch.int64: torch.empty(1, dtype=torch.int64)}
    return tensors[dtype]


def rand1(generator: Optional[torch.Generator] = None) -> float:
    """float(torch.rand(1, generator=generator)): a float32 in [0, 1), held exactly."""
    return _scratch(torch.float32).uniform_(generator=generator).item()


def randint1(low: int, high: int, generator: Optional[torch.Generator] = None) -> int:
    """int(torch.randint(low, high, (1,), generator=generator))."""
    return _scratch(torch.int64).random_(low, high, generator=generator).item()
