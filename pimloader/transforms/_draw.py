"""Drawing one sample's parameters, with torchvision's own calls in torchvision's order.

Random parameters are drawn by the transforms' own `make_params` (and the same
`torch.rand(1)` test that `_RandomApplyTransform` uses for flips and RandomGrayscale), in
pipeline order, so that under the same seed a sample gets exactly the numbers torchvision
would draw for it; the draws are then fused into one `Geometry` where the kernel can run it.
"""
from __future__ import annotations

import math
import weakref

import numpy as np
import torch
import torchvision.transforms.v2 as v2
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2._utils import _get_fill, get_bounding_boxes, query_size
from torchvision.transforms.v2.functional._geometry import (
    _center_crop_compute_crop_anchor, _center_crop_compute_padding,
    _center_crop_parse_output_size, _compute_resized_output_size, _parse_pad_padding)

from .params import Geometry, NotFusable, SampleParams
from .registry import op_of

_JITTER_OPS = {0: "brightness", 1: "contrast", 2: "saturation", 3: "hue"}


def draw_sample(plan, height: int, width: int, channels: int = 3) -> SampleParams:
    """One sample's draw for an image of `height` x `width` x `channels`: its geometric and
    colour steps in pipeline order (each by its registered op's draw), fused into one
    Geometry where the kernel can run it."""
    geometry: Geometry | None = Geometry.identity(height, width)
    size = (height, width)
    steps = []
    for step in plan.native_steps:
        params, size, channels, fuse = op_of(step).draw(step, size, channels)
        steps.append((step, params))
        if geometry is not None and params is not None and fuse is not None:
            try:
                geometry = fuse(geometry)
            except NotFusable:
                geometry = None
    return SampleParams(steps, geometry)


def colour_output_channels(colour: list, channels: int) -> int:
    """Channels after the colour steps (whatever their draws) for `channels` in."""
    for step in colour:
        op = op_of(step)
        if op.channels is not None:
            channels = op.channels(step, channels)
    return channels


def grayscale_channels(step, channels: int) -> int:
    """The channels Grayscale makes of `channels` (its registered `channels`)."""
    if _v1(step) and channels == 1:
        return 1  # v1 expands a one-channel image to its own shape: it stays one channel
    return step.num_output_channels


def _v1(step) -> bool:
    """Whether a colour step computes with v1's arithmetic (transforms/_v1.py)."""
    return getattr(step, "v1_arithmetic", False)


def _adjusting(ops: list, v1: bool):
    """The fuse step of drawn colour ops (None: nothing to adjust)."""
    return (lambda geometry: geometry.adjust_colour(ops, v1)) if ops else None


# -- the colour ops' draws: (params, size, channels after, fuse) -----------------------------

def draw_grayscale(step, size, channels: int):
    params = step.make_params(_stand_in(size or (1, 1), channels))
    out = grayscale_channels(step, channels)
    return params, size, out, _adjusting([("grayscale", out)], _v1(step))


def draw_random_grayscale(step, size, channels: int):
    stand_in = _stand_in(size or (1, 1), channels)
    if torch.rand(1) >= step.p:
        return None, size, channels, None
    params = step.make_params(stand_in)
    return params, size, channels, _adjusting([("grayscale", params["num_input_channels"])],
                                              _v1(step))


def draw_color_jitter(step, size, channels: int):
    params = step.make_params(_stand_in(size or (1, 1), channels))
    ops = [(_JITTER_OPS[fn_id], params[f"{_JITTER_OPS[fn_id]}_factor"])
           for fn_id in params["fn_idx"].tolist()
           if params[f"{_JITTER_OPS[fn_id]}_factor"] is not None]
    return params, size, channels, _adjusting(ops, _v1(step))


def draw_photometric_distort(step, size, channels: int):
    params = step.make_params(_stand_in(size or (1, 1), channels))
    return params, size, channels, _adjusting(photometric_distort_ops(params, channels),
                                              _v1(step))


def photometric_distort_ops(params: dict, channels: int) -> list:
    """RandomPhotometricDistort's transform for its draw (`make_params`' dict, for an image
    of `channels` channels), in its order, as kernel colour ops."""
    brightness, contrast, saturation, hue = (params[f"{name}_factor"] for name in
                                             ("brightness", "contrast", "saturation", "hue"))
    before = params["contrast_before"]
    ops = [(name, factor) for name, factor in (
        ("brightness", brightness), ("contrast", contrast if before else None),
        ("saturation", saturation), ("hue", hue), ("contrast", None if before else contrast))
        if factor is not None]
    permutation = params["channel_permutation"]
    if permutation is not None and channels == 3:  # one channel: permuting it changes nothing
        ops.append(("permute", tuple(permutation.tolist())))
    return ops


def _stand_in(size: tuple[int, int], channels: int = 3) -> list:
    """What make_params reads of an image (its size), without an image."""
    return [torch.empty((), dtype=torch.uint8).expand(channels, *size)]


def _own_draw(step, cls) -> bool:
    """Whether `step` draws with `cls`'s make_params (a subclass may override it)."""
    return type(step).make_params is cls.make_params


# -- the geometric ops' draws: (params, size after, channels, fuse) --------------------------

def draw_horizontal_flip(step, size, channels: int):
    return _draw_flip(step, size, channels, True)


def draw_vertical_flip(step, size, channels: int):
    return _draw_flip(step, size, channels, False)


def _draw_flip(step, size, channels: int, horizontal: bool):
    if torch.rand(1) >= step.p:
        return None, size, channels, None
    plain = _own_draw(step, v2.RandomHorizontalFlip if horizontal else v2.RandomVerticalFlip)
    params = {} if plain else step.make_params(_stand_in(size, channels))  # make_params: {}
    return params, size, channels, lambda g: g.flip(horizontal)


