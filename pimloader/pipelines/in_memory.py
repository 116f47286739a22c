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
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors

from pimloader.backends.select import Backends, native_available, resolve
from pimloader.loader.fetch import Fetcher, TransformingFetcher, image_of, with_image
from pimloader.loader.produce import BatchProducer, Pipeline, Produced
from pimloader.loader.slots import SlotBatch, SlotWriter
from pimloader.transforms.params import Geometry, SampleParams
from pimloader.transforms.registry import op_of
from pimloader.transforms.plan import Plan

from .images import ImagePipeline, lookup_table
from .runs import RunBatcher

_TENSOR_REFUSING = ("torchvision.transforms.transforms.ToTensor",
                    "torchvision.transforms.transforms.PILToTensor")


@dataclass
class InMemoryImages(Pipeline):
    """The loader's `transform` for in-memory images (picklable: it travels to workers).

    Calling it is the Python transform; `make_producer` starts the native path."""

    transform: Any                           # the user's pipeline, for ineligible samples
    plan: Plan
    pipelines: dict[int, ImagePipeline]      # by input channel count
    returns_image: tuple[bool, bool]         # output is a tv_tensors.Image, by input kind
    takes_image_inputs: bool                 # tv_tensors.Image inputs may run natively

    def __call__(self, image):
        return self.transform(image)

    @property
    def backend(self):
        """The BackendSpec its kernel runs on (every channel count's pipeline has it)."""
        return next(iter(self.pipelines.values())).backend

    def kernel_backend(self) -> tuple[str, bool]:
        return self.backend.kind, self.backend.decode

    def make_producer(self, context):
        router = context.resources.get(Backends).router(self.backend)
        fetcher = KernelTransformingFetcher(context.plain_fetcher(), self, router)
        return InMemoryImageProducer(fetcher, context.collate_fn, context.auto_collation,
                                     context.writer)

    # -- which samples run natively -------------------------------------------------------

    def pipeline_for(self, image) -> ImagePipeline | None:
        """The pipeline that renders `image` natively, or None for the Python transform."""
        if type(image) is tv_tensors.Image:
            if not self.takes_image_inputs:
                return None
        elif type(image) is not torch.Tensor:
            return None
        if image.layout is not torch.strided or image.is_nested:
            return None  # sparse or nested: no pixels to read; torchvision's own handling
        if (image.dtype != torch.uint8 or image.ndim != 3 or image.device.type != "cpu"
                or image.shape[1] == 0 or image.shape[2] == 0):
            return None
        return self.pipelines.get(image.shape[0])

    def one(self, image: torch.Tensor, pipeline: ImagePipeline, params: SampleParams,
            router) -> torch.Tensor:
        """One sample's image through the plan (kernel, or torchvision's ops), then tail."""
        if params.geometry is None:
            output = pipeline.replayed_image(image, params)
        else:
            output = _KernelSample(0, image, pipeline, params.geometry).rendered(router)
        output = self.as_output_kind(output, type(image) is tv_tensors.Image)
        for step in self.plan.tail:
            output = step(output)
        return output

    def as_output_kind(self, output: torch.Tensor, image_input: bool) -> torch.Tensor:
        """The tensor type T would return (v2 keeps tv_tensors.Image; ToImage makes one)."""
        if self.returns_image[image_input]:
            return tv_tensors.Image(output)
        return output.as_subclass(torch.Tensor) if type(output) is not torch.Tensor else output


