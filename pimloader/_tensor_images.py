"""The native path for in-memory images: uint8 CHW tensors -> fused kernel -> samples.

For a dataset pimloader cannot read as encoded files, `PIMDataLoader(dataset, transform=T)`
applies T to each fetched sample's image (its first element, or the sample itself), in the
workers. When T lowers to the fused kernel, `InMemoryImages` takes its place: each sample
whose image is a uint8 CHW tensor (or tv_tensors.Image) with a channel count the plan
supports has its parameters drawn by the plan (torchvision's draws, in sample order) and
is rendered by the kernel; any other sample gets T as Python. Which path a sample takes is
decided from its image before anything is drawn, so the random numbers are consumed exactly
as T would consume them. Consecutive kernel samples of a batch run in one kernel call.

The kernel reads HWC interleaved sources with a row stride: only the region a sample's
geometry reads (its crop box, clipped to the image where it pads) is copied to HWC, and not
even that for a channels_last tensor, whose HWC view already is interleaved.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torchvision.transforms.v2 as v2
from torchvision import tv_tensors

from ._fetch import image_of, with_image
from ._images import ImagePipeline, _dpu_config, _lookup_table, _native_available
from .transforms._plan import Geometry, Plan, SampleParams

# Steps that refuse tensors (they take PIL images or arrays): such a pipeline stays Python.
_TENSOR_REFUSING = ("torchvision.transforms.transforms.ToTensor",
                    "torchvision.transforms.transforms.PILToTensor")
_GRAYSCALE_STEPS = (v2.Grayscale, v2.RandomGrayscale)


@dataclass
class InMemoryImages:
    """The loader's `transform` for in-memory images (picklable: it travels to workers).

    Calling it is the Python transform; `begin_batch` starts the native path."""

    transform: Any                           # the user's pipeline, for ineligible samples
    plan: Plan
    pipelines: dict[int, ImagePipeline]      # by input channel count
    returns_image: tuple[bool, bool]         # output is a tv_tensors.Image, by input kind
    takes_image_inputs: bool                 # tv_tensors.Image inputs may run natively

    CHUNK = 32  # samples per kernel call at most, as the encoded path's batches

    def __call__(self, image):
        return self.transform(image)

    # -- which samples run natively -------------------------------------------------------

    def pipeline_for(self, image) -> ImagePipeline | None:
        """The pipeline that renders `image` natively, or None for the Python transform."""
        if type(image) is tv_tensors.Image:
            if not self.takes_image_inputs:
                return None
        elif type(image) is not torch.Tensor:
            return None
        if (image.dtype != torch.uint8 or image.ndim != 3 or image.device.type != "cpu"
                or image.shape[1] == 0 or image.shape[2] == 0):
            return None
        return self.pipelines.get(image.shape[0])

    # -- a batch of samples ---------------------------------------------------------------

    def begin_batch(self) -> "_BatchOfSamples":
        return _BatchOfSamples(self)

    def one(self, image: torch.Tensor, pipeline: ImagePipeline,
            params: SampleParams) -> torch.Tensor:
        """One sample's image through the plan (kernel, or torchvision's ops), then tail."""
        if params.geometry is None:
            output = pipeline.replayed_image(image, params)
        else:
            output = render(pipeline, [image], [params.geometry])[0]
        output = self.as_output_kind(output, type(image) is tv_tensors.Image)
        for step in self.plan.tail:
            output = step(output)
        return output

    def as_output_kind(self, output: torch.Tensor, image_input: bool) -> torch.Tensor:
        """The tensor type T would return (v2 keeps tv_tensors.Image; ToImage makes one)."""
        if self.returns_image[image_input]:
            return tv_tensors.Image(output)
        return output.as_subclass(torch.Tensor) if type(output) is not torch.Tensor else output


class _BatchOfSamples:
    """One batch on the native path: `add` each sample as soon as it is fetched (its
    parameters are drawn then, or, for a sample the kernel does not take, it is transformed
    as Python then), `finish` renders the kernel samples and returns every sample."""

    def __init__(self, images: InMemoryImages) -> None:
        self.images = images
        self.results: list = []
        self.run = _Run(images, self.results)
        self.kernel_samples = 0

    def add(self, sample):
        position = len(self.results)
        self.results.append(sample)
        images, image = self.images, image_of(sample)
        pipeline = images.pipeline_for(image)
        if pipeline is None:
            self.results[position] = with_image(sample, images.transform(image))
            return sample
        params = images.plan.draw(image.shape[1], image.shape[2])
        if images.plan.tail or params.geometry is None:
            # alone: the tail's own draws come before the next sample's
            self.results[position] = with_image(sample, images.one(image, pipeline, params))
            self.kernel_samples += params.geometry is not None
            return sample
        if not self.run.accepts(pipeline, params.geometry):
            self.run.flush()
        self.run.add(position, image, pipeline, params.geometry)
        return sample

    def finish(self) -> list:
        self.run.flush()
        self.kernel_samples += self.run.kernel_samples
        return self.results


class _Run:
    """Consecutive kernel samples of one pipeline, output size and interpolation, whose
    outputs replace their samples' images in `results` when the run is flushed."""

    def __init__(self, images: InMemoryImages, results: list) -> None:
        self.images = images
        self.results = results
        self.positions: list[int] = []
        self.sources: list[torch.Tensor] = []
        self.geometries: list[Geometry] = []
        self.pipeline: ImagePipeline | None = None
        self.kernel_samples = 0

    def accepts(self, pipeline: ImagePipeline, geometry: Geometry) -> bool:
        if not self.positions:
            return True
        first = self.geometries[0]
        return (pipeline is self.pipeline and geometry.size == first.size
                and geometry.interpolation == first.interpolation)

    def add(self, position: int, image: torch.Tensor, pipeline: ImagePipeline,
            geometry: Geometry) -> None:
        self.pipeline = pipeline
        self.positions.append(position)
        self.sources.append(image)
        self.geometries.append(geometry)
        if len(self.positions) == self.images.CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.positions:
            return
        outputs = render(self.pipeline, self.sources, self.geometries)
        for position, output in zip(self.positions, outputs):
            sample = self.results[position]
            image_input = type(image_of(sample)) is tv_tensors.Image
            self.results[position] = with_image(
                sample, self.images.as_output_kind(output, image_input))
        self.kernel_samples += len(self.positions)
        self.positions, self.sources, self.geometries = [], [], []


