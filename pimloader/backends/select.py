"""Choosing a backend (`BackendSpec`, picklable) and the backends a process has open.

The loader turns its `backend=` argument into a `BackendSpec` once, in the main process;
each process that runs the kernel (a worker, or the main process with `num_workers=0`)
opens it in its own `Backends`, which its owner closes: the loader's state on `close()`,
a worker when it exits. A forked worker never uses a DPU set of its parent.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from .base import Backend
from .registry import run_kind

BACKENDS = ("auto", "cpu", "emulator", "upmem")


@dataclass(frozen=True)
class BackendSpec:
    """Which backend runs the kernel: "cpu", "emulator" or "upmem", with its DPU set."""

    kind: str = "cpu"
    nr_dpus: int = 64
    nr_tasklets: int = 16
    profile: str = ""
    decode: bool = False     # the backend decodes the images it can (decode_on_dpu)

    def open(self) -> Backend:
        if self.kind == "cpu":
            from .cpu import CpuBackend
            return CpuBackend()
        from .dpu.backend import DpuBackend
        return DpuBackend(self.nr_dpus, self.nr_tasklets, self.profile,
                          emulated=self.kind == "emulator", decode=self.decode)


CPU = BackendSpec("cpu")


DECODE_ON_DPU = ("auto", True, False)


def check_decode_on_dpu(decode_on_dpu, backend: str) -> None:
    """Refuses a bad `decode_on_dpu=` (before anything is built), and True with a backend
    that can never be a DPU one."""
    if not any(decode_on_dpu is value for value in DECODE_ON_DPU):
        raise ValueError(f"decode_on_dpu must be 'auto', True or False, got {decode_on_dpu!r}")
    if decode_on_dpu is True and backend == "cpu":
        raise ValueError("decode_on_dpu=True needs a DPU backend (backend='emulator' or 'upmem'); "
                         "backend='cpu' decodes on the host")


def choose_backend(backend: str, nr_dpus: int = 64, nr_tasklets: int = 16,
                   dpu_profile: str = "", decode_on_dpu=False) -> BackendSpec:
    """The spec for the loader's `backend=` ("auto": UPMEM DPUs when the SDK build is
    present, else the CPU kernels); raises for a bad argument or a missing SDK build.
    `decode_on_dpu` ("auto": on for DPU backends, True: on, an error on the CPU backend,
    False: off) says whether the DPU backend decodes the JPEGs it can."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(dpu_profile, str):
        raise TypeError(f"dpu_profile must be a libdpu profile string, got {dpu_profile!r}")
    check_decode_on_dpu(decode_on_dpu, backend)
    if backend == "cpu" or (backend == "auto" and not upmem_available()):
        if decode_on_dpu is True:
            raise ValueError("decode_on_dpu=True needs a DPU backend, and backend='auto' found no "
                             "UPMEM SDK build: pass backend='emulator' or 'upmem'")
        return CPU
    if not 1 <= nr_tasklets <= 24 or nr_dpus < 1:
        raise ValueError(f"nr_dpus must be >= 1 and nr_tasklets 1..24, got {nr_dpus}, "
                         f"{nr_tasklets}")
    kind = "emulator" if backend == "emulator" else "upmem"
    if kind == "upmem":
        from .dpu.driver import driver_module
        driver_module(False)  # raises, saying what is missing
    return BackendSpec(kind, nr_dpus, nr_tasklets, dpu_profile, decode=decode_on_dpu is not False)


def upmem_available() -> bool:
    """Whether the driver was built against UPMEM's SDK."""
    from .dpu.driver import driver_module
    try:
        driver_module(False)
    except Exception:
        return False
    return True


def native_available(backend: str) -> bool:
    """Whether the native extensions are built (backend="cpu" insists on them)."""
    try:
        from pimloader import _jpeg, _kernels  # noqa: F401  (built by setup.py)
    except ImportError as error:
        if backend == "cpu":
            raise ImportError(f"backend='cpu' needs pimloader's native extensions, which "
                              f"are not built ({error}); run `make install`") from error
        warnings.warn(f"pimloader: native extensions not built ({error}); transforms run "
                      f"as Python under torch's semantics", stacklevel=3)
        return False
    return True


class Backends:
    """The backends one process has open, by spec; `close()` frees them all (DPU sets)."""

    def __init__(self) -> None:
        self._open: dict[BackendSpec, Backend] = {}
        self._pid = os.getpid()

    def get(self, spec: BackendSpec) -> Backend:
        if os.getpid() != self._pid:  # inherited by a forked child: not its DPU sets
            self._open, self._pid = {}, os.getpid()
        if spec not in self._open:
            self._open[spec] = spec.open()
        return self._open[spec]

    def router(self, spec: BackendSpec) -> "Router":
        """`spec`'s backend, with the CPU backend for the samples it does not run."""
        chain = [self.get(spec)] if spec == CPU else [self.get(spec), self.get(CPU)]
        return Router(chain)

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Close every open backend (the first error is raised once all are closed)."""
        backends, self._open = list(self._open.values()), {}
        if os.getpid() != self._pid:
            return
        errors = []
        for backend in backends:
            try:
                backend.close()
            except Exception as error:  # close the others all the same
                errors.append(error)
        if errors:
            raise errors[0]


class Router:
    """Sends each row of a kind of run to the first backend of its chain whose kernel for
    that kind runs it (backends/registry.py)."""

    def __init__(self, chain: list[Backend]) -> None:
        self.chain = chain
        self._warned: set[str] = set()  # once per router: each loader says it once

    @property
    def primary(self) -> Backend:
        return self.chain[0]

    def primary_kernel(self, kind: str):
        """The loader's own backend's kernel for `kind` (None: it has none)."""
        return self.primary.kernel_for(kind)

    def backend_for(self, kind: str, item) -> Backend:
        """The first backend of the chain that runs `item` (a row of a `kind` run: a
        geometry for "images", `(spec, clip_shape)` for "features"); each one passed over is
        said once per loader."""
        refused = []
        for backend in self.chain:
            missing = backend.unsupported(kind, item)
            if not missing:
                for other, what in refused:
                    self._warn_once(f"pimloader: {other.kernel} does not {what}; such "
                                    f"{run_kind(kind).items} run on {backend.kernel}")
                return backend
            refused.append((backend, missing))
        none_runs = f"no backend runs these {run_kind(kind).items}"
        raise ValueError(f"{none_runs}: " +
                         "; ".join(f"{b.kernel} does not {what}" for b, what in refused))

    def kernel_for(self, kind: str, item):
        """The kernel that runs `item`: `backend_for(kind, item)`'s for `kind`."""
        return self.backend_for(kind, item).kernel_for(kind)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(message, stacklevel=5)   # the pipeline line that added the row
