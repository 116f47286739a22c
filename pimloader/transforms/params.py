"""What a lowered pipeline does to one sample, as data.

`Geometry` describes every pad, crop, resize and flip of a pipeline, and its colour ops, as
one fused step: adjust the decoded image's colours (`source_colour`: colour transforms
before the geometric ones), pad it, take `box` of it, resample it to `resized`, keep
`window` of that, flip, then adjust colours (`colour`: colour transforms after them).
`SampleParams` is one sample's draw: the torchvision (transform, params) pairs, which
replay the pipeline exactly, and their fused Geometry when one exists.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torchvision.transforms.v2 import InterpolationMode

from pimloader._kernels import lib as _kernels_lib


def _replace(geometry: "Geometry", **changes) -> "Geometry":
    """dataclasses.replace for Geometry, without re-running __init__ (it is called for
    every sample's every step, and replace's generic path is a quarter of a draw's time)."""
    unknown = changes.keys() - geometry.__dict__.keys()
    if unknown:
        raise TypeError(f"Geometry has no fields {sorted(unknown)}")
    copy = object.__new__(Geometry)
    copy.__dict__.update(geometry.__dict__, **changes)
    return copy


class NotFusable(Exception):
    """This combination of steps has no single fused Geometry (e.g. two resamplings)."""


Box = tuple[int, int, int, int]  # top, left, height, width
ColourOp = tuple[str, Any]       # ("brightness" | "contrast" | "saturation" | "hue", factor),
                                 # ("grayscale", output channels) or ("permute", channel order)
MAX_COLOUR_OPS = _kernels_lib.PIM_MAX_COLOUR_OPS  # the C kernel's (csrc/include/pim_extra.h)


@dataclass(frozen=True)
class Padding:
    """torchvision's pad of the decoded image: amounts per side, mode and uint8 fill."""

    top: int
    left: int
    bottom: int
    right: int
    mode: str = "constant"                  # constant, edge, reflect or symmetric
    fill: tuple[int, ...] = (0, 0, 0)       # per channel, for "constant"

    def then(self, outer: "Padding") -> "Padding":
        """This padding followed by `outer`, when that is one padding again."""
        same_kind = outer.mode == self.mode and (self.mode == "edge" or (
            self.mode == "constant" and outer.fill == self.fill))
        if not same_kind:
            raise NotFusable(f"{self.mode} padding then {outer.mode} padding")
        return replace(self, top=self.top + outer.top, left=self.left + outer.left,
                       bottom=self.bottom + outer.bottom, right=self.right + outer.right)

    def check(self, height: int, width: int) -> None:
        """torch refuses reflect padding >= the extent and symmetric padding beyond it;
        such a draw is left to torchvision, which raises its own error."""
        limit = {"reflect": 0, "symmetric": 1}.get(self.mode)
        if limit is None:
            return
        if max(self.top, self.bottom) >= height + limit or \
                max(self.left, self.right) >= width + limit:
            raise NotFusable(f"{self.mode} padding larger than the image")

    def as_kernel(self) -> tuple:
        return (self.top, self.left, self.bottom, self.right, self.mode, self.fill)


@dataclass(frozen=True)
class Geometry:
    box: Box
    resized: tuple[int, int]
    window: Box
    hflip: bool = False
    vflip: bool = False
    interpolation: InterpolationMode = InterpolationMode.BILINEAR
    antialias: bool = True
    source: tuple[int, int] | None = None   # the decoded image's size, when known
    padding: Padding | None = None          # of the decoded image; `box` is then in it
    colour: tuple[ColourOp, ...] = ()       # after the flips, in order
    colour_v1: bool = False                 # colour in torchvision v1's arithmetic
    source_colour: tuple[ColourOp, ...] = ()  # on the decoded image, before the padding

    @classmethod
    def identity(cls, height: int, width: int) -> "Geometry":
        return cls((0, 0, height, width), (height, width), (0, 0, height, width),
                   source=(height, width))

    @property
    def padded_source(self) -> tuple[int, int] | None:
        if self.source is None or self.padding is None:
            return self.source
        p = self.padding
        return self.source[0] + p.top + p.bottom, self.source[1] + p.left + p.right

    @property
    def size(self) -> tuple[int, int]:
        return self.window[2], self.window[3]

    @property
    def resamples(self) -> bool:
        return self.resized != self.box[2:]

    @property
    def adjusts_colour(self) -> bool:
        return bool(self.colour or self.source_colour)

    @property
    def reads_whole_source(self) -> bool:
        """Whether the kernel reads the whole decoded image, not only the box: a contrast
        before the geometric steps takes the mean of the whole image."""
        return any(kind == "contrast" for kind, _ in self.source_colour)

    @property
    def _at_source(self) -> bool:
        """Whether the view is still the whole decoded image (flips aside): colour ops here
        act on the source, before any padding, crop or resampling."""
        whole = (0, 0, *self.source) if self.source is not None else None
        return (self.padding is None and not self.colour and self.box == whole
                and self.window == whole and self.resized == self.source)

    def _no_colour_before(self, what: str) -> None:
        if self.colour:
            raise NotFusable(f"{what} after a colour op on a cropped or resampled image")

    def crop(self, top: int, left: int, height: int, width: int) -> "Geometry":
        """Crop the current view (flips included); only boxes inside the view fuse."""
        self._no_colour_before("a crop")
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
            return _replace(self, box=box, resized=(height, width), window=(0, 0, height, width))
        window = (self.window[0] + top, self.window[1] + left, height, width)
        return _replace(self, window=window)

    def resize(self, height: int, width: int, interpolation, antialias: bool) -> "Geometry":
        self._no_colour_before("a resize")
        if self.resamples or self.window[2:] != self.resized:
            raise NotFusable("a second resampling does not fuse with the first")
        return _replace(self, resized=(height, width), window=(0, 0, height, width),
                       interpolation=InterpolationMode(interpolation), antialias=bool(antialias))

    def flip(self, horizontal: bool) -> "Geometry":
        if horizontal:
            return _replace(self, hflip=not self.hflip)
        return _replace(self, vflip=not self.vflip)

    def pad(self, left: int, top: int, right: int, bottom: int, mode: str,
            fill: tuple[int, ...]) -> "Geometry":
        """Pad the current view; fuses while that view is the whole (padded) source."""
        self._no_colour_before("padding")
        if min(left, top, right, bottom) < 0:
            raise NotFusable("negative padding")
        if mode == "constant" and any(kind == "grayscale" for kind, _ in self.source_colour):
            raise NotFusable("a constant fill after a grayscale op (its channels may differ)")
        whole = (0, 0, *self.padded_source) if self.source is not None else None
        if self.resamples or self.box != whole or self.window != whole:
            raise NotFusable("padding after a crop or a resize")
        if self.hflip:
            left, right = right, left
        if self.vflip:
            top, bottom = bottom, top
        padding = Padding(top, left, bottom, right, mode, tuple(fill))
        if self.padding is not None:
            padding = self.padding.then(padding)
        padding.check(*self.source)
        padded = _replace(self, padding=padding)
        height, width = padded.padded_source
        return _replace(padded, box=(0, 0, height, width), resized=(height, width),
                       window=(0, 0, height, width))

    def adjust_colour(self, ops: list[ColourOp], v1: bool) -> "Geometry":
        """Colour ops on the current view: on the decoded image while the view is still
        all of it (padding then stays uncoloured), else on the resampled image."""
        if not ops:
            return self
        if (self.colour or self.source_colour) and self.colour_v1 != v1:
            raise NotFusable("torchvision v1 and v2 colour ops in one pipeline")
        if len(self.source_colour) + len(self.colour) + len(ops) > MAX_COLOUR_OPS:
            raise NotFusable(f"more than {MAX_COLOUR_OPS} colour ops")
        if self._at_source:
            return _replace(self, source_colour=self.source_colour + tuple(ops), colour_v1=v1)
        return _replace(self, colour=self.colour + tuple(ops), colour_v1=v1)

    def output_channels(self, channels: int = 3) -> int:
        for kind, value in self.source_colour + self.colour:
            if kind == "grayscale":
                channels = int(value)
        return channels


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


def apply_geometry(image: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """The fused Geometry executed with torchvision's functional ops (a test reference)."""
    from torchvision.transforms.v2 import functional as F
    image = apply_colour(image, geometry.source_colour, geometry.colour_v1)
    if geometry.padding is not None:
        p = geometry.padding
        fill = list(p.fill[:image.shape[0]]) if p.mode == "constant" else None
        image = F.pad(image, [p.left, p.top, p.right, p.bottom], fill=fill, padding_mode=p.mode)
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
    return apply_colour(image, geometry.colour, geometry.colour_v1)


def apply_colour(image: torch.Tensor, ops, v1: bool = False) -> torch.Tensor:
    """Colour ops executed with torchvision's functional ops (v2's, or v1's tensor ones)."""
    if v1:
        from torchvision.transforms import functional as F
    else:
        from torchvision.transforms.v2 import functional as F
    from torchvision.transforms.v2.functional import permute_channels
    adjust = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
              "saturation": F.adjust_saturation, "hue": F.adjust_hue,
              "grayscale": F.rgb_to_grayscale,
              "permute": lambda image, order: permute_channels(image, list(order))}
    for kind, value in ops:
        image = adjust[kind](image, value)
    return image
