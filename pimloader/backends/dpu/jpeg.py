"""JPEG decoding on DPUs: the host side of dpu_src/jpeg_decode.c (docs/dpu.md, "JPEG decode
on DPUs").

The host reads each file's structure (`pimloader.decode.baseline.parse_baseline`: frame,
tables, the byte ranges of the restart intervals), splits the images over the DPUs by
estimated work, packs one chunk per DPU in include/pim_jpeg.h's layout (the entropy-coded
bytes travel as they are in the file), pushes the chunks to MRAM with libdpu's
`dpu_prepare_xfer` / `dpu_push_xfer`, launches, and gathers the statuses and RGB (or grey)
rows with one `dpu_push_xfer(FROM_DPU)`. Pixels are bit-identical to libjpeg-turbo's
default decode (Pillow, `pimloader.decode.decode_jpeg`).

`fallback_reason(data)` says whether a file can go to the DPUs, and if not why (a key of
`pimloader.decode.baseline.REASONS`), so that a caller decodes it on the host and counts it.
A file whose blocks leave the range where libjpeg-turbo's C and SIMD IDCTs agree is found
only while decoding: the kernel stops it with status RANGE and the host decodes it
(`RANGE_REASON`, docs/dpu.md "Exact on every file it takes").

Runs on pimloader's libdpu emulator (`pimloader.backends.dpu.emulator.DpuSet`, the libdpu
calls through cffi). Its speed is not DPU speed.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence

import numpy as np

from pimloader._jpeg_layout import ffi, lib
from pimloader._native_sources import native_source_root
from pimloader.decode.baseline import BaselineJpeg, UnsupportedJpeg, lookup_table_into, parse_baseline
from pimloader.decode.errors import DecodeError
from pimloader.options import NR_TASKLETS

from .driver import DEFAULT_STACK_BYTES, build_kernel
from .jpeg_status import (DATA_ERRORS, ERROR_NAMES, KERNEL_ERRORS, RANGE, RANGE_REASON, STATUS, STATUS_OK,  # noqa: F401
                          WORK_FIELDS, check_status, data_error, host_decode, image_status)

KERNEL_SOURCE = os.path.join(native_source_root(), "dpu_src", "jpeg_decode.c")

MAGIC, VERSION = 0x50494A44, 1
WRAM_BYTES, WRAM_RESERVE, GLOBALS = 65536, 2048, 8192
MRAM_BUDGET = 66060288
DEBUG_HALT = 1
DEFAULT_MAX_MCUS_WITHOUT_RESTARTS = 256   # 256 x 256 pixels at 4:2:0

_U4 = "<u4"
HEADER = np.dtype([(f, _U4) for f in (
    "magic", "version", "n_images", "n_intervals", "images_off", "intervals_off", "tables_off",
    "data_off", "in_bytes", "out_off", "out_bytes", "work_off", "nr_tasklets", "arena_bytes",
    "batch_id", "debug")])
COMPONENT = np.dtype([(f, _U4) for f in (
    "h", "v", "hx", "vx", "fancy", "dc", "ac", "plane_off", "plane_w", "plane_h", "comp_w",
    "comp_h")] + [("pad", _U4, (4,))])
IMAGE = np.dtype([(f, _U4) for f in (
    "width", "height", "n_comp", "mcus_x", "mcus_y", "first_interval", "n_intervals",
    "tables_offset", "out_offset", "out_pitch", "box_top", "box_left", "box_h", "box_w", "restart_mcus")]
                 + [("pad", _U4), ("comp", COMPONENT, (3,))])
INTERVAL = np.dtype([(f, _U4) for f in ("first_mcu", "n_mcus", "data_offset", "data_bytes")])
HUFF = np.dtype([("maxcode", "<i4", (18,)), ("valoffset", "<i4", (18,)), ("look", "<u2", (256,)),
                 ("huffval", "u1", (256,))])
TABLES = np.dtype([("quant", "<u2", (3, 64)), ("huff", HUFF, (4,))])
_ZEROS = {dtype: dict.fromkeys(dtype.names, 0) for dtype in (HEADER, IMAGE, COMPONENT)}   # for _record

def arena_bytes(nr_tasklets: int, stack_bytes: int) -> int:
    """pim_jpeg_arena_bytes: the WRAM of each tasklet's arena."""
    used = WRAM_RESERVE + GLOBALS + nr_tasklets * stack_bytes
    return 0 if used >= WRAM_BYTES else ((WRAM_BYTES - used) // nr_tasklets) & ~7


def _round8(n: int) -> int:
    return (n + 7) & ~7


def fallback_reason(data, name=None, *, max_mcus_without_restarts: int = DEFAULT_MAX_MCUS_WITHOUT_RESTARTS
                    ) -> Optional[str]:
    """None when the DPUs can decode this file, else why not (a key of REASONS). A corrupt
    file raises DecodeError naming it."""
    try:
        check_decodable(parse_baseline(data, name), name, max_mcus_without_restarts)
    except UnsupportedJpeg as unsupported:
        return unsupported.reason
    return None


def check_decodable(layout: BaselineJpeg, name, max_mcus_without_restarts: int) -> None:
    """UnsupportedJpeg unless the DPU kernel takes a file of this structure."""
    if layout.restart_mcus == 0 and layout.total_mcus > max_mcus_without_restarts:
        raise UnsupportedJpeg("no restarts", name, f"{layout.total_mcus} MCUs in one interval "
                                                   f"(at most {max_mcus_without_restarts})")
    if len(huffman_slots(layout)) > 4:
        raise UnsupportedJpeg("huffman tables", name, f"{len(huffman_slots(layout))} tables in the scan")


def huffman_slots(layout: BaselineJpeg) -> dict:
    """The scan's Huffman tables, (class, id) -> their place in pim_jpeg_tables_t.huff."""
    used = sorted({key for c in layout.components for key in (c.dc, c.ac)})
    return {key: slot for slot, key in enumerate(used)}


class _Image:
    """One file (or a box of it) as the DPU takes it: its structure and descriptor pieces.
    The intervals' descriptors and bytes are written by csrc/jpeg_layout.c."""

    def __init__(self, data: bytes, name, max_mcus_without_restarts: int, box=None) -> None:
        self.data, self.name = data, name
        self.layout = lay = parse_baseline(data, name)
        check_decodable(lay, name, max_mcus_without_restarts)
        self.box = _check_box(box, lay.height, lay.width, name)
        self.channels = len(lay.components)
        self.pitch = _round8(self.box[3] * self.channels)
        self.out_bytes = self.box[2] * self.pitch
        self.slots = huffman_slots(lay)
        self.chosen = needed_intervals(lay, self.box)
        self._spans = _spans(lay)
        self._chosen = np.asarray(self.chosen, np.int64)
        try:
            if self.chosen and min(self.chosen) < 0:
                raise IndexError("a negative index")
            spans = self._spans[self._chosen]
        except IndexError:
            raise IndexError(f"{name}: intervals {self.chosen} chosen from {len(self._spans)}") from None
        if len(spans) and (spans[:, 1].max() > len(data) or (spans[:, 1] < spans[:, 0]).any()):
            raise ValueError(f"{name}: the layout's intervals are not byte ranges of its {len(data)}-byte file")
        self.data_bytes = int((spans[:, 1] - spans[:, 0]).sum())

    def work(self) -> int:
        """An estimate of its decoding work: compressed bytes and output pixels."""
        return self.data_bytes * 8 + self.box[2] * self.box[3]

    def planes(self) -> List[tuple]:
        """(plane_w, plane_h) of each component."""
        lay = self.layout
        return [(lay.mcus_x * c.h * 8, lay.mcus_y * c.v * 8) for c in lay.components]

    def tables(self) -> np.ndarray:
        if self.layout.headers is not None:   # from the C parse: built in one call
            return self._native_tables()
        t = np.zeros((), TABLES)
        for ci, comp in enumerate(self.layout.components):
            t["quant"][ci] = comp.quant
        huff = t["huff"]
        for key, slot in self.slots.items():
            bits, values = self.layout.huffman[key]
            lookup_table_into(bits, values, huff[slot:slot + 1], self.name)
        return t

    def _native_tables(self) -> np.ndarray:
        if len(self.layout.headers) != ffi.sizeof("pim_jpeg_headers_t"):
            raise ValueError(f"{self.name}: the layout's headers are {len(self.layout.headers)} bytes, not a "
                             f"pim_jpeg_headers_t ({ffi.sizeof('pim_jpeg_headers_t')})")
        t = np.zeros((), TABLES)
        keys = sorted(self.slots, key=self.slots.get)
        slots = np.array([4 * table_class + index for table_class, index in keys], np.uint32)
        if lib.pim_jpeg_pack_tables(ffi.from_buffer("pim_jpeg_headers_t *", self.layout.headers),
                                    ffi.from_buffer("uint32_t[]", slots), len(slots),
                                    ffi.cast("pim_jpeg_tables_t *", ffi.from_buffer(t, require_writable=True))):
            raise ValueError(f"{self.name}: Huffman tables {keys} are not the layout's")
        return t

    def descriptor(self, first_interval: int, tables_offset: int, out_offset: int, plane_offsets) -> np.ndarray:
        lay = self.layout
        top, left, height, width = self.box
        max_h, max_v = lay.max_h, lay.max_v
        comps = []
        for comp, (plane_w, plane_h), plane_off in zip(lay.components, self.planes(), plane_offsets):
            hx, vx = max_h // comp.h, max_v // comp.v
            comp_w = -(-lay.width * comp.h // max_h)    # libjpeg's downsampled_width
            comp_h = -(-lay.height * comp.v // max_v)
            fancy = comp_w > 2 if hx == 2 else vx == 2     # jdsample.c's choice of upsampler
            comps.append(_record(_ZEROS[COMPONENT], h=comp.h, v=comp.v, hx=hx, vx=vx, fancy=int(fancy),
                                 dc=self.slots[comp.dc], ac=self.slots[comp.ac], plane_off=plane_off,
                                 plane_w=plane_w, plane_h=plane_h, comp_w=comp_w, comp_h=comp_h))
        comps += [_record(_ZEROS[COMPONENT])] * (3 - len(comps))
        return np.array(_record(_ZEROS[IMAGE], width=lay.width, height=lay.height, n_comp=self.channels,
                                mcus_x=lay.mcus_x, mcus_y=lay.mcus_y, first_interval=first_interval,
                                n_intervals=len(self.chosen), tables_offset=tables_offset, out_offset=out_offset,
                                out_pitch=self.pitch, box_top=top, box_left=left, box_h=height, box_w=width,
                                restart_mcus=lay.restart_mcus or lay.total_mcus, comp=comps), IMAGE)

    def intervals(self, data_offset: int) -> np.ndarray:
        """The chosen intervals' descriptors, their bytes packed from data_offset on."""
        out = np.zeros(len(self.chosen), INTERVAL)
        self._pack(ffi.cast("pim_jpeg_interval_t *", ffi.from_buffer(out)), data_offset, ffi.NULL)
        return out

    def interval_bytes(self) -> np.ndarray:
        out = np.empty(self.data_bytes, np.uint8)
        self._pack(ffi.new("pim_jpeg_interval_t[]", len(self.chosen)), 0, ffi.from_buffer(out))
        return out

    def pack_intervals(self, chunk: np.ndarray, descriptors_at: int, data_offset: int) -> int:
        """`intervals(data_offset)` written at descriptors_at of the chunk and `interval_bytes()`
        at data_offset; the number of intervals."""
        n = len(self.chosen)
        if descriptors_at + n * INTERVAL.itemsize > chunk.nbytes or data_offset + self.data_bytes > chunk.nbytes:
            raise ValueError(f"{self.name}: {n} intervals at {descriptors_at} and {self.data_bytes} bytes at "
                             f"{data_offset} do not fit a chunk of {chunk.nbytes}")
        base = ffi.from_buffer("uint8_t[]", chunk, require_writable=True)
        self._pack(ffi.cast("pim_jpeg_interval_t *", base + descriptors_at), data_offset, base + data_offset)
        return n

    def _pack(self, descriptors, data_offset: int, data) -> None:
        lay = self.layout
        lib.pim_jpeg_pack_intervals(ffi.from_buffer("uint8_t[]", self.data), ffi.from_buffer("uint64_t[]", self._spans),
                                    ffi.from_buffer("int64_t[]", self._chosen), len(self._chosen),
                                    lay.restart_mcus or lay.total_mcus, lay.total_mcus, data_offset, descriptors, data)


def _record(zeros: dict, **values) -> tuple:
    """A record as a tuple in its fields' order, from `zeros` (`_ZEROS[dtype]`, every field
    of a structured dtype at 0) and the values given."""
    record = {**zeros, **values}
    if len(record) != len(zeros):
        raise KeyError(f"{sorted(set(values) - set(zeros))} are not fields of {tuple(zeros)}")
    return tuple(record.values())


def _spans(layout: BaselineJpeg) -> np.ndarray:
    """The layout's intervals as a uint64 [n, 2] array (parse_baseline keeps one)."""
    if layout.spans is not None:
        return np.ascontiguousarray(layout.spans, np.uint64)
    return np.array(layout.intervals, np.uint64).reshape(-1, 2)


def _check_box(box, height: int, width: int, name):
    """(top, left, height, width) inside the image; None: the whole image."""
    if box is None:
        return (0, 0, height, width)
    top, left, h, w = (int(v) for v in box)
    if h < 1 or w < 1 or top < 0 or left < 0 or top + h > height or left + w > width:
        raise ValueError(f"{name}: box {tuple(box)} (top, left, height, width) is not inside the "
                         f"{height}x{width} image")
    return (top, left, h, w)


def needed_intervals(layout: BaselineJpeg, box) -> List[int]:
    """The restart intervals holding every MCU the box's pixels need: the box's own, and a
    margin of 2 pixels (one chroma sample: the upsampling filters' reach) around it."""
    top, left, height, width = box
    margin = 2 if len(layout.components) > 1 else 0
    mcu_h, mcu_w = 8 * layout.max_v, 8 * layout.max_h
    rows = range(max(0, top - margin) // mcu_h, min(layout.height - 1, top + height - 1 + margin) // mcu_h + 1)
    first_col = max(0, left - margin) // mcu_w
    last_col = min(layout.width - 1, left + width - 1 + margin) // mcu_w
    per = layout.restart_mcus or layout.total_mcus
    chosen = set()
    for row in rows:
        chosen.update(range((row * layout.mcus_x + first_col) // per, (row * layout.mcus_x + last_col) // per + 1))
    return sorted(chosen)


def _put(buf: np.ndarray, at: int, array: np.ndarray) -> None:
    raw = np.frombuffer(array.tobytes(), np.uint8)
    buf[at:at + raw.nbytes] = raw


def _split(works: Sequence[int], parts: int) -> List[range]:
    """Contiguous runs of images, about equal in summed work, one per DPU (some empty)."""
    total = float(sum(works)) or 1.0
    acc, owner = 0.0, []
    for w in works:
        owner.append(min(parts - 1, int((acc + w / 2) / total * parts)))
        acc += w
    runs, start = [], 0
    for p in range(parts):
        end = start
        while end < len(owner) and owner[end] == p:
            end += 1
        runs.append(range(start, end))
        start = end
    return runs


class _Chunk:
    """One DPU's images packed in include/pim_jpeg.h's layout."""

    def __init__(self, images: List[_Image], nr_tasklets: int, stack_bytes: int) -> None:
        self.images = images
        n = len(images)
        n_intervals = sum(len(im.layout.intervals) for im in images)
        images_off = HEADER.itemsize
        intervals_off = images_off + n * IMAGE.itemsize
        tables_off = intervals_off + n_intervals * INTERVAL.itemsize
        data_off = tables_off + n * TABLES.itemsize
        self.data_offsets, pos = [], data_off
        for im in images:
            self.data_offsets.append(pos)
            pos = _round8(pos + im.data_bytes)
        self.in_bytes = pos
        self.offsets = dict(images_off=images_off, intervals_off=intervals_off, tables_off=tables_off,
                            data_off=data_off, n_intervals=n_intervals)
        self.out_bytes = (n + 1) * STATUS.itemsize + sum(im.out_bytes for im in images)
        self.nr_tasklets, self.arena = nr_tasklets, arena_bytes(nr_tasklets, stack_bytes)

    def pack(self, out_off: int, out_bytes: int, batch_id: int, debug: int) -> np.ndarray:
        o = self.offsets
        work_off = _round8(out_off + out_bytes)
        buf = np.zeros(self.in_bytes, np.uint8)
        out_pos, plane_pos, first = out_off + (len(self.images) + 1) * STATUS.itemsize, work_off, 0
        self.out_offsets = []
        for i, im in enumerate(self.images):
            planes = []
            for plane_w, plane_h in im.planes():
                planes.append(plane_pos)
                plane_pos = _round8(plane_pos + plane_w * plane_h)
            tables_offset = i * TABLES.itemsize
            desc = im.descriptor(first, tables_offset, out_pos, planes)
            _put(buf, o["images_off"] + i * IMAGE.itemsize, desc)
            n_intervals = im.pack_intervals(buf, o["intervals_off"] + first * INTERVAL.itemsize, self.data_offsets[i])
            _put(buf, o["tables_off"] + tables_offset, im.tables())
            self.out_offsets.append(out_pos)
            out_pos += im.out_bytes
            first += n_intervals
        if plane_pos > MRAM_BUDGET:
            names = ", ".join(str(im.name) for im in self.images)
            raise ValueError(f"images {names} need {plane_pos} bytes of MRAM on one DPU, more than "
                             f"{MRAM_BUDGET}: use more DPUs")
        header = _record(_ZEROS[HEADER], magic=MAGIC, version=VERSION, n_images=len(self.images),
                         in_bytes=self.in_bytes, out_off=out_off, out_bytes=out_bytes, work_off=work_off,
                         nr_tasklets=self.nr_tasklets, arena_bytes=self.arena, batch_id=batch_id, debug=debug, **o)
        _put(buf, 0, np.array(header, HEADER))
        return buf


def prepare_image(data, name, box=None, *,
                  max_mcus_without_restarts: int = DEFAULT_MAX_MCUS_WITHOUT_RESTARTS) -> _Image:
    """A file (or its box) as the DPU decoder takes it: parsed, checked (UnsupportedJpeg with
    its reason when the DPUs cannot decode it; DecodeError naming a corrupt file) and its
    restart intervals chosen. What `_Chunk` packs."""
    return _Image(bytes(data), name, max_mcus_without_restarts, box)


class DpuJpegDecoder:
    """DPUs decoding JPEGs: `with DpuJpegDecoder(nr_dpus=4) as dec: images = dec.decode(files)`.

    `decode(files, names, boxes)` returns one uint8 array per file: (h, w, 3) RGB for YCbCr
    JPEGs, (h, w) for greyscale ones, bit-identical to libjpeg-turbo's default decode of the
    whole image, or of its box (top, left, height, width) cropped from it: for a box, only the
    restart intervals that hold the box's MCUs and their upsampling context travel and are
    decoded. A file the DPUs cannot take raises `UnsupportedJpeg` (with its `reason`) before
    anything runs: ask `fallback_reason` first to route files; a corrupt one raises
    `DecodeError` naming it. A file the kernel stops for its IDCT range (RANGE) is decoded
    on the host (pimloader.decode.decode_jpeg, the same pixels); `last_host_decoded` lists
    those of the last call. Close it (or use `with`): DPU sets are not left to the garbage
    collector."""

    def __init__(self, nr_dpus: int = 1, nr_tasklets: int = NR_TASKLETS, *, profile: str = "backend=emulator",
                 stack_bytes: int = DEFAULT_STACK_BYTES,
                 max_mcus_without_restarts: int = DEFAULT_MAX_MCUS_WITHOUT_RESTARTS) -> None:
        from .emulator import HEAP_POINTER_NAME, DpuSet
        if not 1 <= int(nr_tasklets) <= 24:
            raise ValueError(f"nr_tasklets must be 1..24, got {nr_tasklets}")
        if arena_bytes(int(nr_tasklets), int(stack_bytes)) < 1024:
            raise ValueError(f"{nr_tasklets} tasklets with {stack_bytes}-byte stacks leave too little WRAM")
        self.nr_tasklets, self.stack_bytes = int(nr_tasklets), int(stack_bytes)
        self.max_mcus_without_restarts = int(max_mcus_without_restarts)
        self.binary = build_kernel(self.nr_tasklets, self.stack_bytes, True, source=KERNEL_SOURCE)
        self._symbol = HEAP_POINTER_NAME
        self.dpus = DpuSet(int(nr_dpus), profile)
        try:
            self.dpus.load(self.binary)
        except BaseException:
            self.dpus.close()
            raise
        self.nr_dpus = self.dpus.nr_dpus
        self._batch = 0
        self.last_work: list = []   # per image of the last decode: the kernel's work counts
        self.last_host_decoded: list = []   # indices of the last decode's images stopped for RANGE

    def close(self) -> None:
        self.dpus.close()

    def __enter__(self) -> "DpuJpegDecoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fallback_reason(self, data, name=None) -> Optional[str]:
        return fallback_reason(data, name, max_mcus_without_restarts=self.max_mcus_without_restarts)

    def decode(self, files: Sequence, names: Optional[Sequence] = None, boxes: Optional[Sequence] = None, *,
               debug: int = 0) -> List[np.ndarray]:
        results = self.decode_each(files, names, boxes, debug=debug)
        for result in results:
            if isinstance(result, DecodeError):
                raise result
        return results

    def decode_each(self, files: Sequence, names: Optional[Sequence] = None, boxes: Optional[Sequence] = None,
                    *, debug: int = 0) -> list:
        """As `decode`, but a file whose data the DPU found corrupt gives its DecodeError in
        its place of the list instead of raising (the others decode as usual)."""
        names = list(names) if names is not None else [f"image {i}" for i in range(len(files))]
        boxes = list(boxes) if boxes is not None else [None] * len(files)
        if not len(files) == len(names) == len(boxes):
            raise ValueError(f"{len(files)} files, {len(names)} names and {len(boxes)} boxes")
        images = [_Image(bytes(f), n, self.max_mcus_without_restarts, b) for f, n, b in zip(files, names, boxes)]
        if not images:
            return []
        runs = _split([im.work() for im in images], self.nr_dpus)
        chunks = [_Chunk([images[i] for i in run], self.nr_tasklets, self.stack_bytes) for run in runs]
        out_off = _round8(max(c.in_bytes for c in chunks))
        gathered = self._run(chunks, out_off, debug)
        results: list = [None] * len(images)
        self.last_work = [None] * len(images)
        self.last_host_decoded = []
        for dpu, (run, chunk) in enumerate(zip(runs, chunks)):
            self._check_status(dpu, gathered[dpu], chunk, None)
            for k, i in enumerate(run):
                status = self._check_status(dpu, gathered[dpu], chunk, k)
                self.last_work[i] = {f: int(status[f]) for f in WORK_FIELDS}
                self.last_work[i]["pixels"] = images[i].box[2] * images[i].box[3]
                error = data_error(status, images[i].name, dpu)
                if int(status["code"]) == RANGE:
                    self.last_host_decoded.append(i)
                    try:
                        results[i] = host_decode(images[i])
                    except DecodeError as corrupt:
                        results[i] = corrupt
                else:
                    results[i] = error if error is not None else self._pixels(gathered[dpu], chunk, k, out_off)
        return results

    def _run(self, chunks: List["_Chunk"], out_off: int, debug: int) -> np.ndarray:
        """Push the chunks, launch, gather every DPU's statuses and pixels."""
        out_bytes = _round8(max(c.out_bytes for c in chunks))
        self._batch += 1
        packed = [c.pack(out_off, out_bytes, self._batch, debug) for c in chunks]
        length = max(p.nbytes for p in packed)
        self.dpus.push(self._symbol, [np.concatenate([p, np.zeros(length - p.nbytes, np.uint8)]) for p in packed])
        self.dpus.launch()
        return self.dpus.gather(self._symbol, out_bytes, offset=out_off)

    def _check_status(self, dpu: int, out: np.ndarray, chunk: "_Chunk", k: Optional[int]):
        """The chunk's status (k None) or image k's, checked (check_status)."""
        names = [im.name for im in (chunk.images if k is None else [chunk.images[k]])]
        return check_status(image_status(out, k, self._batch), self._batch, dpu, names, k is not None)

    def _pixels(self, out: np.ndarray, chunk: "_Chunk", k: int, out_off: int) -> np.ndarray:
        im = chunk.images[k]
        start = chunk.out_offsets[k] - out_off
        _, _, height, width = im.box
        rows = out[start:start + im.out_bytes].reshape(height, im.pitch)
        shape = (height, width) + ((3,) if im.channels == 3 else ())
        return np.ascontiguousarray(rows[:, :width * im.channels]).reshape(shape)


__all__ = ["DpuJpegDecoder", "fallback_reason", "check_decodable", "needed_intervals", "arena_bytes",
           "prepare_image", "image_status", "check_status", "data_error", "host_decode", "RANGE_REASON"]
