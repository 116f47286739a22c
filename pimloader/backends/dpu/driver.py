"""The DPU backend of the fused crop + resize + flip + convert step.

`DpuDriver` drives the host driver of csrc/dpu_driver.c (libdpu API only) through a cffi
module: `pimloader._dpu_emulated` (the driver built against pimloader's libdpu emulator;
always present) or `pimloader._dpu_upmem` (built against UPMEM's SDK when setup.py found it;
see docs/dpu.md). The kernel is dpu_src/crop_resize.c: for the emulator it is compiled with
the host gcc by `pimloader.backends.dpu.emulator.compile_kernel`; for DPUs with UPMEM's
dpu-upmem-dpurte-clang by `pimloader.backends.dpu.toolchain.build_kernel` (or pass `binary=`).

`run` takes the arguments of `pimloader.backends.kernels.resized_crop_batch` and reuses its
`pack_batch` (descriptors + axis tables) and lookup tables, so both backends read the same
plan and agree bit for bit. `submit` takes the same arguments, queues the batch on the DPUs
(libdpu's asynchronous transfers and launch) and returns a `DpuBatch` whose `wait()` fills
the output; `run` is `submit(...).wait()`. At most `max_pending` (2) batches are in flight. Errors come back as `DpuBackendError` (or a subclass) naming the
libdpu call and the DPU. Speed under the emulator is not DPU speed.
"""
from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from pimloader._native_sources import native_source_root
from pimloader.backends import kernels as K
from pimloader.errors import DpuBackendError, DpuFaultError, DpuKernelError
from pimloader.options import NR_DPUS, NR_TASKLETS

_REPO = native_source_root()   # the checkout, or the copy an installed wheel ships
KERNEL_SOURCE = os.path.join(_REPO, "dpu_src", "crop_resize.c")
KERNEL_INCLUDES = (os.path.join(_REPO, "include"),)  # the headers shared by the kernel and the host
DEFAULT_STACK_BYTES = 1024
ALL_DPUS = 0xFFFFFFFF  # DPU_ALLOCATE_ALL


@dataclass(frozen=True)
class MramSource:
    """A sample's source that a stage before the kernel left in its DPU's MRAM
    (`DpuDriver.run_stage`): `height` rows of `width` x `channels` uint8 pixels, `pitch`
    bytes apart, from `offset` (from DPU_MRAM_HEAP_POINTER, 8-byte aligned). The sample must
    land on that DPU: the stage packs by the split `plan_chunks` gives."""
    offset: int
    height: int
    width: int
    channels: int
    pitch: int

    @property
    def shape(self) -> tuple:
        return (self.height, self.width, self.channels)

    def stand_in(self) -> np.ndarray:
        """An array of the source's shape for planning, over one row of zeros (rows alias):
        never read by the driver, which reads the source in MRAM."""
        row = np.zeros(self.width * self.channels, np.uint8)
        return np.lib.stride_tricks.as_strided(row, self.shape, (0, self.channels, 1), writeable=False)


@dataclass
class DpuCounters:
    """DMA counts of one DPU (or the set) from the emulator since the last reset."""
    mram_read_calls: int
    mram_read_bytes: int
    mram_write_calls: int
    mram_write_bytes: int
    host_to_dpu_bytes: int
    dpu_to_host_bytes: int
    launches: int
    dma_cycles_model: int
    wram_static_bytes: int
    wram_heap_peak: int


def driver_module(emulated: bool):
    """The cffi module of the driver: the emulator build, or the UPMEM SDK build."""
    name = "pimloader._dpu_emulated" if emulated else "pimloader._dpu_upmem"
    missing = ("the UPMEM SDK build of the DPU driver (pimloader._dpu_upmem) is missing: install the SDK "
               "(dpu-pkg-config on the PATH or UPMEM_HOME) and rebuild (see docs/dpu.md)")
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        if emulated:
            raise
        raise DpuBackendError(missing) from exc
    if not hasattr(mod, "lib"):  # csrc/build_dpu_upmem.py's placeholder: built without the SDK
        raise DpuBackendError(missing)
    return mod


