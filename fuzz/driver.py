"""Fuzzes one target of fuzz/targets/ with atheris (libFuzzer for Python):

    python fuzz/driver.py TARGET [libFuzzer options] [corpus folders]

Run as a script, not with -m: the package it imports must be the sanitizer build that
fuzz/run.py puts first on PYTHONPATH, and -m would put the checkout's own pimloader before
it. pimloader's Python modules are instrumented for coverage (libFuzzer keeps the inputs
that reach new lines and branches); the C extensions are not (gcc has no coverage hooks for
libFuzzer), they are checked by ASan and UBSan. With $PIMLOADER_FUZZ_BUILD set, the driver
refuses to run on a pimloader imported from anywhere else.
"""
from __future__ import annotations

import importlib
import os
import sys

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))   # the checkout, for `fuzz.targets`: after the build


def load(name: str):
    with atheris.instrument_imports(include=["pimloader"]):
        import pimloader  # noqa: F401  (instrumented here, with every module the targets import)
        target = importlib.import_module(f"fuzz.targets.{name}")
    build = os.environ.get("PIMLOADER_FUZZ_BUILD")
    if build and not os.path.abspath(pimloader.__file__).startswith(os.path.abspath(build) + os.sep):
        sys.exit(f"fuzz/driver.py: pimloader was imported from {pimloader.__file__}, not from {build}")
    return target


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    target = load(sys.argv[1])
    argv = [sys.argv[0], f"-max_len={target.MAX_LEN}", *sys.argv[2:]]
    atheris.Setup(argv, target.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
