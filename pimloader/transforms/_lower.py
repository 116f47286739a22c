"""Lowering a torchvision pipeline into a Plan, and drawing one sample's parameters.

A pipeline is read left to right in four stages: geometric transforms (pads, crops,
resizes, flips), then colour transforms (ColorJitter without hue, Grayscale,
RandomGrayscale) on uint8 values, then elementwise transforms (dtype conversion,
normalisation), then a tail of whatever cannot be lowered, which runs as Python. Random
parameters are drawn by the transforms' own `make_params` (and the same `torch.rand(1)`
test that `_RandomApplyTransform` uses for flips and RandomGrayscale), in pipeline order,
so that under the same seed a sample gets exactly the numbers torchvision would draw for it.
"""
from __future__ import annotations

import math
import warnings
import weakref

import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.transforms import functional as F1
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2._utils import _get_fill
from torchvision.transforms.v2.functional._geometry import (
    _center_crop_compute_crop_anchor, _center_crop_compute_padding,
    _center_crop_parse_output_size, _compute_resized_output_size, _parse_pad_padding)

from ._plan import Geometry, NotFusable, Plan, SampleParams

_CONVERSIONS_TO_IMAGE = (v2.ToImage, v2.PILToTensor, v1.PILToTensor, v2.ToPureTensor)
_GEOMETRIC = (v2.RandomResizedCrop, v2.Resize, v2.CenterCrop, v2.RandomCrop,
              v2.RandomHorizontalFlip, v2.RandomVerticalFlip, v2.Pad)
_ELEMENTWISE = (v2.ToDtype, v2.ConvertImageDtype, v2.Normalize,
                v1.ConvertImageDtype, v1.Normalize)
_RESAMPLING_MODES = (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC)


def lower(transform, *, warn: bool = True) -> Plan:
    """Lower `transform` (a Compose or a single transform, v2 or v1) into a Plan."""
    geometric, colour, elementwise, tail = [], [], [], []
    for step in _flatten(transform):
        as_v2 = _v1_to_v2(step)
        native = not elementwise and not tail
        if native and not colour and isinstance(as_v2, _CONVERSIONS_TO_IMAGE):
            continue
        if native and not colour and _is_lowerable_geometric(as_v2):
            geometric.append(as_v2)
        elif native and _is_lowerable_colour(as_v2):
            colour.append(as_v2)
        elif not tail and _is_elementwise(step):
            elementwise.append(_ToTensorOnTensors() if isinstance(step, v1.ToTensor) else step)
        else:
            tail.append(step)
    plan = Plan(geometric, elementwise, tail, torch.uint8, _fixed_output_size(geometric),
                colour)
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
    if isinstance(step, v2.ColorJitter):
        return step.hue is None   # hue goes through HSV: not in the kernel
    if isinstance(step, v2.Grayscale):
        return step.num_output_channels in (1, 3)
    return isinstance(step, v2.RandomGrayscale)


# ---- torchvision v1 colour transforms: v1's own draws and v1's tensor arithmetic ----------

class _V1ColorJitter(v2.ColorJitter):
    """v1 ColorJitter as a v2 transform: drawn by v1's `get_params` (the same calls as
    v2's make_params), computed by v1's functional ops (separately rounded arithmetic)."""

    def __init__(self, v1_step) -> None:
        super().__init__()
        self.v1_step = v1_step
        for name in ("brightness", "contrast", "saturation", "hue"):
            value = getattr(v1_step, name)
            setattr(self, name, None if value is None else tuple(value))

    def make_params(self, flat_inputs):
        step = self.v1_step
        fn_idx, b, c, s, h = step.get_params(step.brightness, step.contrast, step.saturation,
                                             step.hue)
        return dict(fn_idx=fn_idx, brightness_factor=b, contrast_factor=c,
                    saturation_factor=s, hue_factor=h)

    def transform(self, inpt, params):
        return _v1_jitter(inpt, params)


