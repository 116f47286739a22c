"""Image classification: encoded images + targets -> fixed-size image batches in slots.

For datasets whose samples pimloader can read as encoded bytes (see datasets/) and a
lowerable transform, a producer no longer calls the dataset's `__getitem__`. For each
sample it reads the bytes and target, reads the image size from the header, draws the
sample's parameters with the plan (torchvision's draws, in sample order, as the dataset's
transform would), decodes only the crop box, and hands runs of decoded crops to the
backends, which write each straight into the sample's row of the output slot.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from pimloader import decode
from pimloader.backends.select import Backends, native_available, resolve
from pimloader.datasets.seek_indexes import SeekIndexes
from pimloader.datasets.source import IMAGE_LABEL, prefetch
from pimloader.transforms.registry import op_of
from pimloader.loader.bad_samples import all_dropped
from pimloader.loader.fetch import Fetcher
from pimloader.loader.layout import Layout, SlotField
from pimloader.loader.produce import BatchProducer, Produced

from .images import DecodeBuffers, DecodeCounts, ImagePipeline, lookup_table
from .runs import RunBatcher
from .sourced import SourcedPipeline, reader_for, sourced


@dataclass
class EncodedImages(SourcedPipeline):
    """The loader's pipeline for encoded image datasets (picklable: it goes to workers)."""

    images: ImagePipeline

    def make_producer(self, context):
        """A producer of this loader's batches; over an IterableDataset of encoded items,
        one over each batch of them (IteratedBatches)."""
        if context.is_iterable:   # items have no stable index: no seek indexes
            return self.iterated_batches(context, lambda items: self.producer_over(
                context, dataclasses.replace(self.images, reader=items, seek_indexes=None)))
        return self.counted(self.producer_over(context, self.images))

    def producer_over(self, context, images: ImagePipeline):
        """The producer of batches of `images`' reader's samples."""
        router = context.resources.get(Backends).router(images.backend)
        fallback = BatchProducer(ImageFetcher(images, context.auto_collation, router),
                                 context.collate_fn, context.auto_collation, context.writer)
        if images.direct and fallback.writer is not None:
            return DirectImageProducer(images, context.writer, fallback, router,
                                       context.look_ahead)
        return fallback

    def kernel_backend(self) -> tuple[str, bool]:
        return self.images.backend.kind, self.images.backend.decode

    def source_reader(self):
        return self.images.reader

    def open_shared(self, workers: bool = True) -> None:
        super().open_shared(workers)
        if self.images.seek_indexes is not None:
            self.images.seek_indexes.open(shared=workers)

    def close_shared(self) -> None:
        super().close_shared()
        if self.images.seek_indexes is not None:
            self.images.seek_indexes.close()


class ImageFetcher(Fetcher):
    """A fetcher whose samples come from the native image path, one by one."""

    def __init__(self, pipeline: ImagePipeline, auto_collation: bool, router) -> None:
        super().__init__(auto_collation)
        self.pipeline = pipeline
        self.router = router
        self.decodes = DecodeCounts()

    def take_decode_counts(self) -> dict:
        return self.decodes.take()

    def prefetch(self, index) -> bool:
        return self.auto_collation and prefetch(self.pipeline.reader, index)

    def fetch(self, index):
        if not self.auto_collation:
            self.current = f"sample {index!r}"
            return self.pipeline.transformed(index, self.router, self.decodes)
        samples = []
        prefetch(self.pipeline.reader, index)
        for sample_index in index:
            self.current = f"sample {sample_index!r}"
            try:
                samples.append(self.pipeline.transformed(sample_index, self.router, self.decodes))
            except decode.DecodeError as error:
                if not self.pipeline.skip_errors:
                    raise
                self.drop(error)
        if not samples:
            raise self.none_left(index)
        return samples


