"""Lowering a torchvision pipeline into a Plan (its per-sample draws are in _draw.py).

A pipeline is read left to right in three stages: geometric transforms (pads, crops,
resizes, flips) and colour transforms (ColorJitter, RandomPhotometricDistort, Grayscale,
RandomGrayscale) on uint8 values, in any order; then elementwise transforms (dtype
conversion, normalisation); then a tail of whatever cannot be lowered, which runs as
Python. Random
parameters are drawn by the transforms' own `make_params` (and the same `torch.rand(1)`
test that `_RandomApplyTransform` uses for flips and RandomGrayscale), in pipeline order,
so that under the same seed a sample gets exactly the numbers torchvision would draw for it.
"""
from __future__ import annotations

import warnings

import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.transforms.v2.functional._geometry import (
    _center_crop_parse_output_size, _parse_pad_padding)

from .plan import Plan
from ._v1 import _V1ColorJitter, _V1Grayscale, _V1RandomGrayscale

_CONVERSIONS_TO_IMAGE = (v2.ToImage, v2.PILToTensor, v1.PILToTensor, v2.ToPureTensor)
_GEOMETRIC = (v2.RandomResizedCrop, v2.Resize, v2.CenterCrop, v2.RandomCrop,
              v2.RandomHorizontalFlip, v2.RandomVerticalFlip, v2.Pad)
_ELEMENTWISE = (v2.ToDtype, v2.ConvertImageDtype, v2.Normalize,
                v1.ConvertImageDtype, v1.Normalize)
_RESAMPLING_MODES = (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC)


def lower(transform, *, warn: bool = True) -> Plan:
    """Lower `transform` (a Compose or a single transform, v2 or v1) into a Plan."""
    geometric, colour, steps, elementwise, tail = [], [], [], [], []
    for step in _flatten(transform):
        as_v2 = _v1_to_v2(step)
        native = not elementwise and not tail
        if native and isinstance(as_v2, _CONVERSIONS_TO_IMAGE):
            continue
        if native and _is_lowerable_geometric(as_v2):
            geometric.append(as_v2)
            steps.append(as_v2)
        elif native and _is_lowerable_colour(as_v2):
            colour.append(as_v2)
            steps.append(as_v2)
        elif not tail and _is_elementwise(step):
            elementwise.append(_ToTensorOnTensors() if isinstance(step, v1.ToTensor) else step)
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


def _flatten(transform) -> list:
    if isinstance(transform, (v2.Compose, v1.Compose)):
        return [step for inner in transform.transforms for step in _flatten(inner)]
    return [] if transform is None else [transform]


def _v1_to_v2(step):
    """The v2 transform that draws and computes exactly what a v1 geometric one does."""
    if isinstance(step, v1.RandomResizedCrop):
        return v2.RandomResizedCrop(step.size, step.scale, step.ratio, step.interpolation,
                                    step.antialias)
    if isinstance(step, v1.Resize):
        return v2.Resize(step.size, step.interpolation, step.max_size, step.antialias)
    if isinstance(step, v1.CenterCrop):
        return v2.CenterCrop(step.size)
    if isinstance(step, v1.RandomCrop):
        return v2.RandomCrop(step.size, step.padding, step.pad_if_needed, step.fill,
                             step.padding_mode)
    if isinstance(step, v1.RandomHorizontalFlip):
        return v2.RandomHorizontalFlip(step.p)
    if isinstance(step, v1.RandomVerticalFlip):
        return v2.RandomVerticalFlip(step.p)
    if isinstance(step, v1.Pad) and isinstance(step.fill, (int, float)):  # v1 tensors: no tuples
        return v2.Pad(step.padding, step.fill, step.padding_mode)
    if isinstance(step, v1.ColorJitter):
        return _V1ColorJitter(step)
    if isinstance(step, v1.RandomGrayscale):
        return _V1RandomGrayscale(step.p)
    if isinstance(step, v1.Grayscale):
        return _V1Grayscale(step.num_output_channels)
    return step


def _is_lowerable_geometric(step) -> bool:
    if isinstance(step, (v2.RandomResizedCrop, v2.Resize)):
        return v2.InterpolationMode(step.interpolation) in _RESAMPLING_MODES
    return isinstance(step, _GEOMETRIC)


def _is_lowerable_colour(step) -> bool:
    if isinstance(step, v2.Grayscale):
        return step.num_output_channels in (1, 3)
    return isinstance(step, (v2.ColorJitter, v2.RandomGrayscale, v2.RandomPhotometricDistort))



def _is_elementwise(step) -> bool:
    if isinstance(step, v2.ToDtype):
        return isinstance(step.dtype, torch.dtype)
    return isinstance(step, (*_ELEMENTWISE, v1.ToTensor))


class _ToTensorOnTensors:
    """v1 ToTensor as it acts on a uint8 HWC array, applied to a CHW tensor."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return v1.ToTensor()(image.permute(1, 2, 0).numpy())


def _fixed_output_size(geometric: list) -> tuple[int, int] | None:
    size = None
    for step in geometric:
        if isinstance(step, (v2.RandomResizedCrop, v2.CenterCrop, v2.RandomCrop)):
            size = tuple(_center_crop_parse_output_size(step.size))
        elif isinstance(step, v2.Resize):
            fixed = step.size is not None and len(step.size) == 2
            size = tuple(step.size) if fixed else None
        elif isinstance(step, v2.Pad) and size is not None:
            left, right, top, bottom = _parse_pad_padding(step.padding)
            size = (size[0] + top + bottom, size[1] + left + right)
    return size
