"""How each kind of backend is opened, by name: a small registry.

`BackendSpec.open()` (select.py) looks its kind up here. The CPU backend registers below;
the DPU package registers "emulator" and "upmem" (backends/dpu/__init__.py), so that
backends/*.py never import backends/dpu/ and the DPU modules load only when a DPU backend
is opened or checked. A kind is registered once; a second registration is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def _nothing_missing() -> None:
    pass


@dataclass(frozen=True)
class Opener:
    """A kind of backend: `open(spec)` returns the Backend for a BackendSpec of this kind;
    `check()` raises, saying what is missing, when the kind cannot run on this machine."""

    kind: str
    open: Callable
    check: Callable[[], None] = _nothing_missing

    def available(self) -> bool:
        try:
            self.check()
        except Exception:
            return False
        return True


_OPENERS: dict[str, Opener] = {}


def register_opener(kind: str, open: Callable,
                    check: Callable[[], None] = _nothing_missing) -> Opener:
    """Register how to open backends of `kind` (a BackendSpec's kind); refused if the kind
    has an opener already."""
    if kind in _OPENERS:
        raise ValueError(f"a backend opener for kind {kind!r} is already registered "
                         f"({_OPENERS[kind].open!r})")
    _OPENERS[kind] = Opener(kind, open, check)
    return _OPENERS[kind]


def opener(kind: str) -> Opener:
    """The opener registered for `kind`."""
    try:
        return _OPENERS[kind]
    except KeyError:
        raise ValueError(f"no backend of kind {kind!r} is registered (registered: "
                         f"{sorted(_OPENERS)})") from None


def _open_cpu(spec):
    from .cpu import CpuBackend
    return CpuBackend()


register_opener("cpu", _open_cpu)
