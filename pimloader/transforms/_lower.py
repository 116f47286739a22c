"""Lowering a torchvision pipeline into a Plan (its per-sample draws are in _draw.py).

A pipeline is read left to right in three stages: geometric transforms (pads, crops,
resizes, flips) and colour transforms (ColorJitter, RandomPhotometricDistort, Grayscale,
RandomGrayscale) on uint8 values, in any order; then elementwise transforms (dtype
conversion, normalisation); then a tail of whatever cannot be lowered, which runs as
Python. Which stage a step belongs to is its registered op's role (transforms/registry.py;
a v1 op lowers as its v2 equivalent). Random parameters are drawn by the transforms' own
`make_params` (and the same `torch.rand(1)` test that `_RandomApplyTransform` uses for flips
and RandomGrayscale), in pipeline order, so that under the same seed a sample gets exactly
the numbers torchvision would draw for it.
"""
from __future__ import annotations

import warnings

import torch

from .plan import Plan
from .registry import COLOUR, ELEMENTWISE, GEOMETRY, TO_IMAGE, flatten, op_of


def lower(transform, *, warn: bool = True) -> Plan:
    """Lower `transform` (a Compose or a single transform, v2 or v1) into a Plan."""
    geometric, colour, steps, elementwise, tail = [], [], [], [], []
    for step in flatten(transform):
        role, lowered = lowering(step)
        native = not elementwise and not tail
        if native and role == TO_IMAGE:
            continue
        if native and role == GEOMETRY:
            geometric.append(lowered)
            steps.append(lowered)
        elif native and role == COLOUR:
            colour.append(lowered)
            steps.append(lowered)
        elif not tail and role == ELEMENTWISE:
            elementwise.append(lowered)
        else:
            tail.append(step)
    plan = Plan(geometric, elementwise, tail, torch.uint8, _fixed_output_size(geometric),
                colour, steps)
    if elementwise:
        try:
            plan.output_dtype = plan.lookup_table(plan.output_channels()).dtype
        except (RuntimeError, ValueError, TypeError):
            # e.g. a 3-channel Normalize after Grayscale(1): torchvision's own error, at
            # run time, from the Python tail
            plan.tail[:0], plan.elementwise = plan.elementwise, []
    if plan.tail and warn:
        names = ", ".join(type(step).__name__ for step in plan.tail)
        warnings.warn(f"pimloader: {names} cannot be lowered to native kernels; "
                      f"from there on the pipeline runs as Python on each sample",
                      stacklevel=2)
    return plan


def lowering(step) -> tuple[str | None, object]:
    """(the image role `step` lowers to, or None; what lowers in its place: its registered
    equivalent (a v1 op's v2 op), or the step itself). Geometric and colour ops lower
    through their draw; an instance whose arguments the kernels do not compute, None."""
    op = op_of(step)
    if op is not None and op.equivalent is not None:
        lowered = op.equivalent(step)
        if lowered is None:
            return None, step
        op = op_of(lowered) or op
        step = lowered
    if op is None or not op.takes(step):
        return None, step
    if op.role in (GEOMETRY, COLOUR) and op.draw is None:
        return None, step    # lowered on the detection probe only
    return op.role, step


def _fixed_output_size(geometric: list) -> tuple[int, int] | None:
    size = None
    for step in geometric:
        op = op_of(step)
        if op.output_size is not None:
            size = op.output_size(step, size)
    return size
