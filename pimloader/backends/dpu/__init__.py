"""The DPU backend: the host driver (csrc/dpu_driver.c) through cffi, the kernel builds.

Importing the package registers the DPU kinds of backend ("emulator", "upmem") with
backends/openers.py; the driver and the kernel builds load only when one is opened.
"""
from ..openers import register_opener


def _open(spec):
    from .backend import DpuBackend
    return DpuBackend(spec.nr_dpus, spec.nr_tasklets, spec.profile,
                      emulated=spec.kind == "emulator", decode=spec.decode)


def _upmem_built() -> None:
    """Raises, saying what is missing, unless the driver was built against UPMEM's SDK."""
    from .driver import driver_module
    driver_module(False)


register_opener("emulator", _open)
register_opener("upmem", _open, _upmem_built)
