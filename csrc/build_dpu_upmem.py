"""cffi build (API mode) of `pimloader._dpu_upmem`: the DPU host driver (csrc/dpu_driver.c)
compiled against UPMEM's real libdpu, when the SDK is found; the DPU kernel is then built
too, with dpu-upmem-dpurte-clang, for the default 16 tasklets.

The SDK is found when `dpu-pkg-config` is on the PATH (or under $UPMEM_HOME/bin); its
`--cflags --libs dpu` give the include and library flags. setup.py globs every
`csrc/build_*.py:ffibuilder`, and cffi needs an FFI with set_source() called, so without the
SDK this file defines a placeholder: an out-of-line *ABI-mode* module of the same name with
an empty cdef (a few lines of generated Python, nothing compiled). `pimloader.backends.dpu.driver`
recognises it (it has no `lib`) and says the SDK build is missing.
PIMLOADER_UPMEM=0 forces the placeholder even when the SDK is present; PIMLOADER_UPMEM=1
makes a missing SDK an error instead of a silent placeholder.
"""
import os
import shlex
import shutil
import subprocess
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from build_dpu_emulated import driver_extension  # noqa: E402
from cffi_build import compile_args  # noqa: E402


def find_sdk_flags():
    """(cflags, libs) from dpu-pkg-config, or None when the SDK is absent."""
    tool = shutil.which("dpu-pkg-config")
    home = os.environ.get("UPMEM_HOME")
    if tool is None and home:
        candidate = os.path.join(home, "bin", "dpu-pkg-config")
        tool = candidate if os.access(candidate, os.X_OK) else None
    if tool is None:
        return None
    try:
        cflags = subprocess.run([tool, "--cflags", "dpu"], check=True, capture_output=True, text=True).stdout
        libs = subprocess.run([tool, "--libs", "dpu"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"{tool} failed: {exc}") from exc
    return shlex.split(cflags), shlex.split(libs)


_want = os.environ.get("PIMLOADER_UPMEM", "auto")
_flags = None if _want == "0" else find_sdk_flags()
if _flags is None and _want == "1":
    raise RuntimeError("PIMLOADER_UPMEM=1 but the UPMEM SDK was not found (dpu-pkg-config on the PATH or "
                       "$UPMEM_HOME/bin)")

if _flags is None:
    ffibuilder = FFI()
    ffibuilder.cdef("")
    ffibuilder.set_source("pimloader._dpu_upmem", None)  # placeholder: nothing compiled
else:
    cflags, libs = _flags
    ffibuilder = driver_extension("pimloader._dpu_upmem", extra_compile_args=compile_args("-O2", *cflags),
                                  extra_link_args=libs)


def prebuild_default_kernel():
    """Build dpu_src/crop_resize.c for DPUs with the loader's defaults (16 tasklets, 1 KB
    stacks) into pimloader's kernel cache, so that a first run need not; other tasklet
    counts are built on first use (pimloader/backends/dpu/toolchain.py, loaded here by path)."""
    import importlib.util
    repo = os.path.dirname(HERE)
    spec = importlib.util.spec_from_file_location(
        "pimloader_dpu_toolchain", os.path.join(repo, "pimloader", "backends", "dpu", "toolchain.py"))
    toolchain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toolchain)
    built = toolchain.build_kernel(
        os.path.join(repo, "dpu_src", "crop_resize.c"), nr_tasklets=16,
        defines={"STACK_SIZE_DEFAULT": 1024},
        include_dirs=[os.path.join(repo, "include")])
    print(f"pimloader: DPU kernel built: {built}")


if _flags is not None:
    prebuild_default_kernel()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
