"""Build of pimloader's cffi extensions and of the C sources it compiles at run time;
everything else is in pyproject.toml.

Every `csrc/build_*.py` defines an `ffibuilder` (cffi API mode) for one extension module
of the package, e.g. `csrc/build_kernels.py` -> `pimloader._kernels`; what they share (the
cdef cut from the headers, source paths, compile flags) is csrc/cffi_build.py, which the glob
does not take. pyproject.toml's [build-system] brings cffi into the build environment.

The emulator and UPMEM backends compile the DPU kernel when a loader starts, from dpu_src/,
include/ and csrc/emulator/ (its DPU runtime). A checkout reads them in place; a wheel gets
a copy under pimloader/_native_src/ (pimloader/_native_sources.py finds either).
"""
import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

# what compile_kernel reads: the kernel, its headers, the emulator's DPU runtime; and the
# instruction-counting proxy (pimloader.costmodel.proxy)
NATIVE_SOURCES = ("dpu_src/*.c", "include/*.h", "csrc/emulator/dpu_include/*.h",
                  "csrc/emulator/dpu_rt.c", "csrc/emulator/mram.ld", "csrc/proxy/*.c", "csrc/proxy/*.h",
                  "csrc/proxy/*.ld")


class build_py_with_native_sources(build_py):
    def run(self):
        super().run()
        if self.editable_mode:  # an editable install imports from the checkout itself
            return
        for pattern in NATIVE_SOURCES:
            paths = sorted(glob.glob(pattern))
            if not paths:
                raise FileNotFoundError(f"setup.py: no file matches {pattern}")
            for path in paths:
                target = os.path.join(self.build_lib, "pimloader", "_native_src", path)
                self.mkpath(os.path.dirname(target))
                self.copy_file(path, target)


setup(cmdclass={"build_py": build_py_with_native_sources},
      cffi_modules=[f"{builder}:ffibuilder" for builder in sorted(glob.glob("csrc/build_*.py"))])
