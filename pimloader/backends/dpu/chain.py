"""Decode and transform on the same DPUs (docs/dpu.md, "Decode and transform on the same DPU").

A run whose sources include `EncodedImage`s goes to the DPUs as compressed bytes: for each
such sample, only the restart intervals that hold its crop box and the upsampling margin
(`jpeg.needed_intervals`), with its tables and descriptor. Per run:

1. one split of the samples over the DPUs for both stages: the driver's split
   (`DpuDriver.plan_chunks`, pim_dpu_split) of each sample's transform work plus its decode
   work (`decode_work`: blocks and pixels, in the same instruction units);
2. the JPEG chunks, one per DPU with that DPU's encoded samples (`jpeg._Chunk`), laid out so
   that the decoded boxes land past the transform's chunk: MRAM per DPU, from
   DPU_MRAM_HEAP_POINTER,

       [0, keep_from)         the JPEG chunk (stage 1), then the transform's chunk (stage 2),
                              written over the consumed JPEG input
       [keep_from, keep_to)   the decoder's statuses and each sample's decoded box rows
                              (round8(width x channels) bytes apart): stage 1's output,
                              stage 2's sources (never sent to or from the host)
       [keep_to, ...)         the decoder's component planes (stage 1's scratch), then the
                              transform's statuses and outputs (stage 2)

3. stage 1 (`DpuDriver.run_stage`): dpu_load of jpeg_decode, push, launch, gather the
   statuses; a file whose data the DPU found corrupt raises DecodeError naming it and the
   DPU, a refused chunk DpuKernelError. A file the kernel stopped because a block left the
   range where libjpeg-turbo's C and SIMD IDCTs agree (jpeg.RANGE) is decoded on the host,
   marked (`EncodedImage.host_reason`, the loader counts it as a decode fallback) and rides
   as pixels; the run's stage 1 is then planned and run again without it (rare: such files
   are corrupt or crafted, docs/dpu.md "Exact on every file it takes");
4. stage 2 (`DpuDriver.submit`): dpu_load of crop_resize, its chunk pointing at the decoded
   rows (`MramSource`), the launch and the gather of the outputs, queued as usual.

Samples the host decoded ride in the same run as pixels, as in every other run.
"""
from __future__ import annotations

import numpy as np

from pimloader import decode
from pimloader.decode.baseline import UnsupportedJpeg
from pimloader.decode.errors import DecodeError

from ..base import EncodedImage, KernelRun
from . import jpeg
from .driver import DpuBatch, DpuDriver, MramSource, build_kernel

# Nominal instructions of the decoder (docs/dpu.md, "Instructions, counted on the proxy ISA"):
# Huffman 1,566 + IDCT 2,528 (its exact-range checks included) + the rest 157 per 8x8 block
# decoded; upsampling 43 + colour 45 per output pixel. Only their ratio to the transform's
# work (pim_dpu_row_work) matters.
INSTRUCTIONS_PER_BLOCK = 4_251
INSTRUCTIONS_PER_PIXEL = 88
NOT_JPEG = "not a JPEG"
CHANNELS = "channels"             # a grey JPEG for RGB outputs, or the reverse
UNREADABLE = "unreadable header"  # the DPU side's parse refused it: the host decides


def decode_work(image) -> int:
    """Estimated decode instructions of a prepared image: the blocks of the intervals sent
    (their MCUs x blocks per MCU) and the box's pixels."""
    layout = image.layout
    per = layout.restart_mcus or layout.total_mcus
    mcus = sum(min(per, layout.total_mcus - i * per) for i in image.chosen)
    blocks = mcus * sum(c.h * c.v for c in layout.components)
    return INSTRUCTIONS_PER_BLOCK * blocks + INSTRUCTIONS_PER_PIXEL * image.box[2] * image.box[3]


def _round8(n: int) -> int:
    return (n + 7) & ~7


