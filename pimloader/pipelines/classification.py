"""The native image path: encoded bytes -> (ROI) decode -> fused kernel -> batch slot.

For datasets whose samples pimloader can read as encoded bytes (see datasets/folders.py) and a
lowerable transform, a producer no longer calls the dataset's `__getitem__`. For each
sample it reads the bytes and target, reads the image size from the header, draws the
sample's parameters with the plan (torchvision's draws, in sample order, as the dataset's
transform would), decodes only the crop box, and runs the fused crop/resize/flip/convert
kernel straight into the sample's row of the output slot.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pimloader.decode import jpeg as decode
from pimloader.loader._layout import Layout, SlotField
from pimloader.loader._produce import Produced
from pimloader.transforms._params import Geometry, SampleParams
from pimloader.transforms._plan import Plan


@dataclass
class ImagePipeline:
    """Picklable description of the native path, built once in the main process."""

    reader: Any                    # index -> datasets.EncodedSample
    plan: Plan
    lut: np.ndarray | None         # per-channel table of the plan's elementwise steps
    reduced_dct: bool              # decode at a reduced DCT scale where the crop allows
    skip_errors: bool              # on_error="skip": drop undecodable samples, count them
    channels_last: bool = False    # slots hold NHWC; batches are lent as channels_last NCHW
    dpus: tuple | None = None      # (nr_dpus, nr_tasklets, emulated) for the DPU backends
    channels: int = 3              # of the decoded images

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
        sample = self.reader(index)
        height, width = decode.image_size(sample.data, name=sample.name)
        return sample, self.plan.draw(height, width)

    def render(self, sample, params: SampleParams, out: torch.Tensor) -> float:
        """Write the transformed image of `sample` into `out` (C, H, W), via the kernel.

        Returns the seconds spent decoding (the rest is transform and write)."""
        geometry = params.geometry
        start = time.perf_counter()
        if geometry is None:
            self.as_chw(out).copy_(self._replayed(sample, params))
            return time.perf_counter() - start
        source, box = self.decoded_box(sample, geometry)
        decode_s = time.perf_counter() - start
        self.resample([source], [box], geometry.size, out[None], [geometry], self.kernel_layout)
        return decode_s

    def transformed(self, index: int) -> tuple[torch.Tensor, Any]:
        """One (image, target) sample, for the collate path (variable sizes, Python tail)."""
        sample, params = self.load(index)
        geometry = params.geometry
        if geometry is None:
            image = self._replayed(sample, params)
        else:
            image = torch.empty((self.out_channels, *geometry.size),
                                dtype=self.plan.output_dtype)
            self.render(sample, params, image)
        for transform in self.plan.tail:
            image = transform(image)
        return image, sample.target

    # -- pieces -------------------------------------------------------------------------

    def decoded_box(self, sample, geometry: Geometry, buffers: "DecodeBuffers | None" = None):
        """The decoded pixels the geometry needs, and its box within them (within their
        padded extension, when the geometry pads). With `buffers`, a JPEG crop is decoded
        into one of them (see DecodeBuffers)."""
        if geometry.padding is not None:
            pixels = decode.decode_image(sample.data, channels=self.channels, name=sample.name)
            return pixels, geometry.box
        if self.reduced_dct and geometry.resamples and decode.is_jpeg(sample.data):
            scale = decode.pick_scale(*geometry.box[2:], *geometry.resized)
            if scale < 8:
                scaled = decode.decode_jpeg_scaled(sample.data, geometry.box, scale=scale,
                                                   name=sample.name)
                return scaled.image, scaled.int_box()
        if buffers is not None and decode.is_jpeg(sample.data):
            pixels, buffer = decode.decode_jpeg_into(sample.data, geometry.box, buffers.take(),
                                                     channels=self.channels, name=sample.name)
            buffers.lend(buffer)
        else:
            pixels = decode.decode_image(sample.data, geometry.box, channels=self.channels,
                                         name=sample.name)
        return pixels, (0, 0, *pixels.shape[:2])

    def resample(self, sources, boxes, size, out, geometries: list[Geometry],
                 layout: str) -> None:
        """The fused kernel over a run of samples, on this pipeline's backend. The DPU kernel
        neither pads nor adjusts colours: samples that do run on the CPU kernel."""
        on_dpus = [self.dpus is not None and not _cpu_only(g) for g in geometries]
        start = 0
        for dpu, run in itertools.groupby(on_dpus):
            stop = start + len(list(run))
            part = slice(start, stop)
            self._run_kernel(dpu, sources[part], boxes[part], size, out[part],
                             geometries[part], layout)
            start = stop

    def _run_kernel(self, on_dpus: bool, sources, boxes, size, out, geometries, layout):
        extra = {}
        if on_dpus:
            run = _dpu_backend(*self.dpus).run
        else:
            if self.dpus:
                _warn_once(f"pimloader: the DPU kernel does not {_cpu_only(geometries[0])}; "
                           f"such samples run on the CPU kernel")
            run = _cpu_kernel()
            coloured = [g for g in geometries if g.colour]
            extra = dict(paddings=[g.padding and g.padding.as_kernel() for g in geometries],
                         colours=[g.colour for g in geometries],
                         fused_mul_add=False if coloured and coloured[0].colour_v1 else None)
        run(sources, boxes, size, out, hflip=[g.hflip for g in geometries],
            vflip=[g.vflip for g in geometries],
            interpolation=geometries[0].interpolation.value, layout=layout, lut=self.lut,
            windows=[(*g.resized, *g.window[:2]) for g in geometries], **extra)

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


def _cpu_only(geometry: Geometry) -> str:
    """What of the geometry only the CPU kernel does ("" when the DPU kernel can run it)."""
    needs = (["pad"] if geometry.padding is not None else []) + \
        (["adjust colours"] if geometry.colour else [])
    return " or ".join(needs)


_WARNED: set = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        import warnings
        warnings.warn(message, stacklevel=3)


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

    def take(self) -> np.ndarray:
        return self._free.pop() if self._free else np.empty(0, np.uint8)

    def lend(self, buffer: np.ndarray) -> None:
        self._lent[id(buffer)] = buffer

    def give_back(self, sources) -> None:
        """Take back the buffers of these decoded crops (others are ignored)."""
        for source in sources:
            buffer = self._lent.pop(id(getattr(source, "base", None)), None)
            if buffer is not None and buffer.nbytes <= self.MAX_KEPT:
                self._free.append(buffer)


class ImageFetcher:
    """A fetcher (see loader/_fetch.py) whose samples come from the native image path."""

    def __init__(self, pipeline: ImagePipeline, auto_collation: bool) -> None:
        self.pipeline = pipeline
        self.auto_collation = auto_collation
        self.current = ""
        self.skipped = 0

    def take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def fetch(self, index):
        if not self.auto_collation:
            self.current = f"sample {index!r}"
            return self.pipeline.transformed(index)
        samples = []
        for sample_index in index:
            self.current = f"sample {sample_index!r}"
            try:
                samples.append(self.pipeline.transformed(sample_index))
            except decode.DecodeError:
                if not self.pipeline.skip_errors:
                    raise
                self.skipped += 1
        return samples


class DirectImageProducer:
    """Produces whole batches by rendering each sample into its row of a slot."""

    # samples read and drawn ahead of their decode: enough to keep the draws' Python warm in
    # the caches, few enough that a large batch of large files is never all in memory
    LOAD_AHEAD = 32

    def __init__(self, pipeline: ImagePipeline, writer, fallback) -> None:
        self.pipeline = pipeline
        self.writer = writer
        self.fallback = fallback  # a BatchProducer over an ImageFetcher, when no slot is free
        self.current = ""
        self.skipped = 0
        self.layout: Layout | None = None  # sized by the first batch
        self.buffers = DecodeBuffers()

    def produce(self, index) -> Produced:
        start = time.perf_counter()
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
        return Produced(batch, batch.count, timing["fetch"],
                        total - timing["fetch"] - timing["decode"], skipped, timing["decode"])

    def _fill(self, index, out: torch.Tensor, timing: dict) -> list:
        """Reads and draws LOAD_AHEAD samples at a time, then decodes and resamples them:
        the Python of the draws runs warm in the caches instead of after each decode (about
        60 us less per sample). Should a sample then fail (on_error="raise"), the draws are
        replayed up to the sample before it, leaving torch's random state where torch's
        DataLoader leaves it: there a dataset decodes, then transforms, so a sample that
        fails to decode draws nothing. (A sample skipped by on_error="skip" for its pixels
        has drawn its parameters; one skipped for an unreadable header has not.)"""
        rng_state = torch.get_rng_state()
        index = list(index)
        skeletons: list = []
        pending = _KernelBatch(self.pipeline, out, self.buffers)
        for first in range(0, len(index), self.LOAD_AHEAD):
            started = time.perf_counter()
            loaded = self._load_all(index, first, first + self.LOAD_AHEAD)
            timing["fetch"] += time.perf_counter() - started
            for position, sample_index, sample, params in loaded:
                self.current = f"sample {sample_index!r}"
                try:
                    if self._render(sample, params, len(skeletons), out, pending, timing):
                        skeletons.append((SlotField(0), sample.target))
                except Exception:
                    self._replay_draws(rng_state, index[:position])
                    raise
        pending.flush()
        if not skeletons:
            raise decode.DecodeError(
                f"every sample of the batch {index!r} failed to decode (on_error='skip')")
        return skeletons

    def _render(self, sample, params, row: int, out, pending: "_KernelBatch",
                timing: dict) -> bool:
        """Decode the sample into the run (or render it alone); False if it was skipped."""
        started = time.perf_counter()
        try:
            if pending.accepts(params.geometry):
                source, box = self.pipeline.decoded_box(sample, params.geometry, self.buffers)
                timing["decode"] += time.perf_counter() - started
                pending.add(row, source, box, params.geometry)
            else:
                pending.flush()
                timing["decode"] += self.pipeline.render(sample, params, out[row])
        except decode.DecodeError:
            if not self.pipeline.skip_errors:
                raise
            self.skipped += 1
            return False
        return True

    def _load_all(self, index: list, first: int, stop: int) -> list:
        """(position in the batch, index, encoded sample, drawn parameters) of each
        readable sample of index[first:stop], in order."""
        loaded = []
        for position in range(first, min(stop, len(index))):
            sample_index = index[position]
            self.current = f"sample {sample_index!r}"
            try:
                loaded.append((position, sample_index, *self.pipeline.load(sample_index)))
            except decode.DecodeError:
                if not self.pipeline.skip_errors:
                    raise
                self.skipped += 1
        return loaded

    def _replay_draws(self, rng_state: torch.Tensor, indices) -> None:
        """Leave torch's random state as loading only `indices` from `rng_state` leaves it."""
        torch.set_rng_state(rng_state)
        for sample_index in indices:
            try:
                self.pipeline.load(sample_index)
            except decode.DecodeError:
                pass  # skipped when loading too