class KernelTransformingFetcher(TransformingFetcher):
    """Applies an `InMemoryImages` to each fetched sample's image, as a dataset transform
    would: each eligible sample's parameters are drawn right after the dataset returns it,
    before the next one is fetched (the others are transformed as Python at once), and the
    batch's eligible images are rendered in kernel runs once the batch is fetched."""

    def __init__(self, fetcher: Fetcher, images: InMemoryImages, router) -> None:
        super().__init__(fetcher, images)
        self.images = images
        self.router = router

    def fetch(self, index, each=None):
        samples = self.finished(self.drawn(index))
        return samples if self.auto_collation else samples[0]

    def drawn(self, index) -> "_BatchOfSamples":
        """The batch at `index`, each sample's parameters drawn (or its Python transform
        run) as it was fetched; its kernel samples are not rendered."""
        self._stage = ""
        batch = _BatchOfSamples(self.images, self.router)
        self.fetcher.fetch(index, lambda sample: self._in_stage(batch.add, sample))
        return batch

    def finished(self, batch: "_BatchOfSamples") -> list:
        """The drawn batch's samples, the kernel's outputs in place of their images."""
        return self._rendering(batch, batch.finish)

    def written(self, batch: "_BatchOfSamples", writer):
        """The drawn batch rendered straight into a slot of `writer` (a SlotBatch), or
        None, with nothing rendered, when it does not fit one."""
        return self._rendering(batch, lambda: batch.write_into(writer))

    def _rendering(self, batch, render):
        self._stage = " (the batch's kernel run)"
        result = render()
        self._stage = ""
        if result is not None:
            self.kernel_samples += batch.kernel_samples
        return result


class InMemoryImageProducer(BatchProducer):
    """A BatchProducer over a KernelTransformingFetcher: a batch whose images all take the
    kernel with one output shape and dtype is rendered straight into the rows of a batch
    slot, without per-sample outputs; any other batch (or no free slot) takes
    BatchProducer's path, unchanged."""

    def produce(self, index) -> Produced:
        if self.writer is None:
            return super().produce(index)
        start = time.perf_counter()
        batch = self.fetcher.drawn(index)
        fetched = time.perf_counter()
        data = self.fetcher.written(batch, self.writer)
        direct_samples = len(batch) if data is not None else 0
        if data is None:
            data = self.written_or_collated(index, self.fetcher.finished(batch))
        return self.produced(data, len(batch), fetched - start,
                             time.perf_counter() - fetched, direct_samples)


class _BatchOfSamples:
    """One batch on the native path: `add` each sample as soon as it is fetched (its
    parameters are drawn then, or, for a sample the kernel does not take, it is transformed
    as Python then); the kernel samples are rendered afterwards, in runs, either into
    per-sample outputs (`finish`) or straight into the rows of a batch slot (`write_into`)."""

    def __init__(self, images: InMemoryImages, router) -> None:
        self.images = images
        self.router = router
        self.results: list = []
        self.pending: list[_KernelSample] = []  # drawn, not rendered yet
        self.kernel_samples = 0

    def __len__(self) -> int:
        return len(self.results)

    def add(self, sample):
        """Takes `sample` into the batch, or nothing of it when this raises (a sample that
        on_error="skip" then drops leaves no trace)."""
        position = len(self.results)
        images, image = self.images, image_of(sample)
        pipeline = images.pipeline_for(image)
        if pipeline is None:
            self.results.append(with_image(sample, images.transform(image)))
            return sample
        params = images.plan.draw(image.shape[1], image.shape[2], image.shape[0])
        if images.plan.tail or params.geometry is None:
            # alone: the tail's own draws come before the next sample's
            output = images.one(image, pipeline, params, self.router)
            self.results.append(with_image(sample, output))
            self.kernel_samples += params.geometry is not None
            return sample
        self.results.append(sample)
        self.pending.append(_KernelSample(position, image, pipeline, params.geometry))
        return sample

    def finish(self) -> list:
        """Every sample, with the kernel's output as its image: the outputs of one pipeline
        and size are rows of one tensor, so that consecutive ones share kernel runs."""
        counts: Counter = Counter()
        rows = []
        for pending in self.pending:
            rows.append((pending.output_key, counts[pending.output_key]))
            counts[pending.output_key] += 1
        outputs: dict[tuple, torch.Tensor] = {}
        for pending in self.pending:
            if pending.output_key not in outputs:
                outputs[pending.output_key] = pipeline_output(
                    pending.pipeline, counts[pending.output_key], pending.geometry.size)
        runs = RunBatcher(self.router, len(self.pending))
        for pending, (key, row) in zip(self.pending, rows):
            pending.add_to(runs, outputs[key], row)
        runs.flush()
        for pending, (key, row) in zip(self.pending, rows):
            sample = self.results[pending.position]
            self.results[pending.position] = with_image(
                sample, self.images.as_output_kind(outputs[key][row], pending.is_image))
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
        runs = RunBatcher(self.router, len(self.pending))
        for pending in self.pending:
            pending.add_to(runs, rows, pending.position)
        runs.flush()

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

    @property
    def output_key(self) -> tuple:
        return (id(self.pipeline), self.geometry.size)

    def add_to(self, runs: RunBatcher, out: torch.Tensor, row: int) -> None:
        """Row `row` of `out` (N, C, H, W) is this sample's output."""
        source, moved = hwc_region(self.image, self.geometry)
        runs.add(out, row, source, moved.box, moved, "NCHW", self.pipeline.lut)

    def rendered(self, router) -> torch.Tensor:
        out = pipeline_output(self.pipeline, 1, self.geometry.size)
        runs = RunBatcher(router, 1)
        self.add_to(runs, out, 0)
        runs.flush()
        return out[0]


