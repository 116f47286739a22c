"""Steering where the next large mmap of this process lands (Linux, 64-bit), for tests of
where the emulator maps a DPU's copy of a kernel.

Linux hands out mmap addresses top-down: a mapping goes into the highest free gap below the
mmap area's top that fits it. Reserving (PROT_NONE, MAP_NORESERVE: address space only) every
gap from `base + span` up to that top makes the next mapping of `span` bytes land at `base`.
Run this in a process of its own: the reservations stay until it exits.
"""
from __future__ import annotations

import ctypes
import struct
import subprocess

PAGE = 4096
PROT_NONE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0, 0x02, 0x20, 0x4000, 0x100000
PT_LOAD = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def mappings():
    """(start, end, name) of every mapping of this process."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            out.append((start, end, fields[5].strip() if len(fields) > 5 else ""))
    return sorted(out)


def object_span(path: str) -> int:
    """Bytes of address space a shared object takes once loaded (its PT_LOAD segments)."""
    with open(path, "rb") as f:
        elf = f.read()
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    end = 0
    for i in range(phnum):
        p_type, _, _, vaddr, _, _, memsz, _ = struct.unpack_from("<IIQQQQQQ", elf, phoff + i * phentsize)
        if p_type == PT_LOAD:
            end = max(end, vaddr + memsz)
    return (end + PAGE - 1) & ~(PAGE - 1)


def symbol_offset(path: str, name: str) -> int:
    """A symbol's offset in a shared object (nm)."""
    for line in subprocess.run(["nm", path], check=True, capture_output=True, text=True).stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == name:
            return int(fields[0], 16)
    raise KeyError(name)


def steer_next_mapping(span: int, boundary_at: int) -> int:
    """Makes the next mapping of `span` bytes land where its byte `boundary_at` (give or take
    a page) is a 4 GB boundary of the address space, below everything mapped now; returns
    that boundary."""
    stack = min(start for start, _, name in mappings() if name == "[stack]")
    top = max(end for _, end, name in mappings() if end < stack and not name.startswith("["))
    lowest = min(start for start, _, name in mappings() if start >= 1 << 40 and not name.startswith("["))
    boundary = ((lowest - span - (1 << 33)) >> 32) << 32
    base = (boundary - boundary_at) & ~(PAGE - 1)
    for _ in range(100000):  # a gap at a time: mappings may come and go meanwhile
        gap = _first_gap(base + span, top)
        if gap is None:
            return boundary
        _libc.mmap(gap[0], gap[1] - gap[0], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0)
    raise RuntimeError("could not reserve the address space above the target")


def _first_gap(lo: int, hi: int):
    cur = lo
    for start, end, _ in mappings():
        if end <= cur:
            continue
        if start >= hi:
            break
        if start > cur:
            return cur, start
        cur = end
    return (cur, hi) if cur < hi else None
