"""What a lowered pipeline does to one sample, as data.

`Geometry` describes every crop, resize and flip of a pipeline as one fused step:
take `box` of the decoded image, resample it to `resized`, keep `window` of that, flip.
`SampleParams` is one sample's draw: the torchvision (transform, params) pairs, which
replay the pipeline exactly, and their fused Geometry when one exists.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torchvision.transforms.v2 import InterpolationMode


class NotFusable(Exception):
    """This combination of steps has no single fused Geometry (e.g. two resamplings)."""


Box = tuple[int, int, int, int]  # top, left, height, width


@dataclass(frozen=True)
class Geometry:
    box: Box
    resized: tuple[int, int]
    window: Box
    hflip: bool = False
    vflip: bool = False
    interpolation: InterpolationMode = InterpolationMode.BILINEAR
    antialias: bool = True

    @classmethod
    def identity(cls, height: int, width: int) -> "Geometry":
        return cls((0, 0, height, width), (height, width), (0, 0, height, width))

    @property
    def size(self) -> tuple[int, int]:
        return self.window[2], self.window[3]

    @property
    def resamples(self) -> bool:
        return self.resized != self.box[2:]

    def crop(self, top: int, left: int, height: int, width: int) -> "Geometry":
        """Crop the current view (flips included); only boxes inside the view fuse."""
        view_height, view_width = self.size
        if (top < 0 or left < 0 or height <= 0 or width <= 0
                or top + height > view_height or left + width > view_width):
            raise NotFusable("crop box outside the image needs padding")
        if self.hflip:
            left = view_width - left - width
        if self.vflip:
            top = view_height - top - height
        if not self.resamples:
            box = (self.box[0] + top, self.box[1] + left, height, width)
            return replace(self, box=box, resized=(height, width), window=(0, 0, height, width))
        window = (self.window[0] + top, self.window[1] + left, height, width)
        return replace(self, window=window)

    def resize(self, height: int, width: int, interpolation, antialias: bool) -> "Geometry":
        if self.resamples or self.window[2:] != self.resized:
            raise NotFusable("a second resampling does not fuse with the first")
        return replace(self, resized=(height, width), window=(0, 0, height, width),
                       interpolation=InterpolationMode(interpolation), antialias=bool(antialias))

    def flip(self, horizontal: bool) -> "Geometry":
        if horizontal:
            return replace(self, hflip=not self.hflip)
        return replace(self, vflip=not self.vflip)


@dataclass
class SampleParams:
    """One sample's draw. `steps` replays it with torchvision; `geometry` fuses it."""

    steps: list[tuple[Any, dict | None]]   # (v2 transform, params), None = not applied
    geometry: Geometry | None

    def replay(self, image: torch.Tensor) -> torch.Tensor:
        """torchvision's own result for this draw (the reference the kernels must match)."""
        for transform, params in self.steps:
            if params is not None:
                image = transform.transform(image, params)
        return image


@dataclass
class Plan:
    """A pipeline lowered for the native path.

    geometric: the leading crop/resize/flip transforms (as v2 objects), drawn per sample;
    elementwise: the following per-pixel transforms, folded into a lookup table per channel;
    tail: what could not be lowered, run as Python on the kernel's output.
    """

    geometric: list
    elementwise: list
    tail: list
    output_dtype: torch.dtype
    output_size: tuple[int, int] | None   # fixed (h, w) when every draw gives the same size

    def draw(self, height: int, width: int) -> SampleParams:
        from ._lower import draw_geometric
        return draw_geometric(self.geometric, height, width)

    def lookup_table(self, channels: int = 3) -> torch.Tensor:
        """table[c, v]: the elementwise transforms' output for input value v in channel c."""
        ramp = torch.arange(256, dtype=torch.uint8).expand(channels, 1, 256).contiguous()
        for transform in self.elementwise:
            ramp = transform(ramp)
        return ramp[:, 0, :].contiguous()


def apply_geometry(image: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """The fused Geometry executed with torchvision's functional ops (a test reference)."""
    from torchvision.transforms.v2 import functional as F
    top, left, height, width = geometry.box
    if geometry.resamples:
        image = F.resized_crop(image, top, left, height, width, list(geometry.resized),
                               interpolation=geometry.interpolation,
                               antialias=geometry.antialias)
    else:
        image = F.crop(image, top, left, height, width)
    image = F.crop(image, *geometry.window)
    if geometry.hflip:
        image = F.horizontal_flip(image)
    if geometry.vflip:
        image = F.vertical_flip(image)
    return image
