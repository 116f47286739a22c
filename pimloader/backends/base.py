"""The one interface every backend of the fused kernel implements.

A backend says which samples it can run (`unsupported`) and runs a `KernelRun`: `submit`
returns a handle at once and the handle's `wait()` returns once the run's rows are written.
The CPU backend computes inside `submit` (its handle is complete); a DPU backend queues the
transfers and the launch and lets the host go on decoding. Pipelines never ask which
backend they have: they hand runs to a `Backends` router (backends/select.py), which sends
each sample to the first backend of its chain that supports it.

A second kind of run, for audio: a `FeatureRun` (clips of one shape -> log-mel / MFCC
features, backends/audio_spec.py's `FeatureSpec`). A backend that computes features says
which clips it cannot take (`unsupported_features`) and runs them (`submit_features`); the
default is a backend that computes none, so the router sends every clip past it.

A backend may also decode images itself (`decodes_images`; the DPU backends with
decode_on_dpu): `decode_refusal(image)` says whether it decodes this `EncodedImage`, and if
not why; a run's sources may then be encoded images, which the backend decodes where it
transforms them. Everything it refuses the host decodes, as for every other backend.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class EncodedImage:
    """A source a backend decodes itself: the pixels of `box` (top, left, height, width) of
    the encoded image `data`, with `channels` channels. In a `KernelRun` its box is the
    decoded box's own, (0, 0, height, width). `prepared` is what the backend's
    `decode_refusal` made of it (its parsed structure), for its `submit` to reuse."""

    data: Any
    name: str
    box: tuple
    channels: int = 3
    prepared: Any = None

    @property
    def shape(self) -> tuple:
        """The decoded source's shape (height, width, channels): the box's."""
        return (self.box[2], self.box[3], self.channels)


@dataclass
class KernelRun:
    """One kernel call: consecutive rows of `out`, each a decoded source resampled through
    its geometry (box -> resized -> window -> flips -> padding, colour), then converted
    through the lookup table `lut`. Every geometry has the output size `size` and one
    interpolation."""

    sources: list                  # uint8 HWC arrays, or EncodedImage for a backend that decodes
    boxes: list                    # (top, left, height, width) within each source
    size: tuple                    # (out_height, out_width)
    out: torch.Tensor              # the run's rows: (N, C, H, W), or (N, H, W, C) for NHWC;
                                   # strided only for a backend that `writes_strided_out`
    geometries: list               # transforms._params.Geometry, one per row
    layout: str = "NCHW"
    lut: np.ndarray | None = None

    @property
    def encoded(self) -> bool:
        """Whether some source is still encoded (the backend decodes it)."""
        return any(isinstance(source, EncodedImage) for source in self.sources)

    def kernel_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `backends.kernels.resized_crop_batch` after `sources,
        boxes, size, out` (and of the DPU driver's `submit`, which takes no padding or
        colour: a backend that runs neither never receives them)."""
        geometries = self.geometries
        arguments = dict(hflip=[g.hflip for g in geometries], vflip=[g.vflip for g in geometries],
                         interpolation=geometries[0].interpolation.value, layout=self.layout,
                         lut=self.lut, windows=[(*g.resized, *g.window[:2]) for g in geometries])
        if any(g.padding is not None or g.adjusts_colour for g in geometries):
            arguments.update(
                paddings=[g.padding and g.padding.as_kernel() for g in geometries],
                colours=[g.colour for g in geometries],
                source_colours=[g.source_colour for g in geometries],
                colour_v1=any(g.adjusts_colour and g.colour_v1 for g in geometries))
        return arguments


@dataclass
class FeatureRun:
    """One feature-kernel call: equal-shape clips through a `FeatureSpec` (frames, window,
    FFT, power, mel, dB / log, DCT, the masks drawn on the host, normalisation), as
    `backends.audio_features.cpu_features` takes them. `clips` names each clip for errors
    ("sample 17 (go/a.wav)"). The handle's `wait()` returns the features, float32
    [N, C, rows, frames]."""

    waveforms: np.ndarray                 # float32 [N, C, L]
    spec: Any                             # backends.audio_spec.FeatureSpec
    freq_masks: np.ndarray | None         # int32 [N, C, K, 2] [start, end) rows; None: no mask
    time_masks: np.ndarray | None         # int32 [N, C, K, 2] [start, end) frames
    clips: list                           # each clip's name, in order


class Handle(ABC):
    """A submitted run: `wait()` returns once its rows are written (and raises its error)."""

    @abstractmethod
    def wait(self): ...


class Done(Handle):
    """The handle of a run that completed inside `submit`."""

    def __init__(self, out) -> None:
        self.out = out

    def wait(self):
        return self.out


class Backend(ABC):
    """Where the fused kernel runs. Opened by `BackendSpec.open()`, closed by `close()`."""

    name: str = ""
    kernel: str = "the kernel"   # what it runs, as messages name it

    @abstractmethod
    def unsupported(self, geometry) -> str:
        """What of this sample's geometry the backend cannot do ("" when it runs it)."""

    #: whether the backend writes a run's rows into a strided `run.out` (a view whose rows
    #: are runs of adjacent elements, e.g. the corners of a padded batch); a backend that
    #: does not is handed a contiguous staging tensor, which the pipeline copies from
    writes_strided_out: bool = False

    #: whether the backend decodes some images itself (then `decode_refusal` says which)
    decodes_images: bool = False

    def decode_refusal(self, image: EncodedImage) -> str:
        """"" when the backend decodes `image` itself, else why not (a short reason, which
        loader.stats() counts): the host then decodes it. Asked only of a backend that
        `decodes_images`; a corrupt image may raise DecodeError naming it."""
        return "the backend decodes no image"

    @abstractmethod
    def submit(self, run: KernelRun) -> Handle:
        """Start the run; argument errors are raised here, errors of the work by `wait()`.
        The sources may be reused once this returns; `run.out` only after `wait()`."""

    def run_rows(self, batch_rows: int) -> int:
        """How many rows a run should have in a batch of `batch_rows`."""
        return 32

    def unsupported_features(self, spec, clip_shape: tuple) -> str:
        """What of a `FeatureRun` of `spec` over clips of `clip_shape` ([channels, samples])
        the backend cannot do ("" when it runs them); by default it computes no features."""
        return "compute audio features"

    def submit_features(self, run: FeatureRun) -> Handle:
        """Start a feature run; `wait()` returns its features (errors as for `submit`)."""
        raise NotImplementedError(f"{self.kernel} computes no audio features")

    def close(self) -> None:
        """Free what the backend holds (DPU sets); runs in flight are dropped."""