def render(pipeline: ImagePipeline, images: list, geometries: list[Geometry]) -> list:
    """The kernel's outputs for CHW uint8 `images` (one call; the same output size)."""
    regions = [hwc_region(image, geometry) for image, geometry in zip(images, geometries)]
    sources = [source for source, _ in regions]
    moved = [geometry for _, geometry in regions]
    size = moved[0].size
    out = torch.empty((len(images), pipeline.out_channels, *size),
                      dtype=pipeline.plan.output_dtype)
    pipeline.resample(sources, [g.box for g in moved], size, out, moved, "NCHW")
    return list(out.unbind(0))


def hwc_region(image: torch.Tensor, geometry: Geometry) -> tuple[np.ndarray, Geometry]:
    """The HWC pixels of `image` that `geometry` reads, and the geometry moved onto them.

    Without padding that is the crop box; with constant or edge padding, the box clipped to
    the image (at least one pixel), with the padding recomputed around it; reflect and
    symmetric padding read pixels beyond the box, and get the whole image."""
    padding = geometry.padding
    _, height, width = image.shape
    if padding is None:
        top, left, box_h, box_w = geometry.box
        rows, cols = (top, top + box_h), (left, left + box_w)
        moved = dataclasses.replace(geometry, box=(0, 0, box_h, box_w))
    elif padding.mode in ("constant", "edge"):
        top, left, box_h, box_w = geometry.box
        rows, pad_top, pad_bottom = _clipped_axis(top, box_h, padding.top, height)
        cols, pad_left, pad_right = _clipped_axis(left, box_w, padding.left, width)
        moved_padding = dataclasses.replace(padding, top=pad_top, bottom=pad_bottom,
                                            left=pad_left, right=pad_right)
        moved_box = (top - (padding.top + rows[0]) + pad_top,
                     left - (padding.left + cols[0]) + pad_left, box_h, box_w)
        moved = dataclasses.replace(geometry, box=moved_box, padding=moved_padding)
    else:
        rows, cols, moved = (0, height), (0, width), geometry
    hwc = image[:, rows[0]:rows[1], cols[0]:cols[1]].permute(1, 2, 0)
    if hwc.stride(2) != 1 or hwc.stride(1) != hwc.shape[2]:
        hwc = hwc.contiguous()
    return hwc.as_subclass(torch.Tensor).numpy(), moved


