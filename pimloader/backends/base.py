"""The one interface every backend implements, and the runs and kernels it takes.

A backend runs kinds of work through one generic pair: `unsupported(kind, item)` says what
of one row it cannot do ("" when it runs it) and `submit(run)` starts a run of the run's
`kind`, returning a handle at once whose `wait()` returns once the work is done. What a kind
means on a backend is the `Kernel` registered for (kind, backend class) in registry.py, so a
new kind of work adds no method to any backend. Two kinds are built in:

- "images": a `KernelRun` (decoded sources through their geometries into rows of an output)
  on an `ImageKernel`; its item is a geometry. The CPU kernel computes inside `submit`; a
  DPU kernel queues the transfers and the launch and lets the host go on decoding. An image
  kernel may also decode images itself (`decodes_images`; the DPU kernel with
  decode_on_dpu): `decode_refusal(image)` says whether it decodes this `EncodedImage`, and if
  not why; a run's sources may then be encoded images, which it decodes where it transforms
  them. Everything it refuses the host decodes.
- "features": a `FeatureRun` (clips of one shape -> log-mel / MFCC features, a
  `FeatureSpec`); its item is `(spec, clip_shape)`.

Pipelines never ask which backend they have: they hand runs to a router
(backends/select.py), which sends each row to the first backend of its chain whose kernel
for the kind runs it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from pimloader.errors import close_all

from .registry import RunKind, kernel_factory, register_kind, run_kind


@dataclass
class EncodedImage:
    """A source a backend decodes itself: the pixels of `box` (top, left, height, width) of
    the encoded image `data`, with `channels` channels. In a `KernelRun` its box is the
    decoded box's own, (0, 0, height, width). `prepared` is what the backend's
    `decode_refusal` made of it (its parsed structure), for its `submit` to reuse;
    `host_reason` why its `submit` had it decoded on the host after all ("" it did not),
    for the loader to count."""

    data: Any
    name: str
    box: tuple
    channels: int = 3
    prepared: Any = None
    host_reason: str = ""

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
    geometries: list               # transforms.params.Geometry, one per row
    layout: str = "NCHW"
    lut: np.ndarray | None = None

    kind: ClassVar[str] = "images"

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
    spec: Any                             # transforms.audio_spec.FeatureSpec
    freq_masks: np.ndarray | None         # int32 [N, C, K, 2] [start, end) rows; None: no mask
    time_masks: np.ndarray | None         # int32 [N, C, K, 2] [start, end) frames
    clips: list                           # each clip's name, in order

    kind: ClassVar[str] = "features"


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


class Kernel(ABC):
    """One kind of run on one backend (registered per kind and backend class, registry.py).

    `unsupported(item)` says what of one row's description it cannot do ("" when it runs
    it; the item is the kind's: a geometry for "images", `(spec, clip_shape)` for
    "features"); `submit(run)` starts a run of that kind and returns its handle at once.
    Argument errors are raised by submit, errors of the work by the handle's `wait()`."""

    def __init__(self, backend: "Backend") -> None:
        self.backend = backend

    @property
    def name(self) -> str:
        """What it is called in messages: its backend's kernel."""
        return self.backend.kernel

    def unsupported(self, item) -> str:
        return ""

    @abstractmethod
    def submit(self, run) -> Handle: ...

    def run_rows(self, batch_rows: int) -> int:
        """How many rows a run should have in a batch of `batch_rows`."""
        return 32

    def close(self) -> None:
        """Free what this kernel holds (its DPU set); its backend calls it on close."""


class ImageKernel(Kernel):
    """The fused image kernel on one backend: `KernelRun`s, items are geometries."""

    #: whether it writes a run's rows into a strided `run.out` (a view whose rows are runs of
    #: adjacent elements, e.g. the corners of a padded batch); a kernel that does not is
    #: handed a contiguous staging tensor, which the pipeline copies from
    writes_strided_out: bool = False

    #: whether it decodes some images itself (then `decode_refusal` says which)
    decodes_images: bool = False

    def decode_refusal(self, image: EncodedImage) -> str:
        """"" when the kernel decodes `image` itself, else why not (a short reason, which
        loader.stats() counts): the host then decodes it. Asked only of a kernel that
        `decodes_images`; a corrupt image may raise DecodeError naming it."""
        return "the backend decodes no image"


class Backend(ABC):
    """Where kernels run. Opened by `BackendSpec.open()`, closed by `close()`.

    A backend has no method per kind of work: `unsupported(kind, item)` and `submit(run)`
    go to the kernel registered for the run's kind on the backend's class (registry.py),
    made on first use and closed with the backend."""

    name: str = ""
    kernel: str = "the kernel"   # what it runs, as messages name it

    def kernel_for(self, kind: str) -> Kernel | None:
        """This backend's kernel for `kind` runs (made on first use), or None."""
        kernels = self.__dict__.setdefault("_kernels", {})
        if kind not in kernels:
            factory = kernel_factory(kind, type(self))
            kernels[kind] = None if factory is None else factory(self)
        return kernels[kind]

    def unsupported(self, kind: str, item) -> str:
        """What of `item` (a row of a `kind` run) this backend cannot do ("" when it runs
        it); a backend without a kernel for the kind does not do the kind's work."""
        kernel = self.kernel_for(kind)
        return run_kind(kind).refusal if kernel is None else kernel.unsupported(item)

    def submit(self, run) -> Handle:
        """Start `run` on the kernel of its kind; `wait()` on the handle returns its output.
        The sources may be reused once this returns; the output only after `wait()`."""
        kernel = self.kernel_for(run.kind)
        if kernel is None:
            raise NotImplementedError(f"{self.kernel} does not {run_kind(run.kind).refusal}")
        return kernel.submit(run)

    def close(self) -> None:
        """Free what the backend holds (its kernels' DPU sets); runs in flight are dropped.
        The first error is raised once every kernel is closed."""
        kernels, self.__dict__["_kernels"] = self.__dict__.get("_kernels", {}), {}
        close_all(kernel for kernel in kernels.values() if kernel is not None)


IMAGES = register_kind(RunKind("images", items="samples", work="run this sample")).name
FEATURES = register_kind(RunKind("features", items="clips",
                                 work="compute audio features")).name
