"""Proves that a fuzz run's sanitizers are live: calls the sanitizer build's sample-cache
table (csrc/sample_cache.c) with arguments its Python wrapper never passes, so that the C
code reads past an array (ASan) or overflows a signed subtraction (UBSan). fuzz/run.py runs
both before fuzzing and stops unless each one ends in its sanitizer's report: a run in
which the runtime was not preloaded, or the build lost its flags, would otherwise pass
silently.

    PIMLOADER_FUZZ_BUILD=build/asan/lib python fuzz/canary.py asan|ubsan   (with the sanitizers preloaded)
"""
import glob
import importlib.util
import os
import sys

import numpy as np


def sanitizer_build_module(name: str):
    """pimloader.`name` of the build in $PIMLOADER_FUZZ_BUILD, loaded alone: without the
    package (and torch, which it imports), so that a canary takes a second, not twenty."""
    build = os.environ["PIMLOADER_FUZZ_BUILD"]
    path, = glob.glob(os.path.join(build, "pimloader", f"{name}.*so"))
    spec = importlib.util.spec_from_file_location(f"pimloader.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cache = sanitizer_build_module("_sample_cache")
ffi, lib = _cache.ffi, _cache.lib


def out_of_bounds() -> None:
    table = np.full((1, 2), lib.PIM_CACHE_FREE, np.int64)
    offset = ffi.new("int64_t *")
    entries = ffi.from_buffer("pim_cache_entry[]", table)
    lib.pim_cache_lookup(entries + 1, offset)        # one entry past the table's end


def signed_overflow() -> None:
    fill = np.ones(1, np.int64)
    entry = np.full((1, 2), lib.PIM_CACHE_FREE, np.int64)
    lib.pim_cache_claim(ffi.from_buffer("pim_cache_entry[]", entry), ffi.from_buffer("int64_t[]", fill), 1,
                        -2 ** 63)                       # budget - fill overflows int64


if __name__ == "__main__":
    {"asan": out_of_bounds, "ubsan": signed_overflow}[sys.argv[1]]()
    print(f"canary {sys.argv[1]}: no sanitizer report")