class _KernelBatch:
    """Consecutive rows resampled by one kernel call (box -> resized -> window -> flips).

    Rows are gathered (decoded) and then resampled in one call per run of rows, saving the
    per-call overhead; a row that needs anything else flushes the gathered ones first.

    CPU backend: a run is `CHUNK` rows, resampled on the spot. DPU backends: a full run is
    submitted (`DpuBackend.submit` packs the decoded rows into the driver's staging and queues
    the transfer + launch + gather) and the producer goes on decoding the next run while the
    DPUs work; the run in flight is waited for just before the next one is submitted, and by
    `flush`, so that every row is written when the producer's batch is complete. It is waited
    for before the next submit, not after, because a wait is libdpu's dpu_sync, which also
    waits for whatever was queued after the batch: submitting first would make the next run's
    DPU work part of this wait instead of overlapping the next decode.

    DPU run size: at least one row per DPU, since the driver gives each DPU a contiguous run
    of whole samples and a DPU without one idles through the launch (a real rank launches all
    its 64 DPUs at once); at least `CHUNK` rows, as each run costs a fixed overhead (planning,
    a launch, on the emulator NR_TASKLETS threads per DPU: runs of 8 rows on 8 DPUs measured
    slower than runs of 32); but at most half the batch, so that a batch has two runs or more
    and its decode overlaps DPU work. With 64 DPUs and batches of 256: 4 runs of 64 rows.
    """

    CHUNK = 32
    MIN_DPU_RUN = CHUNK

    def __init__(self, pipeline: ImagePipeline, out: torch.Tensor,
                 buffers: DecodeBuffers | None = None) -> None:
        self.pipeline = pipeline
        self.out = out
        self.buffers = buffers
        self.rows: list[tuple] = []
        self.dpus = _dpu_backend(*pipeline.dpus) if pipeline.dpus else None
        self.in_flight = None  # the DpuBatch of the run the DPUs work on
        self.run_rows = self.CHUNK if self.dpus is None else self.dpu_run_rows(self.dpus.nr_dpus, len(out))

    @classmethod
    def dpu_run_rows(cls, nr_dpus: int, batch_rows: int) -> int:
        return max(1, min(max(nr_dpus, cls.MIN_DPU_RUN), -(-batch_rows // 2)))

    def accepts(self, geometry: Geometry | None) -> bool:
        """Whether the row joins this run (rows the DPU kernel cannot do, padding or
        colour, are rendered one by one on the CPU kernel instead)."""
        return (geometry is not None and geometry.size == self.pipeline.plan.output_size
                and (self.dpus is None or not _cpu_only(geometry))
                and (not self.rows or geometry.interpolation == self.rows[0][3].interpolation))

    def add(self, row: int, source, box, geometry: Geometry) -> None:
        if self.rows and row != self.rows[-1][0] + 1:
            self.flush()
        self.rows.append((row, source, box, geometry))
        if len(self.rows) == self.run_rows:
            if self.dpus is None:
                self.flush()
            else:
                self._submit()

    def flush(self) -> None:
        """Resamples the gathered rows; with DPUs, returns once every submitted row is written."""
        if self.dpus is not None:
            self._submit()
            self._wait()
            return
        if not self.rows:
            return
        first = self.rows[0][0]
        self.pipeline.resample(
            [row[1] for row in self.rows], [row[2] for row in self.rows],
            self.pipeline.plan.output_size, self.out[first:first + len(self.rows)],
            [row[3] for row in self.rows], self.pipeline.kernel_layout)
        self._give_back(self.rows)
        self.rows = []

    def _submit(self) -> None:
        """Waits for the run in flight, then queues the gathered rows on the DPUs."""
        self._wait()
        if not self.rows:
            return
        rows, self.rows = self.rows, []  # the sources are released once submit has packed them
        first, geometries = rows[0][0], [row[3] for row in rows]
        self.in_flight = self.dpus.submit(
            [row[1] for row in rows], [row[2] for row in rows], self.pipeline.plan.output_size,
            self.out[first:first + len(rows)], hflip=[g.hflip for g in geometries],
            vflip=[g.vflip for g in geometries], interpolation=geometries[0].interpolation.value,
            layout=self.pipeline.kernel_layout, lut=self.pipeline.lut,
            windows=[(*g.resized, *g.window[:2]) for g in geometries])
        self._give_back(rows)

    def _give_back(self, rows) -> None:
        if self.buffers is not None:
            self.buffers.give_back(row[1] for row in rows)

    def _wait(self) -> None:
        batch, self.in_flight = self.in_flight, None
        if batch is not None:
            batch.wait()


def _cpu_kernel():
    from pimloader.backends.kernels import resized_crop_batch
    return resized_crop_batch


_DPU_SETS: dict = {}


def _dpu_backend(nr_dpus: int, nr_tasklets: int, emulated: bool, profile: str = ""):
    """This process's DPU set (a forked worker never uses its parent's)."""
    import os
    key = (os.getpid(), nr_dpus, nr_tasklets, emulated, profile)
    if key not in _DPU_SETS:
        from pimloader.backends.dpu.driver import DpuBackend
        _DPU_SETS[key] = DpuBackend(nr_dpus, nr_tasklets, profile, emulated=emulated)
    return _DPU_SETS[key]


BACKENDS = ("auto", "cpu", "emulator", "upmem")


def build_image_pipeline(dataset, transform, *, backend: str, on_error: str, reduced_dct,
                         memory_format=torch.contiguous_format, nr_dpus: int = 64,
                         nr_tasklets: int = 16, dpu_profile: str = "") -> ImagePipeline | None:
    """The native image path for this dataset and transform, or None for torch's path."""
    from pimloader.datasets.folders import EncodedSource
    from pimloader.transforms import lower
    _check_options(backend, on_error, reduced_dct, memory_format)
    source = EncodedSource.detect(dataset)
    if source is not None and source.transform is not None and transform is not None:
        raise ValueError("the transform is given twice, to the dataset and to PIMDataLoader; "
                         "give it to one of them")
    from_dataset = transform is None
    transform = transform if transform is not None else getattr(source, "transform", None)
    if source is None or transform is None or not _native_available(backend):
        return None
    plan = lower(transform)
    if from_dataset and not plan.geometric and not plan.colour and not plan.elementwise:
        return None  # nothing to gain: keep the dataset's own (PIL) path
    lut = _lookup_table(plan)
    if plan.elementwise and lut is None:
        return None
    if reduced_dct == "auto":
        from torchvision.transforms.v2 import RandomResizedCrop
        reduced_dct = any(isinstance(step, RandomResizedCrop) for step in plan.geometric)
    return ImagePipeline(source.read, plan, lut, bool(reduced_dct), on_error == "skip",
                         memory_format == torch.channels_last,
                         _dpu_config(backend, nr_dpus, nr_tasklets, dpu_profile))


def _dpu_config(backend: str, nr_dpus: int, nr_tasklets: int,
                dpu_profile: str = "") -> tuple | None:
    """(nr_dpus, nr_tasklets, emulated, profile) for the DPU backends, None for the CPU
    kernels."""
    if not isinstance(dpu_profile, str):
        raise TypeError(f"dpu_profile must be a libdpu profile string, got {dpu_profile!r}")
    if backend == "cpu" or (backend == "auto" and not _upmem_available()):
        return None
    if not 1 <= nr_tasklets <= 24 or nr_dpus < 1:
        raise ValueError(f"nr_dpus must be >= 1 and nr_tasklets 1..24, got {nr_dpus}, "
                         f"{nr_tasklets}")
    if backend == "upmem" and not _upmem_available():
        from pimloader.backends.dpu.driver import _module
        _module(False)  # raises, saying what is missing
    return (nr_dpus, nr_tasklets, backend == "emulator", dpu_profile)


def _upmem_available() -> bool:
    try:
        from pimloader.backends.dpu.driver import _module
        _module(False)
    except Exception:
        return False
    return True


def _check_options(backend: str, on_error: str, reduced_dct, memory_format) -> None:
    if memory_format not in (torch.contiguous_format, torch.channels_last):
        raise ValueError(f"memory_format must be torch.contiguous_format or "
                         f"torch.channels_last, got {memory_format!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if reduced_dct not in ("auto", True, False):
        raise ValueError(f"reduced_dct must be 'auto', True or False, got {reduced_dct!r}")


def _native_available(backend: str) -> bool:
    try:
        from pimloader import _jpeg, _kernels  # noqa: F401  (built by setup.py)
    except ImportError as error:
        if backend == "cpu":
            raise ImportError(f"backend='cpu' needs pimloader's native extensions, which "
                              f"are not built ({error}); run `make install`") from error
        import warnings
        warnings.warn(f"pimloader: native extensions not built ({error}); transforms run "
                      f"as Python under torch's semantics", stacklevel=3)
        return False
    return True


def _lookup_table(plan: Plan, channels: int = 3) -> np.ndarray | None:
    """The plan's elementwise table as the kernel's bit patterns for images of `channels`
    channels (None: not a kernel dtype)."""
    from pimloader.backends.kernels import OUT_DTYPES
    element_size, bits = OUT_DTYPES.get(plan.output_dtype, (None, None))
    if bits is None:
        return None
    table = plan.lookup_table(plan.output_channels(channels))
    as_ints = table.view(torch.int16 if element_size == 2 else torch.int32)
    return np.ascontiguousarray(as_ints.numpy().view(bits))