def emulator_live_dpus() -> int:
    """DPUs this process allocated on the emulator and has not freed: through the driver (the
    image kernel) and through `emulator.DpuSet` (the audio kernel), two builds of the
    emulator that count apart."""
    from .emulator import live_dpus
    return int(driver_module(True).lib.pim_dpu_emulator_live_dpus()) + live_dpus()


def build_kernel(nr_tasklets: int, stack_bytes: int, emulated: bool, source: str = KERNEL_SOURCE) -> str:
    """A DPU kernel (dpu_src/crop_resize.c unless `source` names another, e.g.
    dpu_src/jpeg_decode.c) built for the emulator (host gcc) or for DPUs (UPMEM's
    dpu-upmem-dpurte-clang), with these NR_TASKLETS and STACK_SIZE_DEFAULT; cached."""
    defines = {"STACK_SIZE_DEFAULT": int(stack_bytes)}
    if emulated:
        from . import emulator as _emulator
        return _emulator.compile_kernel(source, nr_tasklets=nr_tasklets,
                                        include_dirs=KERNEL_INCLUDES, defines=defines)
    from .toolchain import ToolchainError, build_kernel as build_for_dpus
    try:
        return build_for_dpus(source, nr_tasklets=nr_tasklets, defines=defines,
                              include_dirs=KERNEL_INCLUDES)
    except ToolchainError as error:
        raise DpuBackendError(f"DPU backend: {error}") from error