def pipeline_output(pipeline: ImagePipeline, count: int, size) -> torch.Tensor:
    return torch.empty((count, pipeline.out_channels, *size), dtype=pipeline.plan.output_dtype)


def hwc_region(image: torch.Tensor, geometry: Geometry) -> tuple[np.ndarray, Geometry]:
    """The HWC pixels of `image` that `geometry` reads, and the geometry moved onto them.

    Without padding that is the crop box; with constant or edge padding, the box clipped to
    the image (at least one pixel), with the padding recomputed around it; reflect and
    symmetric padding read pixels beyond the box, and a contrast before the geometric steps
    reads the whole image's mean: these get the whole image."""
    padding = geometry.padding
    _, height, width = image.shape
    if geometry.reads_whole_source:
        rows, cols, moved = (0, height), (0, width), geometry
    elif padding is None:
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

DPU_DECODE_REFUSAL = ("the dataset returns its images decoded (in-memory tensors): there is "
                      "nothing for DPUs to decode")


def takes(dataset, transform) -> bool:
    """Any dataset, with a transform: each sample's image, if a uint8 tensor, may run on the
    fused kernel (decided per sample)."""
    return transform is not None


def build(dataset, transform, options) -> InMemoryImages | None:
    """The native path for in-memory images under `transform`, or None (Python only)."""
    from pimloader.transforms import lower
    from pimloader.transforms.registry import flatten
    steps = flatten(transform)
    if any(_qualified_name(step) in _TENSOR_REFUSING for step in steps):
        return None
    plan = lower(transform, warn=False)
    if not (plan.geometric or plan.colour or plan.elementwise):
        return None
    if not native_available(options.backend):
        return None
    backend = resolve(options, DPU_DECODE_REFUSAL)
    pipelines = {channels: ImagePipeline(None, plan, lut, False, False, backend=backend,
                                         channels=channels)
                 for channels, lut in _tables_by_channels(plan).items()}
    if not pipelines:
        return None
    if plan.tail:
        lower(transform)  # warns, naming the steps that stay Python
    lowered = steps[:len(steps) - len(plan.tail)]
    return InMemoryImages(transform, plan, pipelines,
                          (_returns_image(lowered, False), _returns_image(lowered, True)),
                          all(op_of(step).family == "v2" for step in lowered))


def _qualified_name(step) -> str:
    kind = type(step)
    return f"{kind.__module__}.{kind.__qualname__}"


def _tables_by_channels(plan: Plan) -> dict[int, np.ndarray | None]:
    """The elementwise table for each input channel count the plan handles (1 and 3)."""
    tables = {}
    for channels in (3, 1):
        try:
            table = lookup_table(plan, channels)
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
        op = op_of(step)
        if op.plain_tensor or op.family == "v1":   # torchvision v1 ops return plain tensors
            returns_image = False
        elif op.from_pil == "image":
            returns_image = True
    return returns_image