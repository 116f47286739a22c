"""Lowering a detection pipeline by running torchvision's own transforms on a stand-in image.

A detection sample is `(image, target)`, and torchvision v2 transforms draw their random
numbers from the whole sample (RandomIoUCrop from the boxes) and move boxes and masks with
the pixels. To lower one without re-deriving any of that, the pipeline runs as it is, with
torchvision's own `forward` (so its own RNG calls, in its own order, and its own box and
mask kernels), on the sample whose image is replaced by an `ImageProbe`: a tv_tensors.Image
of the decoded image's shape and no pixels (a zero-stride view of one element). The probe
has kernels of its own, registered with torchvision's `register_kernel`, for the pixel ops
that lower: each returns a probe of the op's output shape and folds the op into a
`Recording`'s Geometry (pad, crop, resize, flip, colour) or its elementwise steps (ToDtype,
Normalize). After the run, the targets are torchvision's by construction and the Recording
says how the fused kernel makes the pixels; a draw the Geometry cannot fuse (two resizes, a
crop beyond the image, nearest interpolation) leaves `Recording.geometry` None, and the
caller replays the sample as Python from the same RNG state.

Only pipelines made of ops registered with `probe` (transforms/registry.py) run on a probe
(any other transform could compute on the stand-in's pixels), and on a copy (`for_probe`) in which what is given per
type for tv_tensors.Image (a fill, a dtype) is given to ImageProbe too, and whose
RandomIoUCrops draw with _draw.iou_crop_params (torchvision's RNG calls and result, the box
tests in numpy). Colour ops (adjust_brightness, adjust_contrast, adjust_saturation,
adjust_hue, permute_channels: RandomPhotometricDistort, ColorJitter) are probe kernels too,
recorded into the Geometry before or after its geometric steps.
"""
from __future__ import annotations

import copy
import threading

import torch
import torchvision.transforms.v2 as v2
from torchvision import tv_tensors
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import (
    _check_interpolation, _compute_resized_output_size, _parse_pad_padding)

from ._draw import iou_crop_params
from .params import Geometry, NotFusable
from .registry import flatten, op_of

_RESAMPLING = (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)


class ImageProbe(tv_tensors.Image):
    """An image of known shape and dtype, without pixels."""


_ONE = {}  # dtype -> the one-element tensor every probe of that dtype is a view of


def make_probe(shape, dtype=torch.uint8) -> ImageProbe:
    if dtype not in _ONE:
        _ONE[dtype] = torch.zeros((), dtype=dtype)
    return _ONE[dtype].expand(*shape).as_subclass(ImageProbe)


def is_probe(value) -> bool:
    """Whether `value` is a probe (or one that ToPureTensor made a plain tensor)."""
    return (isinstance(value, torch.Tensor) and value.dim() == 3
            and value.dtype in _ONE and value.data_ptr() == _ONE[value.dtype].data_ptr())


class Recording:
    """What a probe run did to the image: `geometry` (None: not fusable, see `why`) and the
    elementwise steps after it, as ("to_dtype", dtype, scale) / ("normalize", mean, std)."""

    def __init__(self, height: int, width: int) -> None:
        self.geometry: Geometry | None = Geometry.identity(height, width)
        self.elementwise: list[tuple] = []
        self.why = ""

    def fuse(self, update) -> None:
        if self.geometry is None:
            return
        if self.elementwise:
            return self.fail("a geometric op after ToDtype or Normalize")
        try:
            self.geometry = update(self.geometry)
        except NotFusable as error:
            self.fail(str(error))

    def fail(self, why: str) -> None:
        self.geometry, self.why = None, why


_state = threading.local()


def _recording() -> Recording:
    recording = getattr(_state, "recording", None)
    if recording is None:
        raise RuntimeError("an ImageProbe was transformed outside pimloader's probe run")
    return recording


def run_on_probe(transforms, target, height: int, width: int):
    """(the transformed sample with a probe as its image, the Recording) of `transforms`
    on (a probe of a 3 x height x width uint8 image, target)."""
    recording = Recording(height, width)
    _state.recording = recording
    try:
        sample = transforms(make_probe((3, height, width)), target)
    finally:
        _state.recording = None
    return sample, recording


def for_probe(transforms):
    """A copy of `transforms` to run on probes (values given per type, such as a fill or a
    dtype for tv_tensors.Image, given to ImageProbe too), or None when some step has no
    probe kernels for what it does to an image (its registered op is not `probe`)."""
    steps = flatten(transforms, samples=True)
    ops = [op_of(step) for step in steps]
    if any(op is None or not op.probe for op in ops):
        return None
    if any(op.plain_tensor for op in ops[:-1]):
        return None   # a plain tensor after it would meet torch.Tensor's kernels
    transforms = copy.deepcopy(transforms)
    for step in flatten(transforms, samples=True):
        op = op_of(step)
        if op.probe_form is not None and type(step) is op.cls:   # not a subclass's own draw
            step.__class__ = op.probe_form
        for per_type in (getattr(step, "_fill", None), getattr(step, "dtype", None)):
            if isinstance(per_type, dict) and tv_tensors.Image in per_type:
                per_type[ImageProbe] = per_type[tv_tensors.Image]
    return transforms


