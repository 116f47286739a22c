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
from typing import Any, Iterable

import numpy as np

INT64 = range(-2 ** 63, 2 ** 63)


class Packed:
    """N byte strings in one uint8 buffer, item i at offsets[i]:offsets[i + 1]."""

    def __init__(self, items: Iterable[bytes]) -> None:
        items = list(items)
        self.offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in items], out=self.offsets[1:])
        self.buffer = np.frombuffer(b"".join(items), dtype=np.uint8)

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
        if all(type(target) is int and target in INT64 for target in targets):
            self.ints = np.array(targets, dtype=np.int64)
            self.pickled = None
        else:
            self.ints = None
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
        encoded = [os.fsencode(path) for path in paths]
        self.targets = Targets(targets)
        if len(encoded) != len(self.targets):
            raise ValueError(f"PathIndex: {len(encoded)} paths but {len(self.targets)} "
                             f"targets")
        self.prefix = os.path.commonprefix(encoded) if encoded else b""
        cut = len(self.prefix)
        self.rests = Packed(path[cut:] for path in encoded)

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
