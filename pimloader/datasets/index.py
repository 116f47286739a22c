"""A source's index (paths, targets) in a few numpy arrays instead of per-sample objects.

Why: a list of N `(path, target)` tuples is 3N Python objects. A forked worker that merely
reads one writes its reference count, which copies the page it sits on into that worker
(PyTorch's "copy-on-read", issue 13246): as an epoch reads samples at random, each worker
ends up with its own copy of the whole list, gigabytes at ImageNet's 1.28M files and 16
workers. A numpy buffer's pages are never written by readers, so they stay shared after
fork; under spawn the arrays pickle as a few contiguous buffers instead of an object graph.
A sample decodes only its own path and target.
"""
from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Iterable

import numpy as np


class Packed:
    """N byte strings in one uint8 buffer, item i at offsets[i]:offsets[i + 1]."""

    def __init__(self, items: Iterable[bytes]) -> None:
        items = list(items)
        self.offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in items], out=self.offsets[1:])
        self.buffer = np.frombuffer(b"".join(items), dtype=np.uint8)

    @classmethod
    def from_strings(cls, strings: list[str], prefix: str = "") -> "Packed":
        """The strings less `prefix` (which each starts with), as os.fsencode encodes them,
        in a few calls over all of them rather than a few per string (a million paths:
        about a second): joined with NULs, which no path holds, the NULs found by numpy
        and taken out."""
        packed = cls([])
        if not strings:
            return packed
        joined = "\0".join(strings)[len(prefix):]
        if prefix:
            joined = joined.replace("\0" + prefix, "\0")
        joined = joined.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
        separated = np.frombuffer(joined + b"\0", dtype=np.uint8)
        ends = np.flatnonzero(separated == 0)
        if len(ends) != len(strings):
            raise ValueError("a path holds a NUL character")
        packed.buffer = np.delete(separated, ends)
        packed.offsets = np.empty(len(strings) + 1, dtype=np.int64)
        packed.offsets[0] = 0
        packed.offsets[1:] = ends - np.arange(len(strings))  # each NUL before it taken out
        return packed

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> bytes:
        index = range(len(self))[index]   # an IndexError out of range; negative from the end
        return self.buffer[self.offsets[index]:self.offsets[index + 1]].tobytes()

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes + self.offsets.nbytes


class Targets:
    """N targets: an int64 array when every one is a Python int that fits (class indices),
    else each pickled into a Packed buffer. A target reads back as the same type and
    value it was given (an int stays an int; a numpy int, a tensor, a string or a tuple
    is pickled, never converted)."""

    def __init__(self, targets: Iterable[Any]) -> None:
        targets = list(targets)
        self.ints = self.pickled = None
        if all(type(target) is int for target in targets):
            try:
                self.ints = np.array(targets, dtype=np.int64)
            except OverflowError:   # beyond int64
                pass
        if self.ints is None:
            self.pickled = Packed(pickle.dumps(target, protocol=5) for target in targets)

    def __len__(self) -> int:
        return len(self.ints) if self.ints is not None else len(self.pickled)

    def __getitem__(self, index: int) -> Any:
        if self.ints is not None:
            return int(self.ints[index])
        return pickle.loads(self.pickled[index])

    def tolist(self) -> list:
        if self.ints is not None:
            return self.ints.tolist()
        return [self[index] for index in range(len(self))]

    @property
    def nbytes(self) -> int:
        return self.ints.nbytes if self.ints is not None else self.pickled.nbytes


class PathIndex:
    """The paths and targets of N samples: the paths' common prefix once, the rest of each
    path in a Packed buffer (os.fsencode, so any path the OS takes round-trips), the
    targets in `Targets`."""

    def __init__(self, paths: Iterable, targets: Iterable[Any]) -> None:
        paths = list(paths)
        self.targets = Targets(targets)
        if len(paths) != len(self.targets):
            raise ValueError(f"PathIndex: {len(paths)} paths but {len(self.targets)} "
                             f"targets")
        if not all(type(path) is str for path in paths):   # Path objects, bytes
            paths = [os.fsdecode(path) for path in paths]
        prefix = os.path.commonprefix(paths) if paths else ""
        self.prefix = os.fsencode(prefix)
        self.rests = Packed.from_strings(paths, prefix)

    @classmethod
    def from_pairs(cls, pairs) -> "PathIndex":
        """The index of a sequence of (path, target) pairs."""
        return cls((path for path, _ in pairs), (target for _, target in pairs))

    def __len__(self) -> int:
        return len(self.rests)

    def path(self, index: int) -> bytes:
        """Sample `index`'s path, as bytes (open() takes them as they are)."""
        return self.prefix + self.rests[index]

    def name(self, index: int) -> str:
        """Sample `index`'s path as str (os.fsdecode: what str(path) was)."""
        return os.fsdecode(self.path(index))

    def target(self, index: int) -> Any:
        return self.targets[index]

    @property
    def nbytes(self) -> int:
        return len(self.prefix) + self.rests.nbytes + self.targets.nbytes