class DpuDriver:
    """DPUs running the fused kernel: `with DpuDriver(64, 16) as dpus: dpus.run(...)`."""

    def __init__(self, nr_dpus: int = NR_DPUS, nr_tasklets: int = NR_TASKLETS, profile: str = "", emulated: bool = True,
                 *, binary: Optional[str] = None, stack_bytes: int = DEFAULT_STACK_BYTES) -> None:
        if not 1 <= int(nr_tasklets) <= 24:
            raise ValueError(f"nr_tasklets must be 1..24, got {nr_tasklets}")
        self._mod = driver_module(emulated)
        self.ffi, self.lib = self._mod.ffi, self._mod.lib
        self.emulated = bool(self.lib.pim_dpu_emulated())
        self.nr_tasklets = int(nr_tasklets)
        self.stack_bytes = int(stack_bytes)
        if binary is None:
            binary = build_kernel(self.nr_tasklets, int(stack_bytes), emulated)
        if profile == "" and emulated:
            profile = "backend=emulator"
        self.binary = binary
        out = self.ffi.new("pim_dpu_driver_t **")
        err = self.ffi.new("char[]", 1024)
        count = ALL_DPUS if nr_dpus in (None, "all", ALL_DPUS) else int(nr_dpus)
        rc = self.lib.pim_dpu_open(profile.encode(), count, binary.encode(), self.nr_tasklets, int(stack_bytes),
                                   out, err, len(err))
        if rc != 0:
            raise DpuBackendError(f"DPU backend: {self.ffi.string(err).decode(errors='replace')}", rc)
        self._drv = out[0]
        self._lock = threading.RLock()
        self.nr_dpus = int(self.lib.pim_dpu_nr_dpus(self._drv))

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the DPUs. Batches still in flight are run out and dropped (their `wait()`
        then raises): libdpu can neither take back a queued job nor stop a launch."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            self._drv = None
            return
        with lock:
            drv, self._drv = getattr(self, "_drv", None), None
            if drv is not None:
                err = self.ffi.new("char[]", 512)
                if self.lib.pim_dpu_close(drv, err, len(err)) != 0:
                    raise DpuBackendError(f"DPU backend: {self.ffi.string(err).decode(errors='replace')}")

    def __enter__(self) -> "DpuDriver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # a safety net only; call close()
        try:
            self.close()
        except Exception:
            pass

    def _driver(self):
        if self._drv is None:
            raise DpuBackendError("DPU backend is closed")
        return self._drv

    # -- running -------------------------------------------------------------------------
    def run(self, sources: Sequence, boxes, size: Sequence[int], out, hflip=None, vflip=None,
            interpolation: str = "bilinear", layout: str = "NCHW", lut: Optional[np.ndarray] = None,
            windows=None, *, debug: int = 0, debug_dpu: int = -1):
        """As `pimloader.backends.kernels.resized_crop_batch`, on the DPUs. Returns out.
        `debug`/`debug_dpu` are test hooks (PIM_DPU_DEBUG_HALT, PIM_DPU_DEBUG_CORRUPT)."""
        return self.submit(sources, boxes, size, out, hflip, vflip, interpolation, layout, lut, windows,
                           debug=debug, debug_dpu=debug_dpu).wait()

    def submit(self, sources: Sequence, boxes, size: Sequence[int], out, hflip=None, vflip=None,
               interpolation: str = "bilinear", layout: str = "NCHW", lut: Optional[np.ndarray] = None,
               windows=None, *, extra_work=None, keep=None, debug: int = 0,
               debug_dpu: int = -1) -> "DpuBatch":
        """Queues the batch on the DPUs and returns at once; `.wait()` on the result fills `out`.

        The arguments are those of `run`. Everything but `out` is copied into the driver's host
        staging before this returns (the sources may be released or reused at once); `out` is
        kept by the returned handle and written only by its `wait()`. At most
        `max_pending` batches may be in flight. Errors of the DPUs' work (a fault, a failed
        transfer) are raised by `wait()`; errors of the arguments are raised here.

        Sources may be `MramSource`s, left on the DPUs by `run_stage`: `keep` = (start, end)
        is then the MRAM they lie in on every DPU (the chunk is written below it, the
        outputs after it), and `extra_work` (per sample) the stage's estimated work, which the
        split weighs as `plan_chunks` did."""
        drv = self._driver()
        if keep is None and any(isinstance(source, MramSource) for source in sources):
            raise ValueError("sources in MRAM need keep=(start, end): the MRAM they lie in")
        batch = self._packed(sources, boxes, size, out, hflip, vflip, interpolation, layout, lut, windows,
                             extra_work, keep)
        if batch is None:
            return DpuBatch(self, 0, out)
        samples, tables, arrays, lut, mram, keep_alive = batch
        n = len(arrays)
        lut_ptr, lut_bytes = self.ffi.NULL, 0
        if lut is not None:
            lut_ptr, lut_bytes = self.ffi.cast("void *", self.ffi.from_buffer(lut)), lut.nbytes
        address, dst_bytes = K.out_address(out)
        dst = self.ffi.cast("uint8_t *", address)
        buffers = [self.ffi.from_buffer(a) if a.flags.c_contiguous else None for a in arrays]
        srcs = self.ffi.new("uint8_t *[]", [self.ffi.cast("uint8_t *", k) if k is not None
                                            else self.ffi.cast("uint8_t *", a.ctypes.data)
                                            for k, a in zip(buffers, arrays)])
        src_bytes = self.ffi.new("uint64_t[]", [(a.shape[0] - 1) * a.strides[0] + a.shape[1] * a.shape[2]
                                                for a in arrays])
        err = self.ffi.new("char[]", 1024)
        ticket = self.ffi.new("uint32_t *")
        with self._lock:
            rc = self.lib.pim_dpu_submit(drv, self.ffi.cast("pim_sample_t *", self.ffi.from_buffer(samples)), n,
                                         srcs, src_bytes, self.ffi.cast("uint8_t *", self.ffi.from_buffer(tables)),
                                         tables.nbytes, lut_ptr, lut_bytes, dst, dst_bytes, mram, int(debug),
                                         int(debug_dpu), ticket, err, len(err))
            if rc != 0:
                self._raise(rc, err)
        return DpuBatch(self, int(ticket[0]), out)

    def _packed(self, sources, boxes, size, out, hflip, vflip, interpolation, layout, lut, windows, extra_work,
                keep):
        """(descriptors, tables, HWC arrays, lookup table, pim_dpu_mram_sources_t or NULL, what
        must stay alive with it) of a batch, None when it is empty."""
        in_mram = [isinstance(source, MramSource) for source in sources]
        planned = [source.stand_in() if mram else source for source, mram in zip(sources, in_mram)]
        packed, arrays, lut = K.checked_batch(planned, boxes, size, out, hflip=hflip, vflip=vflip,
                                              interpolation=interpolation, layout=layout, lut=lut,
                                              windows=windows)
        if not arrays:
            return None
        samples = np.ascontiguousarray(packed.samples, dtype=K.SAMPLE_DTYPE)
        tables = np.ascontiguousarray(packed.tables, dtype=np.uint8)
        if not any(in_mram) and extra_work is None:
            return samples, tables, arrays, lut, self.ffi.NULL, ()
        offsets = np.full(len(arrays), int(self.lib.PIM_DPU_HOST_SOURCE), np.uint64)
        for i, source in enumerate(sources):
            if in_mram[i]:
                offsets[i] = source.offset
                samples["src_stride"][i] = source.pitch
        work = np.zeros(len(arrays), np.uint64) if extra_work is None else np.asarray(extra_work, np.uint64)
        if work.shape != (len(arrays),):
            raise ValueError(f"extra_work has {work.size} values for {len(arrays)} samples")
        mram = self.ffi.new("pim_dpu_mram_sources_t *")
        mram.offsets = self.ffi.cast("uint64_t *", self.ffi.from_buffer(offsets))
        mram.extra_work = self.ffi.cast("uint64_t *", self.ffi.from_buffer(work))
        mram.keep_from, mram.keep_to = (int(v) for v in (keep or (0, 0)))
        return samples, tables, arrays, lut, mram, (offsets, work)

    def plan_chunks(self, sources: Sequence, boxes, size: Sequence[int], out, hflip=None, vflip=None,
                    interpolation: str = "bilinear", layout: str = "NCHW", lut: Optional[np.ndarray] = None,
                    windows=None, *, extra_work=None) -> tuple[list, list]:
        """What `submit` with these arguments will plan (pim_dpu_plan_chunks): the split, as
        the first sample of each DPU (nr_dpus + 1 entries; DPUs without samples repeat the
        end), and the bytes each DPU's chunk will take in MRAM, so that a stage before the
        kernel can pack its own chunks for the same DPUs around it."""
        batch = self._packed(sources, boxes, size, out, hflip, vflip, interpolation, layout, lut, windows,
                             extra_work, None)
        if batch is None:
            return [0] * (self.nr_dpus + 1), [0] * self.nr_dpus
        samples, tables, arrays, lut, mram, keep_alive = batch
        first = self.ffi.new("uint32_t[]", self.nr_dpus + 1)
        chunk_bytes = self.ffi.new("uint64_t[]", self.nr_dpus)
        err = self.ffi.new("char[]", 1024)
        active = self.lib.pim_dpu_plan_chunks(
            self.ffi.cast("pim_sample_t *", self.ffi.from_buffer(samples)), len(arrays),
            self.ffi.cast("uint8_t *", self.ffi.from_buffer(tables)), tables.nbytes, 0 if lut is None else lut.nbytes,
            mram, self.nr_dpus, self.nr_tasklets, int(self.lib.pim_dpu_arena_bytes(self.nr_tasklets,
                                                                                  self.stack_bytes)),
            first, chunk_bytes, err, len(err))
        if active < 0:
            raise ValueError(f"DPU backend: {self.ffi.string(err).decode(errors='replace')}")
        starts = [int(first[d]) for d in range(active + 1)]
        return starts + [starts[-1]] * (self.nr_dpus - active), [int(chunk_bytes[d]) for d in range(self.nr_dpus)]

    def run_stage(self, binary: str, chunks: np.ndarray, status_off: int, status_bytes: int) -> np.ndarray:
        """A program run before the kernel on the same DPUs (pim_dpu_run_stage): dpu_load of
        `binary`, chunks[d] (one row of a (nr_dpus, xfer) uint8 array) pushed to DPU d's MRAM
        at DPU_MRAM_HEAP_POINTER, a synchronous launch, and the (nr_dpus, status_bytes) bytes
        at `status_off` gathered and returned. What it leaves in MRAM stays there for the next
        `submit` (MramSource). No batch may be in flight."""
        drv = self._driver()
        chunks = np.ascontiguousarray(chunks, dtype=np.uint8)
        if chunks.ndim != 2 or chunks.shape[0] != self.nr_dpus:
            raise ValueError(f"chunks must be (nr_dpus={self.nr_dpus}, bytes), got {chunks.shape}")
        statuses = np.zeros((self.nr_dpus, int(status_bytes)), np.uint8)
        err = self.ffi.new("char[]", 1024)
        with self._lock:
            self._stage_binary = self.ffi.new("char[]", binary.encode())  # the driver keeps the pointer
            rc = self.lib.pim_dpu_run_stage(drv, self._stage_binary,
                                            self.ffi.cast("uint8_t *", self.ffi.from_buffer(chunks)),
                                            chunks.shape[1], int(status_off), int(status_bytes),
                                            self.ffi.cast("uint8_t *", self.ffi.from_buffer(statuses)), err, len(err))
            if rc != 0:
                self._raise(rc, err)
        return statuses

    def loads(self) -> int:
        """dpu_load calls made since the DPUs were allocated (the kernel's first included)."""
        return int(self.lib.pim_dpu_loads(self._driver()))

    @property
    def max_pending(self) -> int:
        """Batches that may be in flight at once (double-buffered host staging)."""
        return int(self.lib.PIM_DPU_MAX_PENDING)

    def pending(self) -> int:
        """Batches submitted and not yet waited for or cancelled."""
        return int(self.lib.pim_dpu_pending(self._driver()))

    def recoveries(self) -> dict:
        """How often the driver reloaded the program (after a fault) and allocated the DPUs again
        (after libdpu kept a failed asynchronous job's error on a rank)."""
        reloads, reallocs = self.ffi.new("uint32_t *"), self.ffi.new("uint32_t *")
        self.lib.pim_dpu_recoveries(self._driver(), reloads, reallocs)
        return {"reloads": int(reloads[0]), "reallocs": int(reallocs[0])}

    def _wait(self, ticket: int) -> None:
        err = self.ffi.new("char[]", 1024)
        with self._lock:
            rc = self.lib.pim_dpu_wait(self._driver(), ticket, err, len(err))
            if rc != 0:
                self._raise(rc, err)

    def _cancel(self, ticket: int) -> None:
        with self._lock:
            if self._drv is not None:
                self.lib.pim_dpu_cancel(self._drv, ticket)

    def _raise(self, rc: int, err) -> None:
        message = f"DPU backend: {self.ffi.string(err).decode(errors='replace')}"
        dpu = int(self.lib.pim_dpu_last_dpu(self._drv)) if self._drv is not None else -1
        dpu = None if dpu < 0 else dpu
        if rc == self.lib.PIM_DPU_E_FAULT:
            raise DpuFaultError(message, rc, dpu)
        if rc == self.lib.PIM_DPU_E_KERNEL:
            raise DpuKernelError(message, rc, dpu)
        if rc == self.lib.PIM_DPU_E_NOMEM:
            raise MemoryError(message)
        if rc == self.lib.PIM_DPU_E_ARG:
            raise ValueError(message)
        raise DpuBackendError(message, rc, dpu)

    # -- what the last run did -----------------------------------------------------------
    def run_info(self) -> dict:
        """What the last submitted batch was planned as (sizes of the transfers)."""
        info = self.ffi.new("pim_dpu_run_info_t *")
        self.lib.pim_dpu_run_info(self._driver(), info)
        return {k: int(getattr(info, k)) for k in ("active_dpus", "arena_bytes", "xfer_bytes", "out_xfer_bytes",
                                                  "in_real_bytes", "out_real_bytes")}

    def counters(self, dpu: Optional[int] = None) -> DpuCounters:
        """Emulator DMA counters of one DPU (or all of them summed) since the last reset."""
        values = self.ffi.new("uint64_t[10]")
        index = ALL_DPUS if dpu is None else int(dpu)
        if self.lib.pim_dpu_counters(self._driver(), index, values) != 0:
            raise DpuBackendError("DMA counters are only available from the emulator build"
                                  if not self.emulated else f"no DPU {dpu}")
        return DpuCounters(*[int(v) for v in values])

    def tasklet_counters(self, dpu: int) -> list[DpuCounters]:
        """Emulator DMA counters of each tasklet of one DPU since the last reset (the
        mram_read/mram_write fields only; the others are 0)."""
        n = self.nr_tasklets
        values = self.ffi.new(f"uint64_t[{4 * n}]")
        if self.lib.pim_dpu_tasklet_counters(self._driver(), int(dpu), values) != 0:
            raise DpuBackendError("DMA counters are only available from the emulator build"
                                  if not self.emulated else f"no DPU {dpu}")
        return [DpuCounters(*[int(values[4 * t + k]) for k in range(4)], 0, 0, 0, 0, 0, 0) for t in range(n)]

    def reset_counters(self) -> None:
        if self.lib.pim_dpu_reset_counters(self._driver()) != 0:
            raise DpuBackendError("DMA counters are only available from the emulator build")


