"""`Plan`: a pipeline lowered for the native path, and how it draws each sample."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._batched_draws import draw_many as draw_batch
from ._draw import colour_output_channels, draw_sample
from .params import SampleParams


@dataclass
class Plan:
    """A pipeline lowered for the native path.

    geometric: the pad/crop/resize/flip transforms (as v2 objects), drawn per sample;
    colour: the colour transforms (ColorJitter, RandomPhotometricDistort, Grayscale,
        RandomGrayscale), drawn per sample;
    elementwise: the following per-pixel transforms, folded into a lookup table per channel;
    tail: what could not be lowered, run as Python on the kernel's output;
    steps: the geometric and colour transforms in pipeline order (None: the geometric ones,
        then the colour ones).
    """

    geometric: list
    elementwise: list
    tail: list
    output_dtype: torch.dtype
    output_size: tuple[int, int] | None   # fixed (h, w) when every draw gives the same size
    colour: list = field(default_factory=list)
    steps: list | None = None

    @property
    def native_steps(self) -> list:
        """The geometric and colour transforms, in the order they are drawn and applied."""
        return self.steps if self.steps is not None else self.geometric + self.colour

    def draw(self, height: int, width: int, channels: int = 3) -> SampleParams:
        """One sample's draw for an image of `height` x `width` with `channels` channels."""
        return draw_sample(self, height, width, channels)

    def draw_many(self, sizes: list, channels: int = 3) -> list:
        """`draw` for each (height, width) of `sizes`, in order: the same draws, and torch's
        generator left where they leave it, made at once where the steps allow it."""
        if not sizes:
            return []
        drawn = draw_batch(self, sizes, channels)
        return drawn if drawn is not None else [draw_sample(self, height, width, channels)
                                                for height, width in sizes]

    def output_channels(self, channels: int = 3) -> int:
        """Channels of the output for an input of `channels` (Grayscale changes them)."""
        return colour_output_channels(self.colour, channels)

    def lookup_table(self, channels: int = 3) -> torch.Tensor:
        """table[c, v]: the elementwise transforms' output for input value v in channel c."""
        ramp = torch.arange(256, dtype=torch.uint8).expand(channels, 1, 256).contiguous()
        for transform in self.elementwise:
            ramp = transform(ramp)
        return ramp[:, 0, :].contiguous()