class DirectImageProducer:
    """Produces whole batches by rendering each sample into its row of a slot."""

    # samples read and drawn ahead of their decode: enough to keep the draws' Python warm in
    # the caches, few enough that a large batch of large files is never all in memory
    LOAD_AHEAD = 32
    FIRST_CHUNK = 8   # a batch's chunks grow from this to LOAD_AHEAD (8, 16, 32): its
                      # decode starts once 8 samples are read, and a source that fetches
                      # over HTTP brings each chunk while the one before decodes
                      # (datasets/shard_fetch.py, COLD_TIERS)

    def __init__(self, pipeline: ImagePipeline, writer, fallback, router,
                 look_ahead=lambda: None) -> None:
        self.pipeline = pipeline
        self.look_ahead = look_ahead   # the worker's: called after each chunk is read
        self.hinted: set = set()       # batches hinted to the source, not made yet
        self.writer = writer
        self.fallback = fallback  # a BatchProducer over an ImageFetcher, when no slot is free
        self.router = router
        self.current = ""
        self.skipped = 0
        self.last_dropped = None
        self.layout: Layout | None = None  # sized by the first batch
        self.buffers = DecodeBuffers()
        self.decodes = DecodeCounts()

    def prefetch(self, index) -> bool:
        """The hint that batch `index` comes next, passed on to the source (BatchProducer)."""
        fetching = prefetch(self.pipeline.reader, index)
        if fetching:
            if len(self.hinted) > 4:   # hinted and never made (an epoch cut short)
                self.hinted.clear()
            self.hinted.add(tuple(index))
        return fetching

    def produce(self, index) -> Produced:
        start = time.perf_counter()
        hinted = bool(self.hinted) and tuple(index) in self.hinted
        if hinted:   # the worker hinted it: asked for already
            self.hinted.discard(tuple(index))
        else:        # (one process, or the hint missed): the whole batch, ahead of its reads
            prefetch(self.pipeline.reader, index)
        if self.layout is None:
            self.layout = self.pipeline.slot_layout(capacity=len(index))
        timing = {"fetch": 0.0, "decode": 0.0}
        batch = None
        if len(index) <= self.layout.capacity:
            batch = self.writer.write_with(
                self.layout, lambda views: self._fill(index, views[0], timing))
        if batch is None:
            return self.fallback.produce(index)
        total = time.perf_counter() - start
        skipped, self.skipped = self.skipped, 0
        indexes = self.pipeline.seek_indexes
        made, used = indexes.take_counts() if indexes is not None else (0, 0)
        return Produced(batch, batch.count, timing["fetch"],
                        total - timing["fetch"] - timing["decode"], skipped, timing["decode"],
                        decode_counts=self.decodes.take(), seek_indexes_made=made,
                        seek_index_decodes=used)

    def _fill(self, index, out: torch.Tensor, timing: dict) -> list:
        """Reads and draws a chunk at a time (FIRST_CHUNK, growing to LOAD_AHEAD), then
        decodes it into runs: the Python of the draws runs warm in the caches instead of
        after each decode (about 60 us less per sample). Should a sample then fail
        (on_error="raise"), the draws are replayed up to the sample before it, leaving
        torch's random state where torch's DataLoader leaves it: there a dataset decodes,
        then transforms, so a sample that fails to decode draws nothing. (A sample skipped
        by on_error="skip" for its pixels has drawn its parameters; one skipped for an
        unreadable header has not.)"""
        rng_state = torch.get_rng_state()
        index = list(index)
        skeletons: list = []
        runs = RunBatcher(self.router, len(out), self._submitted)
        for first, stop in self._chunks(len(index)):
            started = time.perf_counter()
            loaded = self._load_all(index, first, stop)
            self.look_ahead()   # the next batch's indices, once they have come
            timing["fetch"] += time.perf_counter() - started
            for position, sample_index, sample, params in loaded:
                self.current = f"sample {sample_index!r}"
                try:
                    if self._render(sample, params, len(skeletons), out, runs, timing):
                        skeletons.append((SlotField(0), sample.target))
                except Exception:
                    self._replay_draws(rng_state, index[:position])
                    raise
        runs.flush()
        if not skeletons:
            raise all_dropped(index, self.last_dropped)
        return skeletons

    def _chunks(self, count: int) -> list:
        """(first, stop) of the chunks of a batch of `count`: FIRST_CHUNK samples, then
        twice as many each time, up to LOAD_AHEAD."""
        bounds, size = [0], min(self.FIRST_CHUNK, self.LOAD_AHEAD)
        while bounds[-1] < count:
            bounds.append(min(bounds[-1] + size, count))
            size = min(2 * size, self.LOAD_AHEAD)
        return list(zip(bounds, bounds[1:]))

    def _render(self, sample, params, row: int, out, runs: RunBatcher, timing: dict) -> bool:
        """Decode the sample into a run (or render it alone); False if it was skipped. (A
        file the DPUs find corrupt when they decode a run raises from the run, on_error
        "skip" or not: the run's other rows are already on their way.)"""
        started = time.perf_counter()
        geometry = params.geometry
        try:
            if geometry is not None and geometry.size == self.pipeline.plan.output_size:
                source, box = self.pipeline.source_for(sample, geometry, self.router, self.buffers,
                                                       self.decodes)
                timing["decode"] += time.perf_counter() - started
            else:
                timing["decode"] += self.pipeline.render(sample, params, out[row], self.router,
                                                         decodes=self.decodes)
                return True
        except decode.DecodeError as error:
            if not self.pipeline.skip_errors:
                raise
            self._drop(error)
            return False
        runs.add(out, row, source, box, geometry, self.pipeline.kernel_layout, self.pipeline.lut)
        return True

    def _submitted(self, sources: list) -> None:
        """A run's sources are no longer needed: their decode buffers come back, and those
        the backend decoded on the host after all are counted so."""
        self.buffers.give_back(sources)
        self.decodes.recount(sources)

    def _load_all(self, index: list, first: int, stop: int) -> list:
        """(position in the batch, index, encoded sample, drawn parameters) of each
        readable sample of index[first:stop], in order (fetched ahead where the source can:
        produce asked for the whole batch), drawn together once read (Plan.draw_many: the
        draws one by one would give). Should a sample fail to read (on_error="raise"),
        those before it are drawn before the error leaves, as loading one by one draws them."""
        read = []
        try:
            for position in range(first, min(stop, len(index))):
                sample_index = index[position]
                self.current = f"sample {sample_index!r}"
                try:
                    read.append((position, sample_index, *self.pipeline.read_sized(sample_index)))
                except decode.DecodeError as error:
                    if not self.pipeline.skip_errors:
                        raise
                    self._drop(error)
        finally:
            drawn = self.pipeline.plan.draw_many([size for *_, size in read],
                                                 self.pipeline.channels)
        return [(position, sample_index, sample, params)
                for (position, sample_index, sample, _), params in zip(read, drawn)]

    def _drop(self, error: decode.DecodeError) -> None:
        self.skipped += 1
        self.last_dropped = error

    def _replay_draws(self, rng_state: torch.Tensor, indices) -> None:
        """Leave torch's random state as loading only `indices` from `rng_state` leaves it."""
        torch.set_rng_state(rng_state)
        for sample_index in indices:
            try:
                self.pipeline.load(sample_index)
            except decode.DecodeError:
                pass  # skipped when loading too