class RandomIoUCrop(v2.RandomIoUCrop):
    """RandomIoUCrop whose make_params is _draw.iou_crop_params: the same RNG calls and
    result, its box tests in numpy (most of a lowered SSD sample's host time otherwise).
    Named as torchvision's, whose messages name `type(self).__name__`."""

    def make_params(self, flat_inputs):
        return iou_crop_params(self, flat_inputs)


# -- the probe's kernels --------------------------------------------------------------------

@F.register_kernel(F.horizontal_flip, ImageProbe)
def _horizontal_flip(probe):
    _recording().fuse(lambda g: g.flip(True))
    return make_probe(probe.shape, probe.dtype)


@F.register_kernel(F.vertical_flip, ImageProbe)
def _vertical_flip(probe):
    _recording().fuse(lambda g: g.flip(False))
    return make_probe(probe.shape, probe.dtype)


@F.register_kernel(F.resize, ImageProbe)
def _resize(probe, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
            antialias=True):
    height, width = probe.shape[-2:]
    out = tuple(_compute_resized_output_size((height, width), size=size, max_size=max_size))
    interpolation = _check_interpolation(interpolation)
    if out != (height, width):
        if interpolation not in _RESAMPLING or probe.dtype != torch.uint8:
            _recording().fail(f"{interpolation.value} resize of a {probe.dtype} image")
        else:
            _recording().fuse(lambda g: g.resize(*out, interpolation, antialias))
    return make_probe((probe.shape[0], *out), probe.dtype)


@F.register_kernel(F.crop, ImageProbe)
def _crop(probe, top, left, height, width):
    _recording().fuse(lambda g: g.crop(top, left, height, width))
    return make_probe((probe.shape[0], height, width), probe.dtype)


@F.register_kernel(F.pad, ImageProbe)
def _pad(probe, padding, fill=None, padding_mode="constant"):
    left, right, top, bottom = _parse_pad_padding(padding)
    channels, height, width = probe.shape
    if probe.dtype != torch.uint8:
        _recording().fail(f"padding a {probe.dtype} image")
    else:
        values = pad_fill(fill, channels) if padding_mode == "constant" else (0,) * channels
        _recording().fuse(lambda g: g.pad(left, top, right, bottom, padding_mode, values))
    return make_probe((channels, height + top + bottom, width + left + right), probe.dtype)


def _colour(probe, op) -> ImageProbe:
    if probe.dtype != torch.uint8:
        _recording().fail(f"{op[0]} of a {probe.dtype} image")
    else:
        _recording().fuse(lambda g: g.adjust_colour([op], False))
    return make_probe(probe.shape, probe.dtype)


@F.register_kernel(F.adjust_brightness, ImageProbe)
def _brightness(probe, brightness_factor):
    return _colour(probe, ("brightness", brightness_factor))


@F.register_kernel(F.adjust_contrast, ImageProbe)
def _contrast(probe, contrast_factor):
    return _colour(probe, ("contrast", contrast_factor))


@F.register_kernel(F.adjust_saturation, ImageProbe)
def _saturation(probe, saturation_factor):
    return _colour(probe, ("saturation", saturation_factor))


@F.register_kernel(F.adjust_hue, ImageProbe)
def _hue(probe, hue_factor):
    return _colour(probe, ("hue", hue_factor))


@F.register_kernel(F.permute_channels, ImageProbe)
def _permute(probe, permutation):
    return _colour(probe, ("permute", tuple(int(c) for c in permutation)))


@F.register_kernel(F.to_dtype, ImageProbe)
def _to_dtype(probe, dtype=torch.float, scale=False):
    _recording().elementwise.append(("to_dtype", dtype, scale))
    return make_probe(probe.shape, dtype)


@F.register_kernel(F.normalize, ImageProbe)
def _normalize(probe, mean, std, inplace=False):
    # torchvision's own checks (a float image, non-zero std), on one pixel, raised in place
    F.normalize_image(torch.zeros((probe.shape[0], 1, 1), dtype=probe.dtype), mean, std)
    _recording().elementwise.append(("normalize", tuple(mean), tuple(std)))
    return make_probe(probe.shape, probe.dtype)


_FILLS: dict = {}


def pad_fill(fill, channels: int) -> tuple[int, ...]:
    """The uint8 values torchvision's pad writes for `fill`, read back from a 1x1 image
    that torchvision itself pads (its conversions, rounding and errors apply)."""
    key = (repr(fill), channels)
    if key not in _FILLS:
        probe = torch.zeros((channels, 1, 1), dtype=torch.uint8)
        padded = F.pad_image(probe, [1, 0, 0, 0], fill=fill, padding_mode="constant")
        _FILLS[key] = tuple(int(v) for v in padded[:, 0, 0])
    return _FILLS[key]


def apply_elementwise(steps: list[tuple], image: torch.Tensor) -> torch.Tensor:
    """The recorded elementwise steps run by torchvision on `image` (a lookup ramp)."""
    for step in steps:
        if step[0] == "to_dtype":
            image = F.to_dtype_image(image, step[1], scale=step[2])
        else:
            image = F.normalize_image(image, list(step[1]), list(step[2]))
    return image
