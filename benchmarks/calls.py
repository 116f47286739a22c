"""Calls written once as data, so that what a peer runs and what the benchmark prints as its
pipeline cannot drift apart.

    step = Call("fn.resize", resize_x=224, resize_y=224)
    step.text()                       # 'fn.resize(resize_x=224, resize_y=224)'
    step.run({"fn": fn}, images)      # runs fn.resize(images, resize_x=224, resize_y=224)

A dotted name is looked up in a namespace (a dict of top-level names); arguments that are
themselves a Call or a Name are resolved in the same namespace first.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Name:
    """A value named in the peer's namespace, e.g. Name("types.RGB")."""

    dotted: str

    def resolve(self, namespace: dict):
        top, *rest = self.dotted.split(".")
        if top not in namespace:
            raise NameError(f"{self.dotted!r}: {top!r} is not in the namespace "
                            f"({', '.join(sorted(namespace))})")
        return functools.reduce(getattr, rest, namespace[top])

    def text(self) -> str:
        return self.dotted


@dataclass(frozen=True)
class Call:
    """name(*args, **kwargs), with `inputs` passed first when it runs."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __init__(self, name: str, /, *args, **kwargs):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)

    def run(self, namespace: dict, *inputs, **built):
        """name(*inputs, *args, **kwargs, **built): `built` adds arguments made elsewhere
        (and printed elsewhere), such as a loader's pipelines of other Calls."""
        function = Name(self.name).resolve(namespace)
        args = [_resolve(value, namespace) for value in self.args]
        kwargs = {key: _resolve(value, namespace) for key, value in self.kwargs.items()}
        return function(*inputs, *args, **kwargs, **built)

    def text(self, **built: str) -> str:
        """The call as Python; `built` gives the text of the arguments `run` gets built."""
        parts = [_text(value) for value in self.args]
        parts += [f"{key}={_text(value)}" for key, value in self.kwargs.items()]
        parts += [f"{key}={text}" for key, text in built.items()]
        return f"{self.name}({', '.join(parts)})"


def _resolve(value, namespace: dict):
    if isinstance(value, Call):
        return value.run(namespace)
    if isinstance(value, Name):
        return value.resolve(namespace)
    return value


def _text(value) -> str:
    if isinstance(value, (Call, Name)):
        return value.text()
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_text(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


@dataclass(frozen=True)
class Let:
    """`targets = call`: one line of a pipeline written as a graph rather than a chain
    (DALI's detection reader gives images, boxes and labels that later steps take apart).
    Running it binds the targets in the namespace, so later calls name them with Name."""

    targets: tuple
    call: Call

    def __init__(self, targets: str, call: Call):
        object.__setattr__(self, "targets", tuple(name.strip() for name in targets.split(",")))
        object.__setattr__(self, "call", call)

    def run(self, namespace: dict) -> None:
        result = self.call.run(namespace)
        values = tuple(result) if len(self.targets) > 1 else (result,)
        if len(values) != len(self.targets):
            raise ValueError(f"{self.text()}: {len(values)} outputs for "
                             f"{len(self.targets)} names")
        namespace.update(zip(self.targets, values))

    def text(self) -> str:
        return f"{', '.join(self.targets)} = {self.call.text()}"


def run_program(program, namespace: dict) -> dict:
    """Run Let lines in order; the namespace, with every name they bound."""
    namespace = dict(namespace)
    for line in program:
        line.run(namespace)
    return namespace