class DecodeStage:
    """The JPEG decoder as the stage before the transform on `driver`'s DPUs."""

    def __init__(self, driver: DpuDriver, emulated: bool,
                 max_mcus_without_restarts: int = jpeg.DEFAULT_MAX_MCUS_WITHOUT_RESTARTS) -> None:
        self.driver = driver
        self.max_mcus_without_restarts = max_mcus_without_restarts
        self.binary = build_kernel(driver.nr_tasklets, driver.stack_bytes, emulated, source=jpeg.KERNEL_SOURCE)
        self.batch = 0
        self.last_work: list = []   # per encoded sample of the last run: the decoder's work counts
        self.last_transfer = {"to_dpus": 0, "from_dpus": 0}   # the last decode stage's bytes

    def refusal(self, image: EncodedImage) -> str:
        """"" when the DPUs decode `image` (then `image.prepared` holds its structure), else
        why the host must."""
        if not decode.is_jpeg(image.data):
            return NOT_JPEG
        try:
            prepared = jpeg.prepare_image(image.data, image.name, image.box,
                                          max_mcus_without_restarts=self.max_mcus_without_restarts)
        except UnsupportedJpeg as unsupported:
            return unsupported.reason
        except DecodeError:
            return UNREADABLE
        if prepared.channels != image.channels:
            return CHANNELS
        image.prepared = prepared
        return ""

    def submit(self, run: KernelRun) -> DpuBatch:
        """Both stages of `run` (the decode now, the transform queued); its handle's wait()
        writes the rows."""
        arguments = run.kernel_arguments()
        sources = list(run.sources)
        while any(isinstance(source, EncodedImage) for source in sources):
            batch = self._both_stages(sources, run, arguments)
            if batch is not None:
                return batch
        return self.driver.submit(sources, run.boxes, run.size, run.out, **arguments)

    def _both_stages(self, sources: list, run: KernelRun, arguments: dict):
        """Stage 1 of the encoded `sources`, then stage 2 queued: its handle. None when the
        kernel stopped some image for its IDCT range: those are then host-decoded pixels in
        `sources`, for the caller to plan the run again."""
        images = {i: self._prepared(source) for i, source in enumerate(sources) if isinstance(source, EncodedImage)}
        planned = [_in_mram(images[i], 0) if i in images else source for i, source in enumerate(sources)]
        extra = [decode_work(images[i]) if i in images else 0 for i in range(len(planned))]
        first, chunk_bytes = self.driver.plan_chunks(planned, run.boxes, run.size, run.out, extra_work=extra,
                                                     **arguments)
        owned = [[i for i in range(first[d], first[d + 1]) if i in images] for d in range(self.driver.nr_dpus)]
        chunks = [jpeg._Chunk([images[i] for i in mine], self.driver.nr_tasklets, self.driver.stack_bytes)
                  for mine in owned]
        keep_from = _round8(max(max(c.in_bytes for c in chunks), max(chunk_bytes)))
        out_bytes = _round8(max(c.out_bytes for c in chunks))
        statuses = self._decode(chunks, keep_from, out_bytes)
        stopped = [owned[dpu][k] for dpu, k in self._check(statuses, chunks)]
        if stopped:
            for i in stopped:
                encoded = sources[i]
                encoded.host_reason = jpeg.RANGE_REASON
                sources[i] = decode.decode_jpeg(encoded.data, encoded.box, channels=encoded.channels,
                                                name=encoded.name)
            return None
        for mine, chunk in zip(owned, chunks):
            for i, at in zip(mine, chunk.out_offsets):
                planned[i] = _in_mram(images[i], at)
        return self.driver.submit(planned, run.boxes, run.size, run.out, extra_work=extra,
                                  keep=(keep_from, keep_from + out_bytes), **arguments)

    def _prepared(self, image: EncodedImage):
        if image.prepared is None and self.refusal(image):
            raise ValueError(f"{image.name}: the DPUs cannot decode this image ({self.refusal(image)})")
        return image.prepared

    def _decode(self, chunks: list, keep_from: int, out_bytes: int) -> np.ndarray:
        """Stage 1: the chunks pushed and decoded; returns each DPU's gathered statuses."""
        self.batch += 1
        packed = [chunk.pack(keep_from, out_bytes, self.batch, 0) for chunk in chunks]
        table = np.zeros((len(packed), _round8(max(p.nbytes for p in packed))), np.uint8)
        for d, chunk_bytes in enumerate(packed):
            table[d, :chunk_bytes.nbytes] = chunk_bytes
        status_bytes = _round8((max(len(c.images) for c in chunks) + 1) * jpeg.STATUS.itemsize)
        self.last_transfer = {"to_dpus": table.nbytes, "from_dpus": table.shape[0] * status_bytes}
        return self.driver.run_stage(self.binary, table, keep_from, status_bytes)

    def _check(self, statuses: np.ndarray, chunks: list) -> list:
        """Every DPU's statuses: a refused chunk or image is a DpuKernelError naming the DPU,
        a file whose data is corrupt a DecodeError naming it and the DPU. Returns (DPU, k)
        of each image k the kernel stopped for its IDCT range (jpeg.RANGE)."""
        self.last_work, stopped = [], []
        for dpu, chunk in enumerate(chunks):
            names = [image.name for image in chunk.images]
            jpeg.check_status(jpeg.image_status(statuses[dpu], None, self.batch), self.batch, dpu, names, False)
            for k, image in enumerate(chunk.images):
                status = jpeg.check_status(jpeg.image_status(statuses[dpu], k, self.batch), self.batch, dpu,
                                           [image.name], True)
                error = jpeg.data_error(status, image.name, dpu)
                if error is not None:
                    raise error
                if int(status["code"]) == jpeg.RANGE:
                    stopped.append((dpu, k))
                self.last_work.append({field: int(status[field]) for field in jpeg.WORK_FIELDS})
        return stopped


def _in_mram(image, offset: int) -> MramSource:
    """Where the decoder leaves `image`'s box: rows of round8(width x channels) bytes."""
    _, _, height, width = image.box
    return MramSource(offset, height, width, image.channels, image.pitch)
