"""The image ops pimloader lowers, registered once each (transforms/registry.py): torchvision
v2's, v1's (as the v2 op that draws and computes the same), and the containers.

One table, one row per class: its role, its draw (transforms/_draw.py), which instances
lower (`accepts`), its fixed output size, whether the detection probe runs it. The audio
ops are registered in _audio_ops.py.
"""
from __future__ import annotations

import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.datasets.vision import StandardTransform
from torchvision.transforms.v2.functional._geometry import (
    _center_crop_parse_output_size, _parse_pad_padding)

from . import _draw as D
from .probe import RandomIoUCrop as ProbeIoUCrop
from .decode import Decode
from .registry import (BOXES, COLOUR, DECODE, ELEMENTWISE, GEOMETRY, IDENTITY, TO_IMAGE,
                       register_container, register_op)
from ._v1 import ToTensorOnTensors, _V1ColorJitter, _V1Grayscale, _V1RandomGrayscale

_RESAMPLING_MODES = (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC)


def _resamples(step) -> bool:
    return v2.InterpolationMode(step.interpolation) in _RESAMPLING_MODES


def _crop_size(step, size):
    return tuple(_center_crop_parse_output_size(step.size))


def _resize_size(step, size):
    return tuple(step.size) if step.size is not None and len(step.size) == 2 else None


def _pad_size(step, size):
    if size is None:
        return None
    left, right, top, bottom = _parse_pad_padding(step.padding)
    return (size[0] + top + bottom, size[1] + left + right)


def _normalization(step):
    """Normalize as audio features' normalisation: one mean and one std for every row."""
    if len(step.mean) == 1 and len(step.std) == 1:
        return {"normalize": (float(step.mean[0]), float(step.std[0]))}
    return None


# -- containers ------------------------------------------------------------------------------
register_container(v2.Compose, lambda c: c.transforms, samples=True, inputs=True)
register_container(v1.Compose, lambda c: c.transforms, samples=False, inputs=True)
register_container(torch.nn.Sequential, list, samples=False, inputs=True)
# a dataset's transform= on the image alone (torchvision's datasets wrap it so)
register_container(StandardTransform,
                   lambda c: [c.transform] if c.target_transform is None else None,
                   samples=True, inputs=False)

# -- torchvision v2 --------------------------------------------------------------------------
register_op(Decode, DECODE)
register_op(v2.ToImage, TO_IMAGE, probe=True, from_pil="image")
register_op(v2.PILToTensor, TO_IMAGE, plain_tensor=True, from_pil="tensor")
register_op(v2.ToPureTensor, TO_IMAGE, probe=True, plain_tensor=True)
register_op(v2.Identity, IDENTITY, probe=True)
register_op(v2.RandomResizedCrop, GEOMETRY, draw=D.draw_resized_crop, accepts=_resamples,
            output_size=_crop_size, draft=True)
register_op(v2.Resize, GEOMETRY, draw=D.draw_resize, accepts=_resamples,
            output_size=_resize_size, probe=True)
register_op(v2.CenterCrop, GEOMETRY, draw=D.draw_center_crop, output_size=_crop_size)
register_op(v2.RandomCrop, GEOMETRY, draw=D.draw_random_crop, output_size=_crop_size,
            probe=True)
register_op(v2.RandomHorizontalFlip, GEOMETRY, draw=D.draw_horizontal_flip, probe=True)
register_op(v2.RandomVerticalFlip, GEOMETRY, draw=D.draw_vertical_flip, probe=True)
register_op(v2.Pad, GEOMETRY, draw=D.draw_pad, output_size=_pad_size, probe=True)
# detection geometry: lowered on the probe only (their draws read the boxes)
register_op(v2.RandomShortestSize, GEOMETRY, probe=True)
register_op(v2.RandomZoomOut, GEOMETRY, probe=True)
register_op(v2.RandomIoUCrop, GEOMETRY, probe=True, probe_form=ProbeIoUCrop)
register_op(v2.ColorJitter, COLOUR, draw=D.draw_color_jitter, probe=True)
register_op(v2.RandomPhotometricDistort, COLOUR, draw=D.draw_photometric_distort, probe=True)
register_op(v2.Grayscale, COLOUR, draw=D.draw_grayscale,
            accepts=lambda step: step.num_output_channels in (1, 3),
            channels=D.grayscale_channels)
register_op(v2.RandomGrayscale, COLOUR, draw=D.draw_random_grayscale)
register_op(v2.ToDtype, ELEMENTWISE, accepts=lambda step: isinstance(step.dtype, torch.dtype),
            probe=True)
register_op(v2.ConvertImageDtype, ELEMENTWISE)
register_op(v2.Normalize, ELEMENTWISE, features=_normalization, probe=True)
register_op(v2.ClampBoundingBoxes, BOXES, probe=True)
register_op(v2.SanitizeBoundingBoxes, BOXES, probe=True)
register_op(v2.ConvertBoundingBoxFormat, BOXES, probe=True)

# -- torchvision v1: lowered as the v2 op of the same draws (v1's colour arithmetic kept) ----
register_op(v1.RandomResizedCrop, GEOMETRY, equivalent=lambda s: v2.RandomResizedCrop(
    s.size, s.scale, s.ratio, s.interpolation, s.antialias))
register_op(v1.Resize, GEOMETRY, equivalent=lambda s: v2.Resize(
    s.size, s.interpolation, s.max_size, s.antialias))
register_op(v1.CenterCrop, GEOMETRY, equivalent=lambda s: v2.CenterCrop(s.size))
register_op(v1.RandomCrop, GEOMETRY, equivalent=lambda s: v2.RandomCrop(
    s.size, s.padding, s.pad_if_needed, s.fill, s.padding_mode))
register_op(v1.RandomHorizontalFlip, GEOMETRY,
            equivalent=lambda s: v2.RandomHorizontalFlip(s.p))
register_op(v1.RandomVerticalFlip, GEOMETRY, equivalent=lambda s: v2.RandomVerticalFlip(s.p))
register_op(v1.Pad, GEOMETRY, equivalent=lambda s: (  # v1 tensors: a number as fill only
    v2.Pad(s.padding, s.fill, s.padding_mode) if isinstance(s.fill, (int, float)) else None))
register_op(v1.ColorJitter, COLOUR, equivalent=_V1ColorJitter)
register_op(v1.RandomGrayscale, COLOUR, equivalent=lambda s: _V1RandomGrayscale(s.p))
register_op(v1.Grayscale, COLOUR, equivalent=lambda s: _V1Grayscale(s.num_output_channels))
register_op(v1.PILToTensor, TO_IMAGE, plain_tensor=True)
register_op(v1.ConvertImageDtype, ELEMENTWISE)
register_op(v1.Normalize, ELEMENTWISE, features=_normalization)
# v1 ToTensor as it acts on a uint8 HWC array (the decoded image, as a CHW tensor here)
register_op(v1.ToTensor, ELEMENTWISE, equivalent=lambda s: ToTensorOnTensors())
