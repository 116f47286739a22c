"""Kinds of kernel run, and the kernel each backend runs them with.

A backend runs every kind of work through one generic pair, `unsupported(kind, item)` and
`submit(run)`; what a kind means on a backend is a `Kernel`, registered once per (kind,
backend class), as torchvision v2 registers one kernel per (op, input type):

    register_kind(RunKind("images", items="samples", work="run this sample"))
    register_kernel("images", CpuBackend, CpuImageKernel)     # CpuImageKernel(backend)

A backend class without a kernel of its own for a kind inherits its base class's (looked up
through the class hierarchy); one without any does not run the kind, and the router sends
the kind's items to the next backend of its chain. Registering a (kind, class) twice is an
error, as is a kernel for a kind nobody registered. A new kind of work (a video decoder, a
point-cloud voxeliser) is a `RunKind`, a run class with that `kind`, and a kernel per
backend that runs it: no method is added to any backend or to the router.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_KINDS: dict[str, "RunKind"] = {}
_KERNELS: dict[tuple[str, type], Callable] = {}


@dataclass(frozen=True)
class RunKind:
    """A kind of kernel run. `items` names what its rows are in messages ("samples",
    "clips"); `work` is what a backend without a kernel for it "does not" do."""

    name: str
    items: str = "samples"
    work: str = ""

    @property
    def refusal(self) -> str:
        return self.work or f"run {self.name}"


def register_kind(kind: RunKind) -> RunKind:
    """Declare a kind of run (once)."""
    if kind.name in _KINDS:
        raise ValueError(f"run kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def run_kind(name: str) -> RunKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"no run kind {name!r} is registered (known: "
                         f"{', '.join(sorted(_KINDS))})") from None


def register_kernel(kind: str, backend: type, make: Callable | None = None):
    """Register `make(backend_instance) -> Kernel` as `backend`'s kernel for `kind`
    (usable as a class decorator when `make` is omitted). Refuses a second registration of
    the same (kind, backend class) and a kind nobody declared."""
    run_kind(kind)

    def register(factory: Callable) -> Callable:
        if (kind, backend) in _KERNELS:
            raise ValueError(f"{backend.__name__} already has a kernel for {kind!r} runs: "
                             f"{_KERNELS[kind, backend]!r}")
        _KERNELS[kind, backend] = factory
        return factory

    return register if make is None else register(make)


def kernel_factory(kind: str, backend: type) -> Callable | None:
    """The factory registered for `kind` on `backend` or its nearest base class, or None."""
    run_kind(kind)
    for cls in backend.__mro__:
        factory = _KERNELS.get((kind, cls))
        if factory is not None:
            return factory
    return None


def unregister_kernel(kind: str, backend: type) -> None:
    """Remove a registration (for tests and for replacing a kernel deliberately)."""
    _KERNELS.pop((kind, backend), None)
