"""Object detection: COCO images + annotations -> (image, target) samples, then collate_fn.

For a COCO dataset the loader reads natively (datasets/coco.py: pimloader's CocoDetection,
or torchvision's, v2-wrapped or not, whose transforms start with ToImage), a producer no
longer calls the dataset's `__getitem__`. For each sample it reads the file's bytes and the
image's annotations, reads the image size from the header and builds the target as
torchvision's wrapper does. Then:

- when the pipeline lowers (transforms/probe.py), torchvision's transforms run on the
  sample with a pixel-less probe for the image: the random draws, boxes, masks and labels
  are torchvision's own, and the image's colour ops, pads, crops, resize, flips, dtype and
  normalisation come back as one Geometry and a lookup table, which the fused kernel runs
  on the decoded crop (the backends of the loader, the CPU for what a DPU cannot do);
- otherwise (unknown transforms, a draw that does not fuse, replayed from the same RNG
  state) the image is decoded natively and the transforms run as Python on it.

A batch's samples are prepared in order (targets, draws, decodes), then the kernel renders
their images together: images of one size are rows of one tensor (in a worker, memory of
the loader's output arena, reused batch after batch and sent as a reference). The
samples go to the loader's collate_fn (the detection references' `lambda batch:
tuple(zip(*batch))`, or pimloader.PaddedBatch), or into a slot when the default collate
meets fixed-size samples.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors

from pimloader import decode
from pimloader.backends.base import IMAGES
from pimloader.backends.select import BackendSpec, Backends, native_available, resolve
from pimloader.datasets.coco import CocoSource
from pimloader.datasets.items import BoxedItems
from pimloader.datasets.source import IMAGE_BOXES, IMAGE_COCO, prefetch
from pimloader.loader.arena import output_tensors
from pimloader.loader.fetch import Fetcher, TransformingFetcher
from pimloader.loader.produce import BatchProducer, Pipeline
from pimloader.transforms.probe import (ImageProbe, apply_elementwise, for_probe, is_probe,
                                         run_on_probe)

from .sourced import SourcedPipeline, reader_for, sourced
from .padded import PaddedBatch
from .runs import RunBatcher


@dataclass
class Detection(SourcedPipeline):
    """The loader's pipeline for a COCO dataset (picklable: it goes to the workers)."""

    source: CocoSource
    transforms: Any                # (image, target) -> (image, target), or None
    on_probe: Any                  # the transforms' copy for probes (None: Python only)
    backend: BackendSpec
    skip_errors: bool              # on_error="skip": drop undecodable samples, count them
    read: Any = None               # index -> EncodedSample: the source's reader, or a
                                   # CachedReader over it (cache_bytes > 0)
    _tables: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.read is None:
            self.read = self.source.reader

    def make_producer(self, context):
        """A producer of this loader's batches; over an IterableDataset of (bytes, target)
        items, one over each batch of them (IteratedBatches)."""
        if context.is_iterable:
            return self.iterated_batches(context, lambda items: self.producer_over(
                context, replace(self, source=self.source.with_items(items), read=items)))
        return self.counted(self.producer_over(context, self))

    def producer_over(self, context, pipeline: "Detection"):
        """The producer of batches of `pipeline`'s samples."""
        router = context.resources.get(Backends).router(pipeline.backend)
        fetcher = DetectionFetcher(pipeline, context.auto_collation, router,
                                   context.collate_fn if context.auto_collation else None)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)

    def kernel_backend(self) -> tuple[str, bool]:
        return (self.backend.kind, self.backend.decode) if self.on_probe is not None else ("", False)

    def source_reader(self):
        return self.read

    def prepare(self, index: int) -> tuple[Any, "Pending | None"]:
        """Sample `index` as the dataset with its transforms gives it, made as Python:
        (sample, None); or its targets and decoded pixels, waiting for the kernel: (None,
        Pending). Its random draws are made either way, in the sample's turn."""
        encoded = self.read(index)
        height, width = decode.image_size(encoded.data, name=encoded.name, warn=False)
        target = self.source.target(index, encoded.target, (height, width))
        if self.on_probe is None:
            return self._python(encoded, target), None
        rng_state = torch.get_rng_state()
        lowered = self._on_probe(target, height, width)
        if lowered is not None:
            sample, geometry, table = lowered
            try:
                return None, Pending(sample, geometry, *table, *_decoded(encoded, geometry))
            except decode.DecodeError:
                torch.set_rng_state(rng_state)   # as under torch: a sample that fails to
                raise                            # decode has drawn nothing
        torch.set_rng_state(rng_state)
        # the probe run may have changed the target in place (e.g. masks): build it again
        target = self.source.target(index, encoded.target, (height, width))
        return self._python(encoded, target), None

    def _on_probe(self, target, height: int, width: int):
        """(sample with probes, Geometry, (lut, dtype)) of the transforms' run on a probe,
        or None when it does not fuse or the run raised: the sample is then replayed as
        Python, where torchvision's own error (e.g. RandomIoUCrop without boxes) is raised
        as under torch, and where a probe's own failure cannot change the result."""
        try:
            sample, recording = run_on_probe(self.on_probe, target, height, width)
        except Exception:  # noqa: BLE001 - replayed as Python by the caller
            return None
        if recording.geometry is None:
            return None
        table = self._table(recording.elementwise)
        return None if table is None else (sample, recording.geometry, table)

    def _python(self, encoded, target):
        pixels = decode.decode_image(encoded.data, name=encoded.name)
        image = torch.from_numpy(pixels).permute(2, 0, 1)
        if self.source.enters_as == "image":
            image = tv_tensors.Image(image)
        if self.transforms is None:
            return image, target
        return self.transforms(image, target)

    def render(self, pending: list["Pending"], router, padded=None, rows=None) -> list:
        """The pending samples with their images made by the kernel. Images of one size
        and dtype are rows of one tensor (in a worker, memory of its output arena), added
        to the run batcher group by group, so that the kernel runs them in runs of many
        rows, on the DPUs too (a DPU launch has one output size).

        With `padded` (a PaddedBatch's reserved batch tensor) and `rows` (each pending
        sample's row in it), an image whose kernel `writes_strided_out` is rendered
        straight into its top-left corner: the images of one size are rows of the strided
        view `padded[:, :, :h, :w]`. The others keep their long runs into tensors of their
        own, which the PaddedBatch copies into their corners."""
        if not pending:
            return []
        groups: dict[tuple, list[int]] = {}   # (size, dtype, in its corner) -> positions
        for position, item in enumerate(pending):
            in_corner = padded is not None and \
                router.kernel_for(IMAGES, item.geometry).writes_strided_out
            groups.setdefault((item.geometry.size, item.dtype, in_corner), []).append(position)
        own = [((len(members), 3, *size), dtype)
               for (size, dtype, in_corner), members in groups.items() if not in_corner]
        made = iter(output_tensors(own) if own else [])
        places: list = [None] * len(pending)   # (out, row) of each pending sample
        runs = RunBatcher(router, len(pending))
        for (size, _, in_corner), members in groups.items():
            if in_corner:
                out, out_rows = padded[:, :, :size[0], :size[1]], [rows[p] for p in members]
            else:
                out, out_rows = next(made), range(len(members))
            for row, position in zip(out_rows, members):
                item = pending[position]
                places[position] = (out, row)
                runs.add(out, row, item.pixels, item.box, item.geometry, "NCHW", item.lut)
        runs.flush()
        return [item.with_image(out[row]) for (out, row), item in zip(places, pending)]

    def _table(self, elementwise: list[tuple]):
        """(kernel lookup table or None, output dtype) of the elementwise steps, or None
        when the kernel cannot produce their output."""
        key = tuple(elementwise)
        if key not in self._tables:
            self._tables[key] = _kernel_table(elementwise)
        return self._tables[key]


