"""Build of pimloader's cffi extensions; everything else is in pyproject.toml.

Every `csrc/build_*.py` defines an `ffibuilder` (cffi API mode) for one extension module
of the package, e.g. `csrc/build_kernels.py` -> `pimloader._kernels`. pyproject.toml's
[build-system] brings cffi into the build environment.
"""
import glob

from setuptools import setup

setup(cffi_modules=[f"{builder}:ffibuilder" for builder in sorted(glob.glob("csrc/build_*.py"))])