def _clipped_axis(start: int, length: int, pad_before: int, extent: int):
    """(image rows [first, stop), padding before, padding after) covering the box rows
    [start, start + length) of the padded axis, with at least one image row."""
    first = min(max(start - pad_before, 0), extent - 1)
    stop = min(max(start + length - pad_before, first + 1), extent)
    before = max(0, pad_before + first - start)
    after = max(0, start + length - (pad_before + stop))
    return (first, stop), before, after


# -- building it ----------------------------------------------------------------------------

def build_in_memory_images(transform, *, backend: str, nr_dpus: int = 64,
                           nr_tasklets: int = 16, dpu_profile: str = "") -> InMemoryImages | None:
    """The native path for in-memory images under `transform`, or None (Python only)."""
    from .transforms import lower
    from .transforms._lower import _flatten
    steps = _flatten(transform)
    if any(_qualified_name(step) in _TENSOR_REFUSING for step in steps):
        return None
    plan = lower(transform, warn=False)
    if not (plan.geometric or plan.colour or plan.elementwise):
        return None
    if not _native_available(backend):
        return None
    dpus = _dpu_config(backend, nr_dpus, nr_tasklets, dpu_profile)
    pipelines = {channels: ImagePipeline(None, plan, lut, False, False, dpus=dpus,
                                         channels=channels)
                 for channels, lut in _tables_by_channels(plan).items()}
    if not pipelines:
        return None
    if plan.tail:
        lower(transform)  # warns, naming the steps that stay Python
    lowered = steps[:len(steps) - len(plan.tail)]
    return InMemoryImages(transform, plan, pipelines,
                          (_returns_image(lowered, False), _returns_image(lowered, True)),
                          all(isinstance(step, v2.Transform) for step in lowered))


def _qualified_name(step) -> str:
    kind = type(step)
    return f"{kind.__module__}.{kind.__qualname__}"


def _tables_by_channels(plan: Plan) -> dict[int, np.ndarray | None]:
    """The elementwise table for each input channel count the plan handles (1 and 3; one
    channel only without grayscale steps, whose one-channel semantics the kernel lacks)."""
    tables = {}
    for channels in (3, 1):
        if channels == 1 and any(isinstance(step, _GRAYSCALE_STEPS) for step in plan.colour):
            continue
        try:
            table = _lookup_table(plan, channels)
        except (RuntimeError, ValueError, TypeError):
            continue  # e.g. a three-channel Normalize: torchvision's error, from Python
        if plan.elementwise and (table is None or
                                 table.shape[0] != plan.output_channels(channels)):
            continue
        tables[channels] = table if plan.elementwise else None
    return tables


def _returns_image(steps: list, image_input: bool) -> bool:
    """Whether the lowered steps return a tv_tensors.Image for this kind of input."""
    returns_image = image_input
    for step in steps:
        if isinstance(step, v2.ToImage):
            returns_image = True
        elif isinstance(step, v2.ToPureTensor):
            returns_image = False
        elif not isinstance(step, v2.Transform):
            returns_image = False  # torchvision v1 ops return plain tensors
    return returns_image
