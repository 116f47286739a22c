"""Choosing a backend (`BackendSpec`, picklable) and the backends a process has open.

The loader's options (pimloader/options.py) become a task's `BackendSpec` in one place,
`resolve`, in the main process; each process that runs the kernel (a worker, or the main
process with `num_workers=0`) opens it in its own `Backends`, which its owner closes (kept
in the loader's per-process resources: the loader's state on `close()`, a worker when it
exits). A forked worker never uses a DPU set of its parent. How a spec's kind is opened is
looked up in openers.py (the DPU package registers its kinds there).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from pimloader.errors import close_all
from pimloader.options import NR_DPUS, NR_TASKLETS, PipelineOptions

from .base import Backend
from .openers import opener
from .registry import run_kind


@dataclass(frozen=True)
class BackendSpec:
    """Which backend runs the kernel: "cpu", "emulator" or "upmem", with its DPU set."""

    kind: str = "cpu"
    nr_dpus: int = NR_DPUS
    nr_tasklets: int = NR_TASKLETS
    profile: str = ""
    decode: bool = False     # the backend decodes the images it can (decode_on_dpu)

    def open(self) -> Backend:
        return opener(self.kind).open(self)


CPU = BackendSpec("cpu")


def resolve(options: PipelineOptions, dpu_decode_refusal: str = "") -> BackendSpec:
    """The spec of a task's backend for the loader's options: `backend="auto"` is UPMEM
    DPUs when the SDK build is present, else the CPU kernels; raises for a missing SDK
    build or a DPU set out of range. `dpu_decode_refusal` says why the task cannot have
    its images decoded on DPUs ("" when it can): decode_on_dpu=True is then a ValueError
    saying why, and "auto" is off (PipelineOptions.dpu_decode)."""
    decode = options.dpu_decode(dpu_decode_refusal)
    backend = options.backend
    if backend == "cpu" or (backend == "auto" and not upmem_available()):
        if options.decode_on_dpu is True:
            raise ValueError("decode_on_dpu=True needs a DPU backend, and backend='auto' found no "
                             "UPMEM SDK build: pass backend='emulator' or 'upmem'")
        return CPU
    nr_dpus, nr_tasklets = options.nr_dpus, options.nr_tasklets
    if not 1 <= nr_tasklets <= 24 or nr_dpus < 1:
        raise ValueError(f"nr_dpus must be >= 1 and nr_tasklets 1..24, got {nr_dpus}, "
                         f"{nr_tasklets}")
    kind = "emulator" if backend == "emulator" else "upmem"
    opener(kind).check()  # raises, saying what is missing
    return BackendSpec(kind, nr_dpus, nr_tasklets, options.dpu_profile, decode=decode)


def upmem_available() -> bool:
    """Whether the driver was built against UPMEM's SDK."""
    return opener("upmem").available()


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
        close_all(backends)


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
