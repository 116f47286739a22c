"""cffi build (API mode) of `pimloader._dpu_upmem`: the DPU host driver (csrc/dpu_driver.c)
compiled against UPMEM's real libdpu, when the SDK is found.

The SDK is found when `dpu-pkg-config` is on the PATH (or under $UPMEM_HOME/bin); its
`--cflags --libs dpu` give the include and library flags. setup.py globs every
`csrc/build_*.py:ffibuilder`, and cffi needs an FFI with set_source() called, so without the
SDK this file defines a placeholder: an out-of-line *ABI-mode* module of the same name with
an empty cdef (a few lines of generated Python, nothing compiled). `pimloader._dpu_backend`
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
from build_dpu_emulated import driver_cdef, driver_source_args  # noqa: E402


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

ffibuilder = FFI()
if _flags is None:
    ffibuilder.cdef("")
    ffibuilder.set_source("pimloader._dpu_upmem", None)  # placeholder: nothing compiled
else:
    cflags, libs = _flags
    own = driver_source_args()
    ffibuilder.cdef(driver_cdef())
    ffibuilder.set_source(
        "pimloader._dpu_upmem",
        '#include "pim_params.h"\n#include "pim_dpu_layout.h"\n#include "pim_dpu_driver.h"\n',
        sources=own["sources"],
        include_dirs=own["include_dirs"],
        depends=own["depends"] + [os.path.join(HERE, "dpu_driver.c")],
        extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"] + cflags,
        extra_link_args=libs,
    )

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
