"""Where torch's CPU elementwise loops round a multiply-add once, asked of torch itself.

torch computes `x.add_(y, alpha=k)` (the blends and grayscale of torchvision's colour ops)
in steps of two vectors, whose multiply-adds round once where the CPU has FMA, and the
values past the last whole step with scalar code, which the compiler that built torch may
or may not have fused, and not alike for every value of that tail (csrc/include/
pim_torch_loops.h). `torch_loop_profile` finds out, per kind of loop (y one value, as
contrast's mean; y a tensor walked with x, as the gray image), how many values a step takes
and which values of a tail of each length round once, with operands whose two roundings
differ; `install` tells the C kernel, once per process.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch

from .structs import lib

RATIO = 2.0 ** -23     # 189 * RATIO + (1 - RATIO) * 196: 196.0 rounded once, less twice
X, Y, ONCE = 189, 196.0, 196.0
BLOCKS = (1, 2, 4, 8, 16, 32, 64)     # candidate values per step; the C side takes <= 64
_installed_in: list = [None]          # the pid whose kernel was told


def _rounds_once(n: int, broadcast: bool) -> np.ndarray:
    """Which of n values of `x.mul(r).add_(y, alpha=1 - r)` torch rounds once."""
    x = torch.full((n,), X, dtype=torch.uint8)
    y = torch.full((1,) if broadcast else (n,), Y)
    return (x.mul(RATIO).add_(y, alpha=1.0 - RATIO) == ONCE).numpy()


def _block_and_tails(patterns: list) -> tuple[int, list]:
    """The smallest step whose whole steps round once and whose tails (patterns of fewer
    values) explain every probed length; (0, zeros) where none does (torch fuses nothing
    here, or in a way not modelled: the kernel then rounds every value as the vectors)."""
    for block in BLOCKS:
        if all(np.array_equal(pattern[:len(pattern) - len(pattern) % block],
                              np.ones(len(pattern) - len(pattern) % block, bool))
               and np.array_equal(pattern[len(pattern) - len(pattern) % block:],
                                  patterns[len(pattern) % block])
               for pattern in patterns):
            tails = [sum(1 << j for j, once in enumerate(patterns[t]) if once)
                     for t in range(block)]
            return block, tails + [0] * (lib.PIM_TORCH_MAX_BLOCK - block)
    return 0, [0] * lib.PIM_TORCH_MAX_BLOCK


@lru_cache(maxsize=1)
def torch_loop_profile() -> tuple[tuple[int, int], tuple[int, ...]]:
    """(blocks, tails) per kind (PIM_TORCH_BROADCAST, PIM_TORCH_ELEMENTWISE), as
    pim_torch_loops_set takes them. Probed below torch's parallel grain: one chunk."""
    blocks, tails = [0, 0], [0] * (2 * lib.PIM_TORCH_MAX_BLOCK)
    for kind, broadcast in ((lib.PIM_TORCH_BROADCAST, True),
                            (lib.PIM_TORCH_ELEMENTWISE, False)):
        patterns = [_rounds_once(n, broadcast) for n in range(2 * lib.PIM_TORCH_MAX_BLOCK + 1)]
        blocks[kind], kind_tails = _block_and_tails(patterns)
        tails[kind * lib.PIM_TORCH_MAX_BLOCK:(kind + 1) * lib.PIM_TORCH_MAX_BLOCK] = kind_tails
    return tuple(blocks), tuple(tails)


def install() -> None:
    """Tell this process's kernel how torch's loops round (cheap after the first call)."""
    if _installed_in[0] == os.getpid():
        return
    blocks, tails = torch_loop_profile()
    lib.pim_torch_loops_set(blocks, tails)
    _installed_in[0] = os.getpid()
