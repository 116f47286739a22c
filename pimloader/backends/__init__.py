"""Step 5 of the flow, transform: where the fused kernel runs.

`base`: the backend interface, the runs it takes and the kernels that run them; `registry`:
kinds of run and the kernel registered for each (kind, backend class) -- how a new kind of
work is added from outside the package. `kernels`: the kernels' arguments packed as the C
structs, and the CPU kernels (cffi). `dpu`: the same step on UPMEM DPUs through libdpu
(`dpu.driver`), built for pimloader's emulator (`dpu.emulator`) or for real DPUs with UPMEM's
compiler (`dpu.toolchain`). `openers`: how each kind of backend is opened ("cpu" there; the
DPU kinds registered by `dpu`, imported below for that).
"""
from . import dpu  # noqa: F401  (registers the "emulator" and "upmem" openers)
from .base import FEATURES, IMAGES, Backend, Handle, ImageKernel, Kernel
from .registry import RunKind, register_kernel, register_kind

__all__ = ["Backend", "Kernel", "ImageKernel", "Handle", "RunKind", "register_kind",
           "register_kernel", "IMAGES", "FEATURES"]
