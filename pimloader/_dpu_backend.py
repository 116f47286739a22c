"""The DPU backend of the fused crop + resize + flip + convert step.

`DpuBackend` drives the host driver of csrc/dpu_driver.c (libdpu API only) through a cffi
module: `pimloader._dpu_emulated` (the driver built against pimloader's libdpu emulator;
always present) or `pimloader._dpu_upmem` (built against UPMEM's SDK when setup.py found it;
see docs/dpu.md). The kernel is dpu_src/crop_resize.c: for the emulator it is compiled with
the host gcc by `pimloader._emulator.compile_kernel`; for the SDK pass `binary=` (a file
built with dpu-upmem-dpurte-clang).

`run` takes the arguments of `pimloader._kernels_api.resized_crop_batch` and reuses its
`pack_batch` (descriptors + axis tables) and lookup tables, so both backends read the same
plan and agree bit for bit. Errors come back as `DpuBackendError` (or a subclass) naming the
libdpu call and the DPU. Speed under the emulator is not DPU speed.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from . import _kernels_api as K

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_SOURCE = os.path.join(_REPO, "dpu_src", "crop_resize.c")
KERNEL_INCLUDES = (os.path.join(_REPO, "dpu_src"), os.path.join(_REPO, "csrc", "include"))
DEFAULT_STACK_BYTES = 1024
ALL_DPUS = 0xFFFFFFFF  # DPU_ALLOCATE_ALL


class DpuBackendError(RuntimeError):
    """A DPU run failed. `dpu` is the index of the DPU concerned (None: the whole set)."""

    def __init__(self, message: str, code: int = 0, dpu: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.dpu = dpu


class DpuFaultError(DpuBackendError):
    """A DPU faulted during the launch."""


class DpuKernelError(DpuBackendError):
    """The kernel refused its chunk (invalid descriptor, table or build)."""


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


def _module(emulated: bool):
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


class DpuBackend:
    """DPUs running the fused kernel: `with DpuBackend(64, 16) as dpus: dpus.run(...)`."""

    def __init__(self, nr_dpus: int = 64, nr_tasklets: int = 16, profile: str = "", emulated: bool = True,
                 *, binary: Optional[str] = None, stack_bytes: int = DEFAULT_STACK_BYTES) -> None:
        if not 1 <= int(nr_tasklets) <= 24:
            raise ValueError(f"nr_tasklets must be 1..24, got {nr_tasklets}")
        self._mod = _module(emulated)
        self.ffi, self.lib = self._mod.ffi, self._mod.lib
        self.emulated = bool(self.lib.pim_dpu_emulated())
        self.nr_tasklets = int(nr_tasklets)
        if binary is None:
            if not emulated:
                raise ValueError("emulated=False needs binary=: the kernel built by dpu-upmem-dpurte-clang "
                                 "(see docs/dpu.md)")
            from . import _emulator
            binary = _emulator.compile_kernel(KERNEL_SOURCE, nr_tasklets=self.nr_tasklets,
                                              include_dirs=KERNEL_INCLUDES,
                                              defines={"STACK_SIZE_DEFAULT": int(stack_bytes)})
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
        self.nr_dpus = int(self.lib.pim_dpu_nr_dpus(self._drv))

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        drv, self._drv = getattr(self, "_drv", None), None
        if drv is not None:
            err = self.ffi.new("char[]", 512)
            if self.lib.pim_dpu_close(drv, err, len(err)) != 0:
                raise DpuBackendError(f"DPU backend: {self.ffi.string(err).decode(errors='replace')}")

    def __enter__(self) -> "DpuBackend":
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
        """As `pimloader._kernels_api.resized_crop_batch`, on the DPUs. Returns out.
        `debug`/`debug_dpu` are test hooks (PIM_DPU_DEBUG_HALT, PIM_DPU_DEBUG_CORRUPT)."""
        drv = self._driver()
        if isinstance(out, torch.Tensor):
            dtype = out.dtype
        else:
            dtype = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float16): torch.float16,
                     np.dtype(np.float32): torch.float32}.get(np.asarray(out).dtype)
        if dtype not in K.OUT_DTYPES:
            raise ValueError(f"output dtype must be one of {list(K.OUT_DTYPES)}, got {out.dtype}")
        packed, arrays = K.pack_batch(sources, boxes, size, hflip=hflip, vflip=vflip,
                                      interpolation=interpolation, layout=layout, out_dtype=dtype,
                                      windows=windows)
        n = len(arrays)
        if n == 0:
            return out
        c = arrays[0].shape[2]
        oh, ow = (int(v) for v in size)
        want = (n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c)
        if tuple(out.shape) != want:
            raise ValueError(f"out has shape {tuple(out.shape)}, {layout} batch needs {want}")
        lut_ptr, lut_bytes = self.ffi.NULL, 0
        if dtype == torch.uint8:
            if lut is not None:
                raise ValueError("uint8 output takes no lookup table")
        else:
            want_lut = K.OUT_DTYPES[dtype][1]
            if lut is None or lut.dtype != want_lut or lut.shape != (c, 256):
                raise ValueError(f"{dtype} output needs a [{c}, 256] {np.dtype(want_lut)} lookup table "
                                 f"(normalize_lut / lut_from_fn)")
            lut = np.ascontiguousarray(lut)
            lut_ptr, lut_bytes = self.ffi.cast("void *", self.ffi.from_buffer(lut)), lut.nbytes
        samples = np.ascontiguousarray(packed.samples, dtype=K.SAMPLE_DTYPE)
        tables = np.ascontiguousarray(packed.tables, dtype=np.uint8)
        dst, dst_bytes = self._out_pointer(out)
        keep = [self.ffi.from_buffer(a) if a.flags.c_contiguous else None for a in arrays]
        srcs = self.ffi.new("uint8_t *[]", [self.ffi.cast("uint8_t *", k) if k is not None
                                            else self.ffi.cast("uint8_t *", a.ctypes.data)
                                            for k, a in zip(keep, arrays)])
        src_bytes = self.ffi.new("uint64_t[]", [(a.shape[0] - 1) * a.strides[0] + a.shape[1] * a.shape[2]
                                                for a in arrays])
        err = self.ffi.new("char[]", 1024)
        rc = self.lib.pim_dpu_run(drv, self.ffi.cast("pim_sample_t *", self.ffi.from_buffer(samples)), n, srcs,
                                  src_bytes, self.ffi.cast("uint8_t *", self.ffi.from_buffer(tables)), tables.nbytes,
                                  lut_ptr, lut_bytes, dst, dst_bytes, int(debug), int(debug_dpu), err, len(err))
        if rc != 0:
            message = f"DPU backend: {self.ffi.string(err).decode(errors='replace')}"
            dpu = int(self.lib.pim_dpu_last_dpu(drv))
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
        return out

    def _out_pointer(self, out):
        if isinstance(out, torch.Tensor):
            if out.device.type != "cpu" or not out.is_contiguous():
                raise ValueError("out must be a contiguous CPU tensor")
            return self.ffi.cast("uint8_t *", out.data_ptr()), out.numel() * out.element_size()
        if isinstance(out, np.ndarray):
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be a writeable C-contiguous array")
            return self.ffi.cast("uint8_t *", out.ctypes.data), out.nbytes
        raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, not {type(out).__name__}")

    # -- what the last run did -----------------------------------------------------------
    def run_info(self) -> dict:
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

    def reset_counters(self) -> None:
        if self.lib.pim_dpu_reset_counters(self._driver()) != 0:
            raise DpuBackendError("DMA counters are only available from the emulator build")


__all__ = ["DpuBackend", "DpuBackendError", "DpuFaultError", "DpuKernelError", "DpuCounters"]