@dataclass
class Pending:
    """A sample whose targets are made and whose image waits for the kernel."""

    sample: Any            # the transformed sample, with probes for its image
    geometry: Any          # transforms.params.Geometry
    lut: Any               # the kernel's lookup table (None: uint8 as it is)
    dtype: torch.dtype
    pixels: Any            # the decoded pixels the geometry needs
    box: tuple             # the geometry's box within them

    def with_image(self, image: torch.Tensor):
        """The sample with `image` in place of its probes (a tv_tensors.Image where the
        probe was one; a plain tensor where ToPureTensor had made it one)."""
        leaves, spec = tree_flatten(self.sample)
        leaves = [(tv_tensors.Image(image) if isinstance(leaf, ImageProbe) else image)
                  if is_probe(leaf) else leaf for leaf in leaves]
        return tree_unflatten(leaves, spec)


def _decoded(encoded, geometry):
    """(pixels, box): what the geometry's box needs of the image, decoded."""
    if geometry.padding is not None or geometry.reads_whole_source:
        # the box is within the padded image, or a contrast reads the whole image's mean
        return decode.decode_image(encoded.data, name=encoded.name), geometry.box
    pixels = decode.decode_image(encoded.data, geometry.box, name=encoded.name)
    return pixels, (0, 0, *pixels.shape[:2])


def _kernel_table(elementwise: list[tuple]):
    from pimloader.backends.kernels import OUT_DTYPES
    ramp = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256).contiguous()
    table = apply_elementwise(elementwise, ramp)[:, 0, :].contiguous()
    if table.dtype == torch.uint8:
        return (None, torch.uint8) if torch.equal(table, ramp[:, 0, :]) else None
    element_size, bits = OUT_DTYPES.get(table.dtype, (None, None))
    if bits is None:
        return None
    as_ints = table.view(torch.int16 if element_size == 2 else torch.int32)
    return np.ascontiguousarray(as_ints.numpy().view(bits)), table.dtype


