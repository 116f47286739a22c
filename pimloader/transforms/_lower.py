"""Lowering a torchvision pipeline into a Plan, and drawing one sample's parameters.

A pipeline is read left to right in three stages: geometric transforms (crops, resizes,
flips), then elementwise transforms (dtype conversion, normalisation), then a tail of
whatever cannot be lowered, which runs as Python. Random parameters are drawn by the
transforms' own `make_params` (and the same `torch.rand(1)` test that
`_RandomApplyTransform` uses for flips), in pipeline order, so that under the same seed a
sample gets exactly the numbers torchvision would draw for it.
"""
from __future__ import annotations

import warnings

import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.transforms.v2.functional._geometry import (
    _center_crop_compute_crop_anchor, _center_crop_parse_output_size,
    _compute_resized_output_size)

from ._plan import Geometry, NotFusable, Plan, SampleParams

_CONVERSIONS_TO_IMAGE = (v2.ToImage, v2.PILToTensor, v1.PILToTensor, v2.ToPureTensor)
_GEOMETRIC = (v2.RandomResizedCrop, v2.Resize, v2.CenterCrop, v2.RandomCrop,
              v2.RandomHorizontalFlip, v2.RandomVerticalFlip)
_ELEMENTWISE = (v2.ToDtype, v2.ConvertImageDtype, v2.Normalize,
                v1.ConvertImageDtype, v1.Normalize)
_RESAMPLING_MODES = (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC)


def lower(transform, *, warn: bool = True) -> Plan:
    """Lower `transform` (a Compose or a single transform, v2 or v1) into a Plan."""
    geometric, elementwise, tail = [], [], []
    for step in _flatten(transform):
        as_v2 = _v1_to_v2(step)
        if not elementwise and not tail and isinstance(as_v2, _CONVERSIONS_TO_IMAGE):
            continue
        if not elementwise and not tail and _is_lowerable_geometric(as_v2):
            geometric.append(as_v2)
        elif not tail and _is_elementwise(step):
            elementwise.append(_ToTensorOnTensors() if isinstance(step, v1.ToTensor) else step)
        else:
            tail.append(step)
    if tail and warn:
        names = ", ".join(type(step).__name__ for step in tail)
        warnings.warn(f"pimloader: {names} cannot be lowered to native kernels; "
                      f"from there on the pipeline runs as Python on each sample",
                      stacklevel=2)
    plan = Plan(geometric, elementwise, tail, torch.uint8, _fixed_output_size(geometric))
    plan.output_dtype = plan.lookup_table().dtype if elementwise else torch.uint8
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
    return step


def _is_lowerable_geometric(step) -> bool:
    if isinstance(step, (v2.RandomResizedCrop, v2.Resize)):
        return v2.InterpolationMode(step.interpolation) in _RESAMPLING_MODES
    return isinstance(step, _GEOMETRIC)


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
    return size


def draw_geometric(geometric: list, height: int, width: int) -> SampleParams:
    """Draw one sample's parameters for an image of `height` x `width`, as torchvision."""
    geometry: Geometry | None = Geometry.identity(height, width)
    size = (height, width)
    steps = []
    for step in geometric:
        params, size, fuse = _draw_step(step, size)
        steps.append((step, params))
        if geometry is not None and params is not None:
            try:
                geometry = fuse(geometry)
            except NotFusable:
                geometry = None
    return SampleParams(steps, geometry)


def _stand_in(size: tuple[int, int]) -> list:
    """What make_params reads of an image (its size), without an image."""
    return [torch.empty((), dtype=torch.uint8).expand(3, *size)]


def _draw_step(step, size):
    if isinstance(step, (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)):
        if torch.rand(1) >= step.p:
            return None, size, None
        horizontal = isinstance(step, v2.RandomHorizontalFlip)
        return step.make_params(_stand_in(size)), size, lambda g: g.flip(horizontal)
    params = step.make_params(_stand_in(size))
    if isinstance(step, v2.RandomResizedCrop):
        box = (params["top"], params["left"], params["height"], params["width"])
        out = tuple(step.size)
        return params, out, lambda g: g.crop(*box).resize(
            *out, step.interpolation, step.antialias)
    if isinstance(step, v2.Resize):
        out = tuple(_compute_resized_output_size(size, step.size, step.max_size))
        if out == size:
            return params, out, lambda g: g
        return params, out, lambda g: g.resize(*out, step.interpolation, step.antialias)
    if isinstance(step, v2.CenterCrop):
        crop = tuple(_center_crop_parse_output_size(step.size))
        top, left = _center_crop_compute_crop_anchor(*crop, *size)
        return params, crop, lambda g: g.crop(top, left, *crop)
    if isinstance(step, v2.RandomCrop):
        if params["needs_pad"]:
            return params, _padded_crop_size(params, size), _not_fusable
        if not params["needs_crop"]:
            return params, size, lambda g: g
        box = (params["top"], params["left"], params["height"], params["width"])
        return params, box[2:], lambda g: g.crop(*box)
    raise TypeError(f"{type(step).__name__} is not a lowerable geometric transform")


def _padded_crop_size(params, size):
    if params["needs_crop"]:
        return params["height"], params["width"]
    left, right, top, bottom = params["padding"]
    return size[0] + top + bottom, size[1] + left + right


def _not_fusable(geometry):
    raise NotFusable("padding")
