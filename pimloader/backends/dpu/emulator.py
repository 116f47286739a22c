"""Python side of pimloader's libdpu emulator (`pimloader._dpuemu`, csrc/emulator/).

- `compile_kernel` builds an unchanged UPMEM DPU kernel source for the emulator with the host
  gcc: the DPU runtime headers of csrc/emulator/dpu_include, no floating point (the build
  fails on any), and the MRAM linker script.  The result is what `dpu_load` takes.
- `DpuSet` drives emulated DPUs from Python with the libdpu calls (tests, cost-model
  counts); every `dpu_error_t` becomes a `DpuError` naming the call and, for DPU faults,
  the emulator's message (the rule, the DPU, the tasklet and the source line).
- `DpuSet.counters()` reports the DMA and host-transfer counts of the cost model.

Emulated speed is not DPU speed: nothing here measures how fast a DPU would be.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from pimloader import _dpuemu, errors
from pimloader.errors import DpuBackendError
from pimloader.options import NR_TASKLETS
from pimloader._native_sources import native_source_root
from .toolchain import build_atomically, cache_folder, content_key, define_flags

ffi = _dpuemu.ffi
lib = _dpuemu.lib

_REPO = native_source_root()   # the checkout, or the copy an installed wheel ships
EMULATOR_DIR = os.path.join(_REPO, "csrc", "emulator")
DPU_INCLUDE = os.path.join(EMULATOR_DIR, "dpu_include")   # mram.h, defs.h, barrier.h, ...
RUNTIME_SOURCE = os.path.join(EMULATOR_DIR, "dpu_rt.c")
LINKER_SCRIPT = os.path.join(EMULATOR_DIR, "mram.ld")

MAX_TASKLETS = lib.DPUEMU_MAX_TASKLETS
MRAM_SIZE = lib.DPUEMU_MRAM_SIZE
WRAM_SIZE = lib.DPUEMU_WRAM_SIZE
HEAP_POINTER_NAME = "__sys_used_mram_end"  # DPU_MRAM_HEAP_POINTER_NAME

# What every kernel is built with.  -mgeneral-regs-only: no SSE/x87, so floating-point
# arithmetic cannot compile (a DPU has no FPU); dpuemu_nofloat.h poisons the type names.
# -Bsymbolic: a kernel's references to its own globals never bind to the host's symbols.
# -z defs: a kernel calling a DPU runtime function the emulator lacks fails to build.
KERNEL_CFLAGS = (
    "-std=gnu11", "-O2", "-fPIC", "-shared", "-fno-common", "-mgeneral-regs-only",
    "-Wall", "-Wno-pointer-to-int-cast", "-Wno-int-to-pointer-cast", "-Wno-unused-function",
)
KERNEL_LDFLAGS = ("-Wl,-Bsymbolic", "-Wl,-z,defs")


class KernelBuildError(RuntimeError):
    """The host compiler rejected a DPU kernel (its output is in the message)."""


ASYNC_JOBS = 1 << 31          # DPU_ERR_ASYNC_JOBS: a queued job of the rank failed earlier
ASYNC_JOB_TYPE_SHIFT = 16     # DPU_ERROR_ASYNC_JOB_TYPE_SHIFT


class DpuError(DpuBackendError):
    """A libdpu call on emulated DPUs returned an error.

    `code` is the dpu_error_t as returned; `error` its plain error (the low 16 bits: a failed
    asynchronous job comes back as DPU_ERR_ASYNC_JOBS | job type << 16 | error, as libdpu
    does); `asynchronous` says whether it was such a job's sticky error."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = int(code) & 0xFFFFFFFF
        self.asynchronous = bool(self.code & ASYNC_JOBS)
        self.error = self.code & ((1 << ASYNC_JOB_TYPE_SHIFT) - 1)
        self.detail = detail
        text = ffi.string(lib.dpu_error_to_string(self.code)).decode()
        super().__init__(f"{call}: {text} (dpu_error_t 0x{self.code:x})" + (f": {detail}" if detail else ""),
                         self.code)