def draw_resized_crop(step, size, channels: int):
    if _own_draw(step, v2.RandomResizedCrop):
        params = resized_crop_params(step, *size)
    else:
        params = step.make_params(_stand_in(size, channels))
    box = (params["top"], params["left"], params["height"], params["width"])
    out = tuple(step.size)
    return params, out, channels, lambda g: g.crop(*box).resize(
        *out, step.interpolation, step.antialias)


def draw_resize(step, size, channels: int):
    params = step.make_params(_stand_in(size, channels))
    out = tuple(_compute_resized_output_size(size, step.size, step.max_size))
    if out == size:
        return params, out, channels, lambda g: g
    return params, out, channels, lambda g: g.resize(*out, step.interpolation, step.antialias)


def draw_center_crop(step, size, channels: int):
    params = step.make_params(_stand_in(size, channels))
    return params, *_center_crop(step, size, channels)


def draw_random_crop(step, size, channels: int):
    params = step.make_params(_stand_in(size, channels))
    return params, *_random_crop(step, params, size, channels)


def draw_pad(step, size, channels: int):
    params = step.make_params(_stand_in(size, channels))
    left, right, top, bottom = _parse_pad_padding(step.padding)
    out = (size[0] + top + bottom, size[1] + left + right)
    return params, out, channels, lambda g: g.pad(left, top, right, bottom, step.padding_mode,
                                                  _fill_values(step))


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


def _center_crop(step, size, channels: int):
    """(output size, channels, fuse) of a CenterCrop: torchvision pads with zeros where it is larger."""
    crop = tuple(_center_crop_parse_output_size(step.size))
    height, width = size
    if crop[0] <= height and crop[1] <= width:
        top, left = _center_crop_compute_crop_anchor(*crop, height, width)
        return crop, channels, lambda g: g.crop(top, left, *crop)
    left, top, right, bottom = _center_crop_compute_padding(*crop, height, width)
    padded = (height + top + bottom, width + left + right)
    anchor = _center_crop_compute_crop_anchor(*crop, *padded)

    def fuse(geometry):
        geometry = geometry.pad(left, top, right, bottom, "constant", (0, 0, 0))
        return geometry if crop == padded else geometry.crop(*anchor, *crop)
    return crop, channels, fuse


def _random_crop(step, params, size, channels: int):
    """(output size, channels, fuse) of a RandomCrop's draw: pad (padding, pad_if_needed), then crop."""
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
    return (box[2:] if params["needs_crop"] else padded), channels, fuse


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


def iou_crop_params(step: v2.RandomIoUCrop, flat_inputs: list) -> dict:
    """`step.make_params(flat_inputs)` with the very same torch RNG calls in the same order
    (so the same draws and the same result), its box tests in numpy float32 on boxes
    converted once instead of torch ops on tv_tensors in every trial (float32 arithmetic,
    one IEEE-rounded operation at a time, in torchvision's order: the same bits). Boxes
    that are not a float32 (N, 4) tensor get torchvision's own make_params."""
    bboxes = get_bounding_boxes(flat_inputs)
    if bboxes.dtype != torch.float32 or bboxes.dim() != 2:
        return v2.RandomIoUCrop.make_params(step, flat_inputs)
    orig_h, orig_w = query_size(flat_inputs)
    xyxy = F.convert_bounding_box_format(bboxes.as_subclass(torch.Tensor), bboxes.format,
                                         tv_tensors.BoundingBoxFormat.XYXY).numpy()
    half = np.float32(0.5)
    cx, cy = half * (xyxy[..., 0] + xyxy[..., 2]), half * (xyxy[..., 1] + xyxy[..., 3])
    areas = (xyxy[..., 2] - xyxy[..., 0]) * (xyxy[..., 3] - xyxy[..., 1])
    while True:
        idx = int(torch.randint(low=0, high=len(step.options), size=(1,)))
        min_jaccard_overlap = step.options[idx]
        if min_jaccard_overlap >= 1.0:
            return dict()
        for _ in range(step.trials):
            r = step.min_scale + (step.max_scale - step.min_scale) * torch.rand(2)
            new_w = int(orig_w * r[0])
            new_h = int(orig_h * r[1])
            if not (step.min_aspect_ratio <= new_w / new_h <= step.max_aspect_ratio):
                continue
            r = torch.rand(2)
            left = int((orig_w - new_w) * r[0])
            top = int((orig_h - new_h) * r[1])
            right, bottom = left + new_w, top + new_h
            if left == right or top == bottom:
                continue
            within = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            if not within.any():
                continue
            if _max_iou(xyxy[within], areas[within], left, top, right, bottom) < np.float32(
                    min_jaccard_overlap):
                continue
            return dict(top=top, left=left, height=new_h, width=new_w,
                        is_within_crop_area=torch.from_numpy(within))


def _max_iou(boxes: np.ndarray, areas: np.ndarray, left, top, right, bottom) -> np.float32:
    """torchvision.ops.box_iou(boxes, [[left, top, right, bottom]]).max(), in float32."""
    crop = np.array([left, top, right, bottom], dtype=np.float32)
    crop_area = (crop[2] - crop[0]) * (crop[3] - crop[1])
    lt = np.maximum(boxes[:, :2], crop[:2])
    rb = np.minimum(boxes[:, 2:], crop[2:])
    wh = np.maximum(rb - lt, np.float32(0))
    inter = wh[:, 0] * wh[:, 1]
    union = areas + crop_area - inter
    return (inter / union).max()