def takes(dataset, transform) -> bool:
    """Datasets whose samples are encoded images with targets: image folders, lists of
    (path, target) pairs, and datasets of encoded bytes under a Decode step."""
    view = sourced(dataset, transform)
    return view is not None and IMAGE_LABEL <= view.source.fields


def build(dataset, transform, options) -> EncodedImages | None:
    """The native path for this dataset and transform, or None when the dataset's samples
    cannot be read as encoded images (or nothing would be gained)."""
    from pimloader.transforms import lower
    view = sourced(dataset, transform)
    if view is None or not IMAGE_LABEL <= view.source.fields:
        return None
    if view.transform is None or not native_available(options.backend):
        return None
    if view.decode is not None and not view.decode.image_mode_rgb:
        return None  # the kernels make RGB images: other modes decode as Python
    plan = lower(view.transform)
    if view.own_transform and not plan.geometric and not plan.colour and not plan.elementwise:
        return None  # nothing to gain: keep the dataset's own (PIL) path
    lut = lookup_table(plan)
    if plan.elementwise and lut is None:
        return None
    crops_first = any(op_of(step).draft for step in plan.geometric)
    reduced_dct = crops_first if options.reduced_dct == "auto" else options.reduced_dct
    reader = reader_for(view.source, options)
    seek_indexes = None
    if crops_first and options.seek_index_bytes and not getattr(reader, "iterated", False):
        seek_indexes = SeekIndexes(options.seek_index_bytes, len(reader))
    return EncodedImages(ImagePipeline(
        reader, plan, lut, bool(reduced_dct), options.on_error == "skip",
        options.memory_format == torch.channels_last, resolve(options),
        seek_indexes=seek_indexes))
