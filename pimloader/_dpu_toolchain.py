"""Building the DPU kernel with UPMEM's toolchain (`dpu-upmem-dpurte-clang`) for real DPUs.

The kernel is built once per set of flags (NR_TASKLETS, STACK_SIZE_DEFAULT) into a per-user
cache keyed by the compiler, the flags and the text of the source and of every header it
can include; setup.py builds the default one when it finds the SDK, and `DpuBackend`
builds others on first use. The emulator's build of the same source (host gcc, no floating
point) is `pimloader._emulator.compile_kernel`.

This module imports nothing from pimloader, so that setup.py can load it by path before the
package is built.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Mapping, Optional, Sequence

COMPILER = "dpu-upmem-dpurte-clang"
OPTIMISATION = "-O2"


class ToolchainError(RuntimeError):
    """The UPMEM toolchain is missing, or it failed to build the kernel."""


def find_compiler() -> Optional[str]:
    """`dpu-upmem-dpurte-clang` on the PATH, else under $UPMEM_HOME/bin, else None."""
    found = shutil.which(COMPILER)
    home = os.environ.get("UPMEM_HOME")
    if found is None and home:
        candidate = os.path.join(home, "bin", COMPILER)
        found = candidate if os.access(candidate, os.X_OK) else None
    return found


def kernel_flags(nr_tasklets: int, defines: Optional[Mapping[str, object]] = None,
                 include_dirs: Sequence[str] = ()) -> list:
    flags = [OPTIMISATION, f"-DNR_TASKLETS={int(nr_tasklets)}"]
    for key, value in sorted((defines or {}).items()):
        flags.append(f"-D{key}" if value is None else f"-D{key}={value}")
    return flags + [f"-I{directory}" for directory in include_dirs]


def build_kernel(source: str, *, nr_tasklets: int, defines: Optional[Mapping[str, object]] = None,
                 include_dirs: Sequence[str] = (), compiler: Optional[str] = None,
                 cache_dir: Optional[str] = None) -> str:
    """The path of `source` built for DPUs with these flags (built now unless cached)."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise ToolchainError(
            f"building the DPU kernel needs {COMPILER} from the UPMEM SDK, on the PATH or under "
            f"$UPMEM_HOME/bin (source the SDK's upmem_env.sh), or pass binary= (see docs/dpu.md)")
    flags = kernel_flags(nr_tasklets, defines, include_dirs)
    output = os.path.join(cache_dir or _default_cache(),
                          f"{_stem(source)}-{_key(compiler, flags, source, include_dirs)}.dpu")
    if os.path.exists(output):
        return output
    os.makedirs(os.path.dirname(output), exist_ok=True)
    partial = f"{output}.{os.getpid()}.tmp"
    command = [compiler, *flags, "-o", partial, source]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise ToolchainError(f"could not run {compiler}: {error}") from error
    if result.returncode != 0:
        if os.path.exists(partial):
            os.unlink(partial)
        raise ToolchainError(f"{' '.join(command)} failed (exit {result.returncode}):\n"
                             f"{result.stderr.strip()}")
    os.replace(partial, output)
    return output


def _default_cache() -> str:
    return os.path.join(tempfile.gettempdir(), f"pimloader-dpu-kernels-{os.getuid()}")


def _stem(source: str) -> str:
    return os.path.splitext(os.path.basename(source))[0]


def _key(compiler: str, flags: list, source: str, include_dirs: Sequence[str]) -> str:
    digest = hashlib.sha256(" ".join([os.path.realpath(compiler), *flags]).encode())
    for path in [source, *_headers(include_dirs)]:
        with open(path, "rb") as file:
            digest.update(path.encode() + b"\0" + file.read())
    return digest.hexdigest()[:16]


def _headers(include_dirs: Sequence[str]) -> list:
    return [os.path.join(directory, name) for directory in include_dirs
            for name in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, name))]
