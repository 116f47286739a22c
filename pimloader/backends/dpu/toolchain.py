"""Building the DPU kernel with UPMEM's toolchain (`dpu-upmem-dpurte-clang`) for real DPUs.

The kernel is built once per set of flags (NR_TASKLETS, STACK_SIZE_DEFAULT) into a per-user
cache keyed by the compiler, the flags and the text of the source and of every header it
can include; setup.py builds the default one when it finds the SDK, and `DpuDriver`
builds others on first use. The emulator's build of the same source (host gcc, no floating
point) is `pimloader.backends.dpu.emulator.compile_kernel`, which shares this module's cache helpers.

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
    return ([OPTIMISATION, f"-DNR_TASKLETS={int(nr_tasklets)}", *define_flags(defines)]
            + [f"-I{directory}" for directory in include_dirs])


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
    key = content_key([os.path.realpath(compiler), *flags], [source], include_dirs)
    output = os.path.join(cache_dir or cache_folder("pimloader-dpu-kernels"),
                          f"{_stem(source)}-{key}.dpu")
    if os.path.exists(output):
        return output
    return build_atomically(output, lambda partial: [compiler, *flags, "-o", partial, source],
                            f"building {source} for DPUs")


def define_flags(defines: Optional[Mapping[str, object]]) -> list:
    """-D flags, sorted, as the UPMEM toolchain and the emulator's gcc take them."""
    return [f"-D{key}" if value is None else f"-D{key}={value}"
            for key, value in sorted((defines or {}).items())]


def content_key(words: Sequence[str], files: Sequence[str], include_dirs: Sequence[str]) -> str:
    """A cache key over a command's words, the text of `files` and of every file directly
    in `include_dirs` (so that an edited header rebuilds)."""
    digest = hashlib.sha256("\0".join(words).encode())
    for path in [*files, *_headers(include_dirs)]:
        with open(path, "rb") as file:
            digest.update(path.encode() + b"\0" + file.read())
    return digest.hexdigest()[:16]


def cache_folder(name: str) -> str:
    """A per-user folder for built kernels (build_atomically creates it)."""
    return os.path.join(tempfile.gettempdir(), f"{name}-{os.getuid()}")


def build_atomically(output: str, command_for, what: str, error=ToolchainError) -> str:
    """Run `command_for(partial)`, which writes `partial`, and move the result to `output`
    (a concurrent build never sees a half-written file); on failure raise `error` with the
    compiler's message and leave nothing behind."""
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    partial = f"{output}.{os.getpid()}.tmp"
    command = command_for(partial)
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as failure:
        raise error(f"{what}: could not run {command[0]}: {failure}") from failure
    if result.returncode != 0:
        if os.path.exists(partial):
            os.unlink(partial)
        raise error(f"{what} failed (exit {result.returncode}):\n{result.stderr.strip()}\n"
                    f"command: {' '.join(command)}")
    os.replace(partial, output)
    return output


def _stem(source: str) -> str:
    return os.path.splitext(os.path.basename(source))[0]


def _headers(include_dirs: Sequence[str]) -> list:
    return [os.path.join(directory, name) for directory in include_dirs
            for name in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, name))]