class DpuFaultError(DpuError, errors.DpuFaultError):
    """A DPU faulted (a hardware rule broken); `detail` names the rule, DPU and tasklet.
    The libdpu call's error with its fields, and a `pimloader.DpuFaultError` like any other."""


def compile_kernel(source: str, output: Optional[str] = None, *, nr_tasklets: int = NR_TASKLETS,
                   defines: Optional[Mapping[str, object]] = None, include_dirs: Sequence[str] = (),
                   extra_cflags: Sequence[str] = (), cc: Optional[str] = None) -> str:
    """Build the DPU kernel `source` (a path) for the emulator; returns the shared object's path.

    `nr_tasklets` and `defines` become -D flags as for dpu-upmem-dpurte-clang; the default
    output is a file in a per-user cache keyed by the text of the source, of every header
    it can include and of the flags. NR_TASKLETS above 24 builds (the emulator rejects it
    at dpu_load, as the DPU linker script would).
    """
    cc = cc or os.environ.get("CC") or shutil.which("gcc") or "cc"
    flags = [*KERNEL_CFLAGS, f"-DNR_TASKLETS={int(nr_tasklets)}", *define_flags(defines)]
    flags += [f"-I{d}" for d in include_dirs] + [f"-I{DPU_INCLUDE}"]
    flags += ["-include", "dpuemu_nofloat.h"] + list(extra_cflags)
    if output is None:
        key = content_key([cc, *flags], [source, RUNTIME_SOURCE, LINKER_SCRIPT],
                          [*include_dirs, DPU_INCLUDE])
        stem = os.path.splitext(os.path.basename(source))[0]
        output = os.path.join(cache_folder("pimloader-dpuemu"), f"{stem}-{key}.so")
        if os.path.exists(output):
            return output
    return build_atomically(
        output, lambda partial: [cc, *flags, source, RUNTIME_SOURCE, f"-Wl,-T,{LINKER_SCRIPT}",
                                 *KERNEL_LDFLAGS, "-o", partial],
        f"building DPU kernel {source} for the emulator", error=KernelBuildError)


@dataclass
class Counters:
    """DMA and host-transfer counts of a DPU set (sums over its DPUs)."""
    nr_dpus: int
    nr_tasklets: int
    launches: int
    mram_read_calls: int
    mram_read_bytes: int
    mram_write_calls: int
    mram_write_bytes: int
    host_to_dpu_bytes: int
    dpu_to_host_bytes: int
    host_to_dpu_calls: int
    dpu_to_host_calls: int
    dma_cycles_model: int
    wram_static_bytes: int
    wram_heap_peak: int
    tasklets: list = field(default_factory=list)  # per tasklet id: dict of the four DMA counts

    @classmethod
    def _from_c(cls, c) -> "Counters":
        names = [f for f in cls.__dataclass_fields__ if f != "tasklets"]
        values = {name: int(getattr(c, name)) for name in names}
        per = [{k: int(getattr(c.tasklet[t], k)) for k in
                ("mram_read_calls", "mram_read_bytes", "mram_write_calls", "mram_write_bytes")}
               for t in range(max(int(c.nr_tasklets), 0))]
        return cls(tasklets=per, **values)


def _check(call: str, code: int, dpu_set=None) -> None:
    if code == lib.DPU_OK:
        return
    detail = ""
    if dpu_set is not None:
        buf = ffi.new("char[]", 1024)
        if lib.dpuemu_fault_message(dpu_set, buf, len(buf)) == lib.DPU_OK:
            detail = ffi.string(buf).decode(errors="replace")
    plain = int(code) & ((1 << ASYNC_JOB_TYPE_SHIFT) - 1)
    cls = DpuFaultError if plain == lib.DPU_ERR_DPU_FAULT else DpuError
    raise cls(call, code, detail)


def live_dpus() -> int:
    """DPUs allocated through `DpuSet`s of this process and not freed (the emulator's count;
    the image driver's module counts its own: driver.emulator_live_dpus adds both)."""
    n = ffi.new("uint32_t *")
    _check("dpuemu_live_dpus", lib.dpuemu_live_dpus(n))
    return int(n[0])


