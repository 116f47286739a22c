"""`ImagePipeline`: how one image sample is read, drawn, decoded and rendered.

A picklable description, built once in the main process and sent to the workers: the
reader of encoded samples, the lowered plan, its lookup table, the decode options and the
backend spec. What it renders goes through a `RunBatcher` to the backends the process has
open (`router`), never to a backend it picks itself. When the router's backend decodes
images itself (decode_on_dpu), `source_for` hands it the encoded sample instead of decoding
it, unless the sample needs the host: what the backend's kernel does not do (padding,
colour), a reduced-DCT draft decode, or the backend's own reason for the file.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pimloader import decode
from pimloader.backends.base import IMAGES, EncodedImage
from pimloader.backends.select import CPU, BackendSpec
from pimloader.loader.layout import Layout
from pimloader.transforms.params import Geometry, SampleParams
from pimloader.transforms.plan import Plan

from .runs import RunBatcher


@dataclass
class ImagePipeline:
    """Picklable description of the native image path."""

    reader: Any                    # index -> datasets.EncodedSample (None: in-memory images)
    plan: Plan
    lut: np.ndarray | None         # per-channel table of the plan's elementwise steps
    reduced_dct: bool              # decode at a reduced DCT scale where the crop allows
    skip_errors: bool              # on_error="skip": drop undecodable samples, count them
    channels_last: bool = False    # slots hold NHWC; batches are lent as channels_last NCHW
    backend: BackendSpec = CPU     # where the fused kernel runs
    channels: int = 3              # of the decoded images
    seek_indexes: Any = None       # datasets.SeekIndexes of the reader's JPEGs, or None

    @property
    def out_channels(self) -> int:
        """Channels of the output (Grayscale may change them)."""
        return self.plan.output_channels(self.channels)

    @property
    def direct(self) -> bool:
        """Whether batches can be written straight into slots (fixed output, no tail)."""
        return not self.plan.tail and self.plan.output_size is not None

    def slot_layout(self, capacity: int) -> Layout:
        height, width = self.plan.output_size
        if self.channels_last:
            return Layout.single((height, width, self.out_channels), self.plan.output_dtype,
                                 capacity, order=(0, 3, 1, 2))
        return Layout.single((self.out_channels, height, width), self.plan.output_dtype,
                             capacity)

    @property
    def kernel_layout(self) -> str:
        return "NHWC" if self.channels_last else "NCHW"

    def as_chw(self, row: torch.Tensor) -> torch.Tensor:
        """A slot row (stored CHW or HWC) viewed as CHW."""
        return row.permute(2, 0, 1) if self.channels_last else row

    # -- one sample ---------------------------------------------------------------------

    def load(self, index: int):
        """(encoded sample, drawn parameters) for dataset index `index`."""
        sample, (height, width) = self.read_sized(index)
        return sample, self.plan.draw(height, width, self.channels)

    def read_sized(self, index: int):
        """(encoded sample, its image's (height, width)) for dataset index `index`: what
        `load` reads before it draws (`plan.draw_many` draws many at once)."""
        sample = self.reader(index)
        if self.seek_indexes is not None:
            sample.index = index
        # refuses a decompression bomb before anything is drawn; its decode warns (once)
        # for an image over the limit
        return sample, decode.image_size(sample.data, name=sample.name, warn=False)

    def render(self, sample, params: SampleParams, out: torch.Tensor, router,
               layout: str | None = None, decodes: "DecodeCounts | None" = None) -> float:
        """Write the transformed image of `sample` into `out` (a slot row, stored as
        `layout`: the slots' by default), on the backends of `router`. Returns the seconds
        spent decoding; `decodes` counts where the sample was decoded."""
        geometry = params.geometry
        start = time.perf_counter()
        if geometry is None:
            image = self._replayed(sample, params)
            (out if layout == "NCHW" else self.as_chw(out)).copy_(image)
            return time.perf_counter() - start
        source, box = self.source_for(sample, geometry, router, decodes=decodes)
        decode_s = time.perf_counter() - start
        batcher = RunBatcher(router, 1, decodes.recount if decodes is not None else None)
        batcher.add(out[None], 0, source, box, geometry, layout or self.kernel_layout, self.lut)
        batcher.flush()
        return decode_s

    def transformed(self, index: int, router, decodes: "DecodeCounts | None" = None
                    ) -> tuple[torch.Tensor, Any]:
        """One (image, target) sample, for the collate path (variable sizes, Python tail)."""
        sample, params = self.load(index)
        geometry = params.geometry
        if geometry is None:
            image = self._replayed(sample, params)
        else:
            image = torch.empty((self.out_channels, *geometry.size),
                                dtype=self.plan.output_dtype)
            self.render(sample, params, image, router, "NCHW", decodes)
        for transform in self.plan.tail:
            image = transform(image)
        return image, sample.target

    # -- pieces -------------------------------------------------------------------------

    def source_for(self, sample, geometry: Geometry, router, buffers: "DecodeBuffers | None" = None,
                   decodes: "DecodeCounts | None" = None):
        """(source, box) of the sample's row for `router`'s backends: the encoded sample
        itself (an EncodedImage of the geometry's box, box (0, 0, h, w)) when the loader's
        image kernel decodes it, else `decoded_box`'s decoded pixels. `decodes` counts
        which, and why."""
        kernel = router.primary_kernel(IMAGES)
        if kernel is None or not kernel.decodes_images:
            return self.decoded_box(sample, geometry, buffers)
        refusal = "reduced_dct" if self._draft_scale(sample, geometry) < 8 else ""
        if not refusal:
            image = EncodedImage(sample.data, sample.name, geometry.box, self.channels)
            # what the kernel does not do ("pad", "adjust colours"), else its reason for
            # the file ("" when it decodes it)
            refusal = kernel.unsupported(geometry) or kernel.decode_refusal(image)
        if decodes is not None:
            decodes.add(refusal)
        if not refusal:
            return image, (0, 0, *geometry.box[2:])
        return self.decoded_box(sample, geometry, buffers)

    def _draft_scale(self, sample, geometry: Geometry) -> int:
        """The DCT scale (of 8) a reduced_dct decode of the box would use; 8: a full one."""
        if (self.reduced_dct and geometry.resamples and not geometry.source_colour
                and geometry.padding is None and decode.is_jpeg(sample.data)):
            return decode.pick_scale(*geometry.box[2:], *geometry.resized)
        return 8

    def decoded_box(self, sample, geometry: Geometry, buffers: "DecodeBuffers | None" = None):
        """The decoded pixels the geometry needs, and its box within them (within their
        padded extension, when the geometry pads). With `buffers`, a JPEG crop is decoded
        into one of them (see DecodeBuffers)."""
        if geometry.padding is not None or geometry.reads_whole_source:
            pixels = decode.decode_image(sample.data, channels=self.channels, name=sample.name)
            return pixels, geometry.box
        scale = self._draft_scale(sample, geometry)
        if scale < 8:
            scaled = decode.decode_jpeg_scaled(sample.data, geometry.box, scale=scale,
                                               name=sample.name, seek_index=self._seek_index(sample))
            return scaled.image, scaled.int_box()
        if buffers is not None and decode.is_jpeg(sample.data):
            pixels, buffer = decode.decode_jpeg_into(sample.data, geometry.box, buffers.take(),
                                                     channels=self.channels, name=sample.name,
                                                     seek_index=self._seek_index(sample))
            buffers.lend(buffer)
        else:
            pixels = decode.decode_image(sample.data, geometry.box, channels=self.channels,
                                         name=sample.name)
        return pixels, (0, 0, *pixels.shape[:2])

    def _seek_index(self, sample) -> bytes | None:
        """The sample's seek index to decode a crop with (seek_indexes), or None."""
        if self.seek_indexes is None or sample.index is None:
            return None
        return self.seek_indexes.for_crop(sample.index, sample.data)

    def _replayed(self, sample, params: SampleParams) -> torch.Tensor:
        """torchvision's own ops on the fully decoded image (padding crops and the like)."""
        pixels = decode.decode_image(sample.data, channels=self.channels, name=sample.name)
        return self.replayed_image(torch.from_numpy(pixels).permute(2, 0, 1), params)

    def replayed_image(self, image: torch.Tensor, params: SampleParams) -> torch.Tensor:
        """torchvision's own ops for the draw `params` on a uint8 CHW image, then the
        plan's elementwise steps (the tail is the caller's)."""
        image = params.replay(image)
        for transform in self.plan.elementwise:
            image = transform(image)
        return image


class DecodeBuffers:
    """Decode buffers a producer reuses from one kernel run to the next, so that a crop is
    decoded into memory that is already mapped, with no copy out of libjpeg's decoded
    columns (decode.decode_jpeg_into). The decoded crop is a view of its buffer; once the
    run that holds it is done with its sources (resampled on the CPU, or packed into the
    DPU driver's staging by submit), `give_back` returns the buffer. Buffers over MAX_KEPT
    bytes (huge photos) are left to the allocator."""

    MAX_KEPT = 8 << 20

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lent: dict[int, np.ndarray] = {}
        self._size = 0   # the largest buffer a decode has needed: the size of new ones

    def take(self) -> np.ndarray:
        return self._free.pop() if self._free else np.empty(self._size, np.uint8)

    def lend(self, buffer: np.ndarray) -> None:
        self._lent[id(buffer)] = buffer
        if self._size < buffer.nbytes <= self.MAX_KEPT:
            self._size = buffer.nbytes

    def give_back(self, sources) -> None:
        """Take back the buffers of these decoded crops (others are ignored); those smaller
        than the largest needed so far are dropped, so that the buffers kept grow to the
        largest image's instead of each being too small for the next large one."""
        for source in sources:
            buffer = self._lent.pop(id(getattr(source, "base", None)), None)
            if buffer is not None and self._size <= buffer.nbytes <= self.MAX_KEPT:
                self._free.append(buffer)


class DecodeCounts:
    """Where a producer's samples were decoded since the counts were last taken: by the
    backend itself (decode_on_dpu), or on the host and why (the reasons, counted)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, refusal: str) -> None:
        """One sample: "" when the backend decodes it, else the reason the host does."""
        self.counts[refusal] = self.counts.get(refusal, 0) + 1

    def recount(self, sources) -> None:
        """A submitted run's sources: those the backend accepted (counted "") but had
        decoded on the host after all (`EncodedImage.host_reason`) move to their reason."""
        for source in sources:
            reason = getattr(source, "host_reason", "")
            if reason:
                self.counts[""] -= 1
                self.add(reason)

    def take(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts


def lookup_table(plan: Plan, channels: int = 3) -> np.ndarray | None:
    """The plan's elementwise table as the kernel's bit patterns for images of `channels`
    channels (None: not a kernel dtype)."""
    from pimloader.backends.kernels import OUT_DTYPES
    element_size, bits = OUT_DTYPES.get(plan.output_dtype, (None, None))
    if bits is None:
        return None
    table = plan.lookup_table(plan.output_channels(channels))
    as_ints = table.view(torch.int16 if element_size == 2 else torch.int32)
    return np.ascontiguousarray(as_ints.numpy().view(bits))
