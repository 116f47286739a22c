"""Where the fused kernel writes: the address and extent of an output batch, and the row
and plane pitch of one that is a strided view (the corners of a padded batch).

The kernel writes sample i's slot at `dst_offset` from the batch's address; row y of
channel plane c at c * plane + y * row bytes from the slot (NCHW; NHWC rows hold the
channels interleaved). A contiguous batch has row = width (x channels) x element size and
plane = height x row; a view such as `padded[:, :, :h, :w]` has its parent's pitches.
"""
from __future__ import annotations

import numpy as np
import torch

from .structs import ffi


def output_pitch(strides, layout: str, esize: int, channels: int):
    """The kernel's pim_out_pitch_t fields (bytes between output rows, between channel
    planes) of an output batch with element `strides`: its pixels must lie along rows (the
    last stride 1, or `channels` for NHWC, whose channels are then stride 1)."""
    strides = tuple(int(v) for v in strides)
    if len(strides) != 4 or min(strides) < 0:
        raise ValueError(f"out strides {strides} are not those of a 4-d batch view")
    if layout == "NHWC":
        if strides[3] != 1 or strides[2] != channels:
            raise ValueError(f"an NHWC out needs interleaved pixels (strides [..., {channels}, "
                             f"1]), got strides {strides}")
        return strides[1] * esize, 0
    if strides[3] != 1:
        raise ValueError(f"an NCHW out needs rows of adjacent pixels (last stride 1), got "
                         f"strides {strides}")
    return strides[2] * esize, strides[1] * esize


def out_span(out) -> tuple[int, int]:
    """(address, bytes from it to the end of the last element) of a CPU torch tensor with
    non-negative strides, which may be a strided view."""
    if not isinstance(out, torch.Tensor) or out.device.type != "cpu":
        return out_address(out)
    if out.numel() == 0 or out.is_contiguous():
        return out_address(out)
    if min(out.stride()) < 0:
        raise ValueError("out must have non-negative strides")
    last = sum((size - 1) * stride for size, stride in zip(out.shape, out.stride()))
    return out.data_ptr(), (last + 1) * out.element_size()


def out_address(out) -> tuple[int, int]:
    """(address, byte length) of a C-contiguous CPU torch tensor or writeable numpy array."""
    if isinstance(out, torch.Tensor):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("out must be a contiguous CPU tensor")
        return out.data_ptr(), out.numel() * out.element_size()
    if isinstance(out, np.ndarray):
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable C-contiguous array")
        return out.ctypes.data, out.nbytes
    raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, not {type(out).__name__}")


def out_pointer(out) -> tuple:
    """(cffi uint8_t *, byte length) of a contiguous `out` (see out_address)."""
    address, nbytes = out_address(out)
    return ffi.cast("uint8_t *", address), nbytes
