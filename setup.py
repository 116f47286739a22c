"""Build of pimloader: the Python package and its cffi extensions.

Every `csrc/build_*.py` defines an `ffibuilder` (cffi API mode) for one extension module
of the package, e.g. `csrc/build_kernels.py` -> `pimloader._kernels`.
"""
import glob

from setuptools import find_packages, setup

setup(
    name="pimloader",
    version="0.1.0",
    description="A drop-in torch DataLoader that fuses preprocessing into native CPU kernels "
    "and UPMEM processing-in-memory DPUs",
    packages=find_packages(include=["pimloader", "pimloader.*"]),
    python_requires=">=3.10",
    setup_requires=["cffi>=1.16"],
    install_requires=["torch", "numpy", "cffi>=1.16", "pillow"],
    cffi_modules=[f"{builder}:ffibuilder" for builder in sorted(glob.glob("csrc/build_*.py"))],
)