class DpuSet:
    """Emulated DPUs driven through the libdpu API (`with DpuSet(n) as dpus: ...`)."""

    def __init__(self, nr_dpus: int = 1, profile: str = "", *, ranks: bool = False) -> None:
        self._set = ffi.new("struct dpu_set_t *")
        if ranks:
            _check("dpu_alloc_ranks", lib.dpu_alloc_ranks(nr_dpus, profile.encode(), self._set))
        else:
            _check("dpu_alloc", lib.dpu_alloc(nr_dpus, profile.encode(), self._set))
        self._open = True
        self._buffers = []  # keeps prepared host buffers alive until the transfer

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        if self._open:
            self._open = False
            _check("dpu_free", lib.dpu_free(self._set[0]))

    def __enter__(self) -> "DpuSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def set(self):
        return self._set[0]

    @property
    def nr_dpus(self) -> int:
        n = ffi.new("uint32_t *")
        _check("dpu_get_nr_dpus", lib.dpu_get_nr_dpus(self.set, n))
        return int(n[0])

    @property
    def nr_ranks(self) -> int:
        n = ffi.new("uint32_t *")
        _check("dpu_get_nr_ranks", lib.dpu_get_nr_ranks(self.set, n))
        return int(n[0])

    def dpu(self, index: int):
        out = ffi.new("struct dpu_set_t *")
        _check("dpuemu_get_dpu", lib.dpuemu_get_dpu(self.set, index, out))
        return out[0]

    # -- program -------------------------------------------------------------------------
    def load(self, binary_path: str) -> None:
        _check(f"dpu_load({binary_path})", lib.dpu_load(self.set, binary_path.encode(), ffi.NULL), self.set)

    def launch(self, synchronous: bool = True) -> None:
        policy = lib.DPU_SYNCHRONOUS if synchronous else lib.DPU_ASYNCHRONOUS
        _check("dpu_launch", lib.dpu_launch(self.set, policy), self.set)

    def sync(self, rank: Optional[int] = None) -> None:
        """dpu_sync on the set, or on one of its ranks (`rank`)."""
        target = self.set if rank is None else self.rank(rank)
        try:
            _check("dpu_sync", lib.dpu_sync(target), target)
        finally:
            if rank is None:
                self._buffers.clear()

    def rank(self, index: int):
        """The index-th rank of the set, as a one-rank set."""
        if not 0 <= index < self.nr_ranks:
            raise IndexError(f"no rank {index}")
        out = ffi.new("struct dpu_set_t *")
        out.kind = lib.DPU_SET_RANKS
        out.list.nr_ranks = 1
        out.list.ranks = self.set.list.ranks + index
        return out[0]

    # -- emulator-only views of the queues (no libdpu equivalent) ------------------------
    def wait_idle(self) -> None:
        """Waits until every rank's queue ran out, without consuming an error as sync would."""
        _check("dpuemu_wait_idle", lib.dpuemu_wait_idle(self.set))

    def nr_running(self, target=None) -> int:
        n = ffi.new("uint32_t *")
        _check("dpuemu_nr_running", lib.dpuemu_nr_running(self.set if target is None else target, n))
        return int(n[0])

    def queued_jobs(self, target=None) -> int:
        n = ffi.new("uint32_t *")
        _check("dpuemu_queued_jobs", lib.dpuemu_queued_jobs(self.set if target is None else target, n))
        return int(n[0])

    def hold_launches(self, hold: bool, target=None) -> None:
        """Test hook: launches on these ranks boot their DPUs (running) but do not start
        them until released, so that a launch has certainly not ended."""
        _check("dpuemu_hold_launches",
               lib.dpuemu_hold_launches(self.set if target is None else target, bool(hold)))

    def status(self) -> tuple:
        done, fault = ffi.new("bool *"), ffi.new("bool *")
        _check("dpu_status", lib.dpu_status(self.set, done, fault))
        return bool(done[0]), bool(fault[0])

    def fault_message(self, index: Optional[int] = None) -> str:
        target = self.set if index is None else self.dpu(index)
        buf = ffi.new("char[]", 1024)
        _check("dpuemu_fault_message", lib.dpuemu_fault_message(target, buf, len(buf)))
        return ffi.string(buf).decode(errors="replace")

    def log(self, index: int = 0) -> str:
        ptr, size = ffi.new("char **"), ffi.new("size_t *")
        stream = lib.open_memstream(ptr, size)
        if stream == ffi.NULL:
            raise OSError("open_memstream failed")
        try:
            code = lib.dpu_log_read(self.dpu(index), stream)
        finally:
            lib.fclose(stream)
        text = ffi.string(ptr[0], size[0]).decode(errors="replace") if ptr[0] != ffi.NULL else ""
        lib.free(ptr[0])
        _check("dpu_log_read", code)
        return text

    # -- transfers -----------------------------------------------------------------------
    def copy_to(self, symbol: str, data, offset: int = 0, index: Optional[int] = None) -> None:
        buf = np.ascontiguousarray(data)
        target = self.set if index is None else self.dpu(index)
        _check(f"dpu_copy_to({symbol})", lib.dpu_copy_to(target, symbol.encode(), offset,
                                                         ffi.from_buffer(buf), buf.nbytes))

    def copy_from(self, symbol: str, nbytes: int, offset: int = 0, index: int = 0) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        _check(f"dpu_copy_from({symbol})", lib.dpu_copy_from(self.dpu(index), symbol.encode(), offset,
                                                             ffi.from_buffer(out), nbytes))
        return out

    def broadcast(self, symbol: str, data, offset: int = 0) -> None:
        buf = np.ascontiguousarray(data)
        _check(f"dpu_broadcast_to({symbol})", lib.dpu_broadcast_to(
            self.set, symbol.encode(), offset, ffi.from_buffer(buf), buf.nbytes, lib.DPU_XFER_DEFAULT))

    def push(self, symbol: str, per_dpu: Sequence, offset: int = 0, to_dpu: bool = True,
             asynchronous: bool = False) -> None:
        """dpu_prepare_xfer per DPU + one dpu_push_xfer; all buffers have the same length.

        `asynchronous`: DPU_XFER_ASYNC, queued behind the ranks' earlier jobs; the buffers
        must stay alive (and, to the DPU, unchanged) until `sync()` returns."""
        buffers = [np.ascontiguousarray(b) for b in per_dpu]
        if len(buffers) != self.nr_dpus or len({b.nbytes for b in buffers}) != 1:
            raise ValueError("push needs one buffer per DPU, all of the same length")
        for i, b in enumerate(buffers):
            if not to_dpu and not b.flags.writeable:
                raise ValueError("push from DPUs needs writable buffers")
            _check("dpu_prepare_xfer", lib.dpu_prepare_xfer(self.dpu(i), ffi.from_buffer(b)))
        xfer = lib.DPU_XFER_TO_DPU if to_dpu else lib.DPU_XFER_FROM_DPU
        flags = lib.DPU_XFER_ASYNC if asynchronous else lib.DPU_XFER_DEFAULT
        if asynchronous:
            self._buffers.extend(buffers)
        _check(f"dpu_push_xfer({symbol})", lib.dpu_push_xfer(self.set, xfer, symbol.encode(), offset,
                                                             buffers[0].nbytes, flags), self.set)

    def gather(self, symbol: str, nbytes: int, offset: int = 0) -> np.ndarray:
        """One dpu_push_xfer(FROM_DPU) into a (nr_dpus, nbytes) array."""
        out = np.zeros((self.nr_dpus, nbytes), np.uint8)
        self.push(symbol, list(out), offset, to_dpu=False)
        return out

    # -- counters ------------------------------------------------------------------------
    def counters(self, index: Optional[int] = None) -> Counters:
        c = ffi.new("struct dpuemu_counters *")
        target = self.set if index is None else self.dpu(index)
        _check("dpuemu_get_counters", lib.dpuemu_get_counters(target, c))
        return Counters._from_c(c)

    def reset_counters(self) -> None:
        _check("dpuemu_reset_counters", lib.dpuemu_reset_counters(self.set))