class DetectionFetcher(Fetcher):
    """Samples from the detection pipeline, one by one, in the sampler's order."""

    def __init__(self, pipeline: Detection, auto_collation: bool, router,
                 collate_fn=None) -> None:
        super().__init__(auto_collation)
        self.pipeline = pipeline
        self.router = router
        self.padding = collate_fn if isinstance(collate_fn, PaddedBatch) else None

    def prefetch(self, index) -> bool:
        return self.auto_collation and prefetch(self.pipeline.read, index)

    def fetch(self, index):
        if not self.auto_collation:
            self.current = f"sample {index!r}"
            sample, waiting = self.pipeline.prepare(index)
            if waiting is None:
                return sample
            self.kernel_samples += 1
            return self.pipeline.render([waiting], self.router)[0]
        return self._fetch(index)

    def _fetch(self, indices) -> list:
        samples, pending, places = [], [], []
        prefetch(self.pipeline.read, indices)
        for sample_index in indices:
            self.current = f"sample {sample_index!r}"
            try:
                sample, waiting = self.pipeline.prepare(sample_index)
            except decode.DecodeError as error:
                if not self.pipeline.skip_errors:
                    raise
                self.drop(error)
                continue
            if waiting is not None:
                pending.append(waiting)
                places.append(len(samples))
            samples.append(sample)
        if not samples:
            raise self.none_left(indices)
        self.current = f"the fused kernel's run over samples {list(indices)!r}"
        padded = self._reserve(samples, pending, places)
        rendered = self.pipeline.render(pending, self.router, padded, places)
        for place, sample in zip(places, rendered):
            samples[place] = sample
        self.kernel_samples += len(pending)
        return samples

    def _reserve(self, samples: list, pending: list, places: list):
        """The padded batch tensor the images are rendered into, when the collate_fn is a
        PaddedBatch and every sample is an (image, target) pair of one image dtype."""
        if self.padding is None:
            return None
        if not pending:
            return self.padding.reserve(None, None)
        shapes: list = [None] * len(samples)
        for place, item in zip(places, pending):
            shapes[place] = (3, *item.geometry.size, item.dtype)
        for place, sample in enumerate(samples):
            if shapes[place] is None:
                if not (isinstance(sample, (tuple, list)) and len(sample) == 2
                        and isinstance(sample[0], torch.Tensor) and sample[0].dim() == 3):
                    return self.padding.reserve(None, pending[0].dtype)
                shapes[place] = (*sample[0].shape, sample[0].dtype)
        if any(shape[3] != shapes[0][3] for shape in shapes):
            return self.padding.reserve(None, pending[0].dtype)
        return self.padding.reserve([shape[:3] for shape in shapes], shapes[0][3])


DPU_DECODE_REFUSAL = ("detection images are decoded on the host (decoding on DPUs "
                      "serves the classification pipeline only)")


def takes(dataset, transform) -> bool:
    """Datasets whose samples are encoded images with detection targets: COCO sets
    (pimloader's CocoDetection, torchvision's, v2-wrapped or not, a user's source of
    {image, coco}), and datasets of (bytes, torchvision target) under T.Decode()."""
    view = sourced(dataset, transform)
    return view is not None and _detection_fields(view.source.fields)


def build(dataset, transform, options) -> Pipeline | None:
    """The detection pipeline for a source the loader reads natively; where the image
    would enter the loader's `transform` as PIL, that transform as Python on whole samples;
    else None. The loader's `transform` stands for the dataset's (image, target)
    transforms."""
    view = sourced(dataset, transform)
    if view is None or not _detection_fields(view.source.fields):
        return None
    source = _detection_source(view.source).with_transforms(view.transform)
    if source is None or not native_available(options.backend):
        if view.own_transform:
            return None  # the dataset runs its own transforms in __getitem__
        options.dpu_decode(DPU_DECODE_REFUSAL)
        return JointTransform(view.given)
    _warn_unused(options)
    transforms = source.transforms
    lowered = source.enters_as == "image" and transforms is not None
    read = reader_for(source.reader, options)
    return Detection(source, transforms, for_probe(transforms) if lowered else None,
                     resolve(options, DPU_DECODE_REFUSAL), options.on_error == "skip", read)


def _detection_fields(fields) -> bool:
    return IMAGE_COCO <= fields or IMAGE_BOXES <= fields


def _detection_source(source):
    """A COCO source as it is; items with torchvision targets through BoxedItems."""
    return source if IMAGE_COCO <= source.fields else BoxedItems(source)


def _warn_unused(options) -> None:
    unused = [name for name, used in (
        ("memory_format=torch.channels_last", options.memory_format == torch.channels_last),
        ("reduced_dct=True", options.reduced_dct is True)) if used]
    if unused:
        verb = "does" if len(unused) == 1 else "do"
        warnings.warn(f"pimloader: {' and '.join(unused)} {verb} not apply to detection sets yet "
                      f"(their images are decoded at full scale into contiguous CHW tensors)",
                      stacklevel=4)


@dataclass
class JointTransform(Pipeline):
    """The loader's `transform` as Python on whole (image, target) samples of a COCO
    dataset the loader does not read natively (it yields PIL images)."""

    transform: Any

    def make_producer(self, context):
        fetcher = JointFetcher(context.plain_fetcher(), self.transform)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)


class JointFetcher(TransformingFetcher):
    """TransformingFetcher whose transform takes the whole sample, as `transforms` does."""

    def _transformed(self, sample):
        return self._in_stage(lambda sample: self.transform(*sample), sample)