def _v1_jitter(image, params):
    adjust = [(F1.adjust_brightness, "brightness_factor"), (F1.adjust_contrast, "contrast_factor"),
              (F1.adjust_saturation, "saturation_factor"), (F1.adjust_hue, "hue_factor")]
    for fn_id in params["fn_idx"].tolist():
        fn, key = adjust[fn_id]
        if params[key] is not None:
            image = fn(image, params[key])
    return image


class _V1Grayscale(v2.Grayscale):
    """v1 Grayscale: v1's tensor arithmetic."""

    def transform(self, inpt, params):
        return F1.rgb_to_grayscale(inpt, num_output_channels=self.num_output_channels)


class _V1RandomGrayscale(v2.RandomGrayscale):
    """v1 RandomGrayscale: the same draw (torch.rand(1) < p), v1's tensor arithmetic."""

    def transform(self, inpt, params):
        return F1.rgb_to_grayscale(inpt, num_output_channels=params["num_input_channels"])


_V1_COLOUR = (_V1ColorJitter, _V1Grayscale, _V1RandomGrayscale)


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


def draw_sample(plan: Plan, height: int, width: int) -> SampleParams:
    """One sample's draw for an image of `height` x `width`: geometry, then colour."""
    params = draw_geometric(plan.geometric, height, width)
    channels = 3
    size = params.geometry.size if params.geometry is not None else None
    for step in plan.colour:
        step_params, ops, channels = _draw_colour(step, channels, size)
        params.steps.append((step, step_params))
        if params.geometry is not None and ops:
            try:
                params.geometry = params.geometry.adjust_colour(
                    ops, isinstance(step, _V1_COLOUR))
            except NotFusable:
                params.geometry = None
    return params


def colour_output_channels(colour: list, channels: int) -> int:
    """Channels after the colour steps (whatever their draws) for `channels` in."""
    for step in colour:
        if isinstance(step, v2.Grayscale):
            channels = _grayscale_channels(step, channels)
    return channels


def _grayscale_channels(step, channels: int) -> int:
    if isinstance(step, _V1Grayscale) and channels == 1:
        return 1  # v1 expands a one-channel image to its own shape: it stays one channel
    return step.num_output_channels


def _draw_colour(step, channels: int, size):
    """(params for replay (None: not applied), kernel colour ops, channels after)."""
    stand_in = _stand_in(size or (1, 1), channels)
    if isinstance(step, v2.RandomGrayscale):
        if torch.rand(1) >= step.p:
            return None, [], channels
        params = step.make_params(stand_in)
        return params, [("grayscale", params["num_input_channels"])], channels
    params = step.make_params(stand_in)
    if isinstance(step, v2.Grayscale):
        out = _grayscale_channels(step, channels)
        return params, [("grayscale", out)], out
    factors = {0: params["brightness_factor"], 1: params["contrast_factor"],
               2: params["saturation_factor"]}
    names = {0: "brightness", 1: "contrast", 2: "saturation"}
    ops = [(names[fn_id], factors[fn_id]) for fn_id in params["fn_idx"].tolist()
           if fn_id in factors and factors[fn_id] is not None]
    return params, ops, channels


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


def _stand_in(size: tuple[int, int], channels: int = 3) -> list:
    """What make_params reads of an image (its size), without an image."""
    return [torch.empty((), dtype=torch.uint8).expand(channels, *size)]


def _draw_step(step, size):
    if isinstance(step, (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)):
        if torch.rand(1) >= step.p:
            return None, size, None
        horizontal = isinstance(step, v2.RandomHorizontalFlip)
        params = {} if type(step) in _PLAIN_FLIPS else step.make_params(_stand_in(size))
        return params, size, lambda g: g.flip(horizontal)
    if type(step) is v2.RandomResizedCrop:
        params = resized_crop_params(step, *size)
    else:
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
        return params, *_center_crop(step, size)
    if isinstance(step, v2.RandomCrop):
        return params, *_random_crop(step, params, size)
    if isinstance(step, v2.Pad):
        left, right, top, bottom = _parse_pad_padding(step.padding)
        out = (size[0] + top + bottom, size[1] + left + right)
        return params, out, lambda g: g.pad(left, top, right, bottom, step.padding_mode,
                                            _fill_values(step))
    raise TypeError(f"{type(step).__name__} is not a lowerable geometric transform")


