"""The native path for in-memory images: uint8 CHW tensors -> fused kernel -> samples.

For a dataset pimloader cannot read as encoded files, `PIMDataLoader(dataset, transform=T)`
applies T to each fetched sample's image (its first element, or the sample itself), in the
workers. When T lowers to the fused kernel, `InMemoryImages` takes its place: each sample
whose image is a uint8 CHW tensor (or tv_tensors.Image) with a channel count the plan
supports has its parameters drawn by the plan (torchvision's draws, in sample order) and
is rendered by the kernel; any other sample gets T as Python. Which path a sample takes is
decided from its image before anything is drawn, so the random numbers are consumed exactly
as T would consume them. Once the batch is fetched, consecutive kernel samples run in one
kernel call: straight into the rows of a batch slot when the whole batch fits one (every
image through the kernel, one output shape and dtype), else into per-sample outputs that
take the ordinary slot or collate path.

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

from pimloader.loader._fetch import image_of, with_image
from .classification import ImagePipeline, _dpu_config, _lookup_table, _native_available
from pimloader.loader._slots import SlotBatch, SlotWriter
from pimloader.transforms._params import Geometry, SampleParams
from pimloader.transforms._plan import Plan

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
    as Python then); the kernel samples are rendered afterwards, in runs, either into
    per-sample outputs (`finish`) or straight into the rows of a batch slot (`write_into`)."""

    def __init__(self, images: InMemoryImages) -> None:
        self.images = images
        self.results: list = []
        self.pending: list[_KernelSample] = []  # drawn, not rendered yet
        self.kernel_samples = 0

    def __len__(self) -> int:
        return len(self.results)

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
        self.pending.append(_KernelSample(position, image, pipeline, params.geometry))
        return sample

    def finish(self) -> list:
        """Every sample, with the kernel's output (one tensor each) as its image."""
        for run in self._runs():
            for pending, output in zip(run, _rendered_run(run).unbind(0)):
                sample = self.results[pending.position]
                self.results[pending.position] = with_image(
                    sample, self.images.as_output_kind(output, pending.is_image))
        self._rendered()
        return self.results

    def write_into(self, writer: SlotWriter) -> SlotBatch | None:
        """The batch written into a free slot of `writer` with the kernel rendering every
        image straight into its row of the slot's first field (the image), the rest of each
        sample stacked as the ordinary path stacks it; None, with nothing rendered, when
        the batch does not fit (see `_with_stand_ins`) or no slot is free."""
        samples = self._with_stand_ins()
        if samples is None:
            return None
        batch = writer.write(samples, render_first=self._render_rows)
        if batch is not None:
            self._rendered()
        return batch

    def _with_stand_ins(self) -> list | None:
        """The samples with each image replaced by a stand-in of its output's shape and
        dtype (what the ordinary path would stack), or None unless every image is pending
        and its output a plain tensor (a tv_tensors.Image output keeps the collate path)."""
        if len(self.pending) != len(self.results):
            return None
        stand_ins: dict[tuple, torch.Tensor] = {}
        samples = []
        for pending, sample in zip(self.pending, self.results):
            if self.images.returns_image[pending.is_image]:
                return None
            shape = (pending.pipeline.out_channels, *pending.geometry.size)
            if shape not in stand_ins:
                stand_ins[shape] = torch.empty((), dtype=self.images.plan.output_dtype
                                               ).expand(shape)
            samples.append(with_image(sample, stand_ins[shape]))
        return samples

    def _render_rows(self, rows: torch.Tensor) -> None:
        """Renders the images into `rows` (N, C, H, W), sample i into row i."""
        for run in self._runs():
            first = run[0].position
            _rendered_run(run, out=rows[first:first + len(run)])

    def _runs(self) -> list[list["_KernelSample"]]:
        """The pending samples in kernel calls: consecutive ones of one pipeline, output size
        and interpolation, `CHUNK` at most per call."""
        runs: list[list[_KernelSample]] = []
        for pending in self.pending:
            run = runs[-1] if runs else None
            if run is None or len(run) == self.images.CHUNK or not run[0].runs_with(pending):
                runs.append([])
            runs[-1].append(pending)
        return runs

    def _rendered(self) -> None:
        self.kernel_samples += len(self.pending)
        self.pending = []


@dataclass
class _KernelSample:
    """A sample whose parameters are drawn, waiting for its kernel run."""

    position: int          # in the batch
    image: torch.Tensor
    pipeline: ImagePipeline
    geometry: Geometry

    @property
    def is_image(self) -> bool:
        return type(self.image) is tv_tensors.Image

    def runs_with(self, other: "_KernelSample") -> bool:
        return (other.pipeline is self.pipeline and other.geometry.size == self.geometry.size
                and other.geometry.interpolation == self.geometry.interpolation)


def _rendered_run(run: list[_KernelSample], out: torch.Tensor | None = None) -> torch.Tensor:
    return render(run[0].pipeline, [sample.image for sample in run],
                  [sample.geometry for sample in run], out)


def render(pipeline: ImagePipeline, images: list, geometries: list[Geometry],
           out: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's outputs for CHW uint8 `images` (one call; the same output size), in
    `out` (N, C, H, W) or in a new tensor."""
    regions = [hwc_region(image, geometry) for image, geometry in zip(images, geometries)]
    sources = [source for source, _ in regions]
    moved = [geometry for _, geometry in regions]
    size = moved[0].size
    if out is None:
        out = torch.empty((len(images), pipeline.out_channels, *size),
                          dtype=pipeline.plan.output_dtype)
    pipeline.resample(sources, [g.box for g in moved], size, out, moved, "NCHW")
    return out


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
    from pimloader.transforms import lower
    from pimloader.transforms._lower import _flatten
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
