"""Mapping a shared buffer's pages before it is written."""
from __future__ import annotations

import ctypes
import mmap

import torch


def populate_for_writing(buffer: torch.Tensor) -> int:
    """Map every page of a shared buffer into this process before writing it.

    A worker maps its slots afresh (a fork does not copy the page tables of shared
    mappings), and faulting them in one page at a time costs more than the copy itself;
    one madvise(MADV_POPULATE_WRITE) (Linux 5.14+) maps them all. Only a hint: where the
    kernel lacks it, the pages fault in as they are written. Returns madvise's errno (0:
    done; EINVAL: not supported; EFAULT: a page could not be allocated, /dev/shm full)."""
    start, length = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    first = start - start % _PAGE_SIZE
    last = start + length
    if _LIBC is None or not length:
        return 0
    if _LIBC.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first),
                     _MADV_POPULATE_WRITE) == 0:
        return 0
    return ctypes.get_errno()


def _load_libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()
_PAGE_SIZE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23
