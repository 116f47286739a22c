"""Where the C sources that pimloader compiles at run time are: the DPU kernel (dpu_src/) and
its headers (include/), and the emulator's DPU runtime (csrc/emulator/), which the emulator
and UPMEM backends build kernels from.

In a checkout (and an editable install) they are the repository's own files. An installed
wheel has no repository beside it: setup.py copies them into the package, under
pimloader/_native_src/, with the same relative paths.
"""
import os

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(PACKAGE_DIR, "_native_src")


def native_source_root() -> str:
    """The folder holding dpu_src/, include/ and csrc/: the installed copy when there is one,
    else the repository that this package was imported from."""
    return SHIPPED if os.path.isdir(SHIPPED) else os.path.dirname(PACKAGE_DIR)