_PLAIN_FLIPS = (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)  # make_params: {}


class _Uniform:
    """One reused 1-element tensor of the default dtype for `uniform_` draws: the numbers
    depend on the generator and the dtype, not on which tensor receives them."""

    def __init__(self) -> None:
        self.buffer = torch.empty(1)

    def __call__(self, low: float, high: float) -> torch.Tensor:
        if self.buffer.dtype != torch.get_default_dtype():
            self.buffer = torch.empty(1)
        return self.buffer.uniform_(low, high)


_uniform = _Uniform()


def resized_crop_params(step: v2.RandomResizedCrop, height: int, width: int) -> dict:
    """`step.make_params` for a height x width image, making the very same torch RNG calls
    in the same order (so the same numbers), without its per-call tensors and input checks."""
    area = height * width
    scale_low, scale_high = step.scale
    ratio_low, ratio_high = step._log_ratio.tolist()
    for _ in range(10):
        target_area = area * _uniform(scale_low, scale_high).item()
        aspect_ratio = _uniform(ratio_low, ratio_high).exp_().item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            top = torch.randint(0, height - h + 1, size=(1,)).item()
            left = torch.randint(0, width - w + 1, size=(1,)).item()
            return dict(top=top, left=left, height=h, width=w)
    return _central_crop_params(step.ratio, height, width)


def _central_crop_params(ratio, height: int, width: int) -> dict:
    """RandomResizedCrop's fallback after ten rejected draws (torchvision's rule)."""
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return dict(top=(height - h) // 2, left=(width - w) // 2, height=h, width=w)


def _center_crop(step, size):
    """(output size, fuse) of a CenterCrop: torchvision pads with zeros where it is larger."""
    crop = tuple(_center_crop_parse_output_size(step.size))
    height, width = size
    if crop[0] <= height and crop[1] <= width:
        top, left = _center_crop_compute_crop_anchor(*crop, height, width)
        return crop, lambda g: g.crop(top, left, *crop)
    left, top, right, bottom = _center_crop_compute_padding(*crop, height, width)
    padded = (height + top + bottom, width + left + right)
    anchor = _center_crop_compute_crop_anchor(*crop, *padded)

    def fuse(geometry):
        geometry = geometry.pad(left, top, right, bottom, "constant", (0, 0, 0))
        return geometry if crop == padded else geometry.crop(*anchor, *crop)
    return crop, fuse


def _random_crop(step, params, size):
    """(output size, fuse) of a RandomCrop's draw: pad (padding, pad_if_needed), then crop."""
    box = (params["top"], params["left"], params["height"], params["width"])
    if params["needs_pad"]:
        left, top, right, bottom = params["padding"]
        padded = (size[0] + top + bottom, size[1] + left + right)
    else:
        padded = size

    def fuse(geometry):
        if params["needs_pad"]:
            geometry = geometry.pad(*params["padding"], step.padding_mode, _fill_values(step))
        return geometry.crop(*box) if params["needs_crop"] else geometry
    return (box[2:] if params["needs_crop"] else padded), fuse


_FILLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fill_values(step) -> tuple[int, ...]:
    """The uint8 values torchvision's pad writes for `step`'s fill, per channel: read back
    from a 1x1 image padded by torchvision itself (so its conversions and errors apply)."""
    if step.padding_mode != "constant":
        return (0, 0, 0)
    if step not in _FILLS:
        probe = torch.zeros((3, 1, 1), dtype=torch.uint8)
        try:
            padded = F.pad(probe, [1, 0, 0, 0], fill=_get_fill(step._fill, torch.Tensor),
                           padding_mode="constant")
        except (TypeError, ValueError, RuntimeError) as error:
            _FILLS[step] = error
        else:
            _FILLS[step] = tuple(int(v) for v in padded[:, 0, 0])
    fill = _FILLS[step]
    if isinstance(fill, Exception):
        raise NotFusable(f"fill {step.fill!r}: {fill}")
    return fill
