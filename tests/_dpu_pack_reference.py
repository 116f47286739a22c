"""The Python packing of DPU JPEG chunks that csrc/jpeg_layout.c's helpers replaced (the
`_Image` and `_Chunk` of pimloader/backends/dpu/jpeg.py as of main 7a163cf, unchanged but
for their imports, over the reference parse): the oracle of tests/test_jpeg_layout.py. The
packed bytes must be the same."""
from __future__ import annotations

from typing import List

import numpy as np

from pimloader.backends.dpu.jpeg import (HEADER, IMAGE, INTERVAL, MAGIC, MRAM_BUDGET, STATUS, TABLES, VERSION,
                                         _check_box, _round8, arena_bytes, check_decodable, huffman_slots,
                                         needed_intervals)

from _baseline_reference import lookup_table, parse_baseline


class _Image:
    """One file (or a box of it) as the DPU takes it: its structure and descriptor pieces."""

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
        self.data_bytes = sum(lay.intervals[i][1] - lay.intervals[i][0] for i in self.chosen)

    def work(self) -> int:
        """An estimate of its decoding work: compressed bytes and output pixels."""
        return self.data_bytes * 8 + self.box[2] * self.box[3]

    def planes(self) -> List[tuple]:
        """(plane_w, plane_h) of each component."""
        lay = self.layout
        return [(lay.mcus_x * c.h * 8, lay.mcus_y * c.v * 8) for c in lay.components]

    def tables(self) -> np.ndarray:
        t = np.zeros((), TABLES)
        for ci, comp in enumerate(self.layout.components):
            t["quant"][ci] = comp.quant
        for key, slot in self.slots.items():
            bits, values = self.layout.huffman[key]
            for field, value in lookup_table(bits, values, self.name).items():
                t["huff"][slot][field] = value
        return t

    def descriptor(self, first_interval: int, tables_offset: int, out_offset: int, plane_offsets) -> np.ndarray:
        lay = self.layout
        d = np.zeros((), IMAGE)
        top, left, height, width = self.box
        for key, value in (("width", lay.width), ("height", lay.height), ("n_comp", self.channels),
                           ("mcus_x", lay.mcus_x), ("mcus_y", lay.mcus_y), ("first_interval", first_interval),
                           ("n_intervals", len(self.chosen)), ("tables_offset", tables_offset),
                           ("out_offset", out_offset), ("out_pitch", self.pitch), ("box_top", top),
                           ("box_left", left), ("box_h", height), ("box_w", width),
                           ("restart_mcus", lay.restart_mcus or lay.total_mcus)):
            d[key] = value
        for ci, (comp, (plane_w, plane_h), plane_off) in enumerate(zip(lay.components, self.planes(), plane_offsets)):
            hx, vx = lay.max_h // comp.h, lay.max_v // comp.v
            comp_w = -(-lay.width * comp.h // lay.max_h)    # libjpeg's downsampled_width
            comp_h = -(-lay.height * comp.v // lay.max_v)
            fancy = comp_w > 2 if hx == 2 else vx == 2     # jdsample.c's choice of upsampler
            c = d["comp"][ci]
            for key, value in (("h", comp.h), ("v", comp.v), ("hx", hx), ("vx", vx), ("fancy", int(fancy)),
                               ("dc", self.slots[comp.dc]), ("ac", self.slots[comp.ac]),
                               ("plane_off", plane_off), ("plane_w", plane_w), ("plane_h", plane_h),
                               ("comp_w", comp_w), ("comp_h", comp_h)):
                c[key] = value
        return d

    def intervals(self, data_offset: int) -> np.ndarray:
        """The chosen intervals' descriptors, their bytes packed from data_offset on."""
        lay = self.layout
        out = np.zeros(len(self.chosen), INTERVAL)
        per = lay.restart_mcus or lay.total_mcus
        for k, i in enumerate(self.chosen):
            start, end = lay.intervals[i]
            out[k] = (i * per, min(per, lay.total_mcus - i * per), data_offset, end - start)
            data_offset += end - start
        return out

    def interval_bytes(self) -> np.ndarray:
        raw = np.frombuffer(self.data, np.uint8)
        return np.concatenate([raw[self.layout.intervals[i][0]:self.layout.intervals[i][1]] for i in self.chosen])


def _put(buf: np.ndarray, at: int, array: np.ndarray) -> None:
    raw = np.frombuffer(array.tobytes(), np.uint8)
    buf[at:at + raw.nbytes] = raw


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
            ivs = im.intervals(self.data_offsets[i])
            _put(buf, o["intervals_off"] + first * INTERVAL.itemsize, ivs)
            _put(buf, o["tables_off"] + tables_offset, im.tables())
            _put(buf, self.data_offsets[i], im.interval_bytes())
            self.out_offsets.append(out_pos)
            out_pos += im.out_bytes
            first += len(ivs)
        if plane_pos > MRAM_BUDGET:
            names = ", ".join(str(im.name) for im in self.images)
            raise ValueError(f"images {names} need {plane_pos} bytes of MRAM on one DPU, more than "
                             f"{MRAM_BUDGET}: use more DPUs")
        header = np.zeros((), HEADER)
        for key, value in (("magic", MAGIC), ("version", VERSION), ("n_images", len(self.images)),
                           ("in_bytes", self.in_bytes), ("out_off", out_off), ("out_bytes", out_bytes),
                           ("work_off", work_off), ("nr_tasklets", self.nr_tasklets),
                           ("arena_bytes", self.arena), ("batch_id", batch_id), ("debug", debug), *o.items()):
            header[key] = value
        _put(buf, 0, header)
        return buf
