"""Page-locking batches for fast, asynchronous host-to-GPU copies.

Slots are registered with the CUDA driver once (cudaHostRegister), so every batch later
lent from them is already pinned and nothing is copied per batch. Batches of the ordinary
path are pinned by copying, as torch's DataLoader does.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils.data._utils.pin_memory import pin_memory as _pin_by_copy


def pin_collated(data, device: str):
    return _pin_by_copy(data, device)


def register_slot(buffer: torch.Tensor) -> None:
    """Page-lock a slot's memory in place for as long as the buffer object lives."""
    if not torch.cuda.is_available() or buffer.numel() == 0:
        return
    cudart = torch.cuda.cudart()
    pointer, nbytes = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    status = cudart.cudaHostRegister(pointer, nbytes, 0)
    if int(status) != 0:
        raise RuntimeError(
            f"cudaHostRegister of a {nbytes}-byte batch slot failed: "
            f"{cudart.cudaGetErrorString(status)}")
    weakref.finalize(buffer, cudart.cudaHostUnregister, pointer)
