"""What the cffi build scripts of csrc/ share: each `csrc/build_*.py` defines the `ffibuilder`
of one extension module of pimloader (setup.py's `cffi_modules` glob), and this file, which
matches no `build_*.py` and defines no builder, holds what they would otherwise each repeat:
the cdef cut from the headers, the paths, the common compile flags.

cffi's setuptools hook runs a build script by path (exec, not import), with csrc/ not on
sys.path, so a script puts its own folder first and imports this file:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cffi_build import INCLUDE, compile_args, extension, sources  # noqa: E402

The sdist carries it with the rest of csrc/ (MANIFEST.in: graft csrc).

The cdef of a module is written once, in C: the text between `/* cffi-cdef-begin ... */` and
`/* cffi-cdef-end */` in each of its headers, comments stripped, the headers in the order
given (a header's block may use the types of those before it).
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "include")                           # host-only headers
SHARED_INCLUDE = os.path.join(os.path.dirname(HERE), "include")   # shared with dpu_src/

# every extension compiles with these warnings; a module with other needs says so
WARNINGS = ("-Wall", "-Wextra", "-Wno-unused-parameter")

_BLOCK = re.compile(r"/\* cffi-cdef-begin.*?\*/(.*?)/\* cffi-cdef-end \*/", re.S)
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def cdef_from(headers) -> str:
    """The declarations of the headers' cffi blocks, in order, comments stripped."""
    parts = []
    for path in headers:
        with open(path, encoding="utf-8") as f:
            blocks = _BLOCK.findall(f.read())
        if not blocks:
            raise RuntimeError(f"{path} has no cffi-cdef-begin/end block")
        parts.extend(blocks)
    return _COMMENT.sub("", "\n".join(parts))


def rel(path: str) -> str:
    """`path` relative to the current folder: setuptools wants sources relative to the
    folder setup.py runs in (the checkout's, or the unpacked sdist's, root)."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def sources(*names: str, folder: str = HERE) -> list:
    """The C files `names` of `folder` (csrc/), as setuptools wants them."""
    return [rel(os.path.join(folder, name)) for name in names]


def includes(headers) -> str:
    """`#include "name.h"` of each header, for set_source's preamble."""
    return "".join(f'#include "{os.path.basename(h)}"\n' for h in headers)


def compile_args(level: str = "-O2", *extra: str, std: str | None = "-std=gnu11",
                 warnings=WARNINGS) -> list:
    """extra_compile_args: the C dialect, the optimisation level, the warnings, then `extra`."""
    return ([std] if std else []) + [level, *warnings, *extra]


def extension(module: str, headers, *, cdef_extra: str = "", preamble: str | None = None,
              depends=(), **kwargs) -> FFI:
    """An FFI builder of `module` in API mode: the cdef of `headers`' cffi blocks (then
    `cdef_extra`), a preamble that includes them (or `preamble`), and set_source's other
    arguments (`sources`, `include_dirs`, `extra_compile_args`, `libraries`...) as given;
    the headers count among `depends`, so that editing one rebuilds the module."""
    ffibuilder = FFI()
    ffibuilder.cdef(cdef_from(headers) + cdef_extra)
    ffibuilder.set_source(module, includes(headers) if preamble is None else preamble,
                          depends=list(dict.fromkeys([*headers, *depends])), **kwargs)
    return ffibuilder