class DpuBatch:
    """A batch queued by `DpuDriver.submit`: `wait()` returns its output once the DPUs are done.

    Holds the output batch until then. Dropping an unwaited handle cancels the batch (its
    queued jobs run out; nothing is written to the output)."""

    def __init__(self, backend: DpuDriver, ticket: int, out) -> None:
        self.backend = backend
        self.ticket = ticket
        self.out = out
        self._done = ticket == 0
        self._error: Optional[BaseException] = None

    @property
    def done(self) -> bool:
        """Whether wait() or cancel() has been called (not whether the DPUs have finished)."""
        return self._done

    def wait(self):
        """Waits for the DPUs, checks them and copies the outputs into `out`; returns `out`.
        Raises DpuFaultError / DpuKernelError / DpuBackendError naming the call and the DPU
        when the batch failed (again on every later call)."""
        if not self._done:
            self._done = True
            if self.backend._drv is None:
                self._error = DpuBackendError(f"DPU backend was closed with batch {self.ticket} in flight: "
                                              "the batch was dropped")
            else:
                try:
                    self.backend._wait(self.ticket)
                except BaseException as error:  # kept: a second wait() raises it again
                    self._error = error
        if self._error is not None:
            raise self._error
        return self.out

    def cancel(self) -> None:
        """Drops the batch: its queued jobs run out, `out` is not written."""
        if not self._done:
            self._done = True
            self._error = DpuBackendError(f"batch {self.ticket} was cancelled")
            self.backend._cancel(self.ticket)

    def __del__(self) -> None:
        try:
            if not self._done and self.backend._drv is not None:
                self.backend._cancel(self.ticket)
        except Exception:
            pass


__all__ = ["DpuDriver", "DpuBatch", "DpuCounters", "MramSource", "driver_module", "emulator_live_dpus"]
