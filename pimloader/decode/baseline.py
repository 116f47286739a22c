"""The structure of a baseline JPEG, read on the host for decoders that work from it (the DPU
decoder, dpu_src/jpeg_decode.c): frame, tables, and the byte ranges of the restart intervals.

`parse_baseline(data, name)` reads the markers up to the scan and finds the RSTn markers in
the entropy-coded data. A file this structure cannot describe raises `UnsupportedJpeg`,
whose `reason` is one of `REASONS` (the caller counts them and decodes such files on the
host); a corrupt file raises `DecodeError` naming it, as the host decoder (libjpeg-turbo,
warnings as errors) would. The Huffman tables come in the lookup form of include/pim_jpeg.h
(`lookup_table`), built and checked as libjpeg-turbo's jpeg_make_d_derived_tbl does.

The reading is C (csrc/jpeg_layout.c, through the cffi module pimloader._jpeg_layout): it
is on the host's path for every image the DPUs decode. Between its two calls, the frame's
size goes through Pillow's decompression-bomb rule, as in every decoder of the package.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from pimloader._jpeg_layout import ffi, lib

from .errors import _check_pixels, _fail, _pixel_limit

__all__ = ["UnsupportedJpeg", "REASONS", "Component", "BaselineJpeg", "parse_baseline",
           "lookup_table", "lookup_table_into", "NATURAL_ORDER"]

REASONS = {
    "progressive": "progressive JPEG (SOF2/SOF6)",
    "arithmetic": "arithmetic-coded JPEG",
    "lossless": "lossless JPEG (SOF3)",
    "hierarchical": "hierarchical JPEG (SOF5-7)",
    "precision": "samples of more than 8 bits",
    "components": "neither 1 (grey) nor 3 (YCbCr) components, e.g. CMYK/YCCK",
    "colour space": "3 components that are not YCbCr (an RGB JPEG)",
    "sampling": "a chroma subsampling other than by 1 or 2 across and down (e.g. 4:1:1), or luma "
                "not the most sampled component, or Cb and Cr sampled differently",
    "quantisation": "16-bit quantisation values over 32767",
    "multi-scan": "more than one scan, or a scan without every component",
    "huffman tables": "more than 4 Huffman tables in the scan",
    "no restarts": "no restart markers in a large image (one interval: one tasklet)",
    "not a JPEG": "not a JPEG file",
}

# zigzag index -> natural (row-major) index of a coefficient in its block
NATURAL_ORDER = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
    20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58,
    59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63], np.intp)


class UnsupportedJpeg(ValueError):
    """A JPEG the restart-interval decoders cannot take (the host decoder still can).
    `reason` is a key of `REASONS`; `name` names the file."""

    def __init__(self, reason: str, name=None, detail: str = ""):
        self.reason = reason
        self.name = None if name is None else str(name)
        text = REASONS[reason] + (f": {detail}" if detail else "")
        super().__init__(f"{'image' if name is None else name}: {text}")

    def __reduce__(self):
        return (type(self), (self.reason, self.name))


@dataclass(frozen=True)
class Component:
    h: int                 # sampling factors (blocks per MCU; 1, 1 in a one-component scan)
    v: int
    quant: np.ndarray      # uint16[64], natural order
    dc: Tuple[int, int]    # its DC and AC tables: keys of BaselineJpeg.huffman
    ac: Tuple[int, int]


@dataclass(frozen=True)
class BaselineJpeg:
    width: int
    height: int
    components: List[Component]
    restart_mcus: int                  # MCUs per restart interval (0: one interval)
    intervals: List[Tuple[int, int]]   # [start, end) byte offsets in the file
    mcus_x: int
    mcus_y: int
    huffman: Dict[Tuple[int, int], Tuple[np.ndarray, bytes]]  # (class, id): (BITS, HUFFVAL)
    # for the packer (pimloader.backends.dpu.jpeg), from parse_baseline; None when made otherwise:
    # the intervals again as a uint64 [n, 2] array, and the C parse's pim_jpeg_headers_t
    spans: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    headers: Optional[bytes] = field(default=None, repr=False, compare=False)

    @property
    def max_h(self) -> int:
        return max(c.h for c in self.components)

    @property
    def max_v(self) -> int:
        return max(c.v for c in self.components)

    @property
    def total_mcus(self) -> int:
        return self.mcus_x * self.mcus_y


def _raise_unless_ok(failed: int, status, name) -> None:
    """The C parse's failure (pim_jpeg_parse_status_t) as the exception it stands for."""
    if failed == lib.PIM_JPEG_PARSE_CORRUPT:
        raise _fail(name, ffi.string(status.message).decode())
    if failed == lib.PIM_JPEG_PARSE_UNSUPPORTED:
        raise UnsupportedJpeg(ffi.string(status.reason).decode(), name, ffi.string(status.message).decode())


def parse_baseline(data, name=None) -> BaselineJpeg:
    """The frame, tables and restart intervals of a baseline (or extended sequential,
    8-bit, Huffman) JPEG; UnsupportedJpeg for other files, DecodeError if corrupt."""
    data = bytes(data)
    raw = ffi.from_buffer("uint8_t[]", data)
    headers, status = ffi.new("pim_jpeg_headers_t *"), ffi.new("pim_jpeg_parse_status_t *")
    _raise_unless_ok(lib.pim_jpeg_read_headers(raw, len(data), headers, status), status, name)
    _check_pixels(name, headers.height, headers.width, _pixel_limit())
    spans = np.empty((headers.interval_capacity, 2), np.uint64)
    scan = ffi.new("pim_jpeg_scan_t *")
    _raise_unless_ok(lib.pim_jpeg_read_scan(raw, len(data), headers, scan, ffi.from_buffer("uint64_t[]", spans),
                                            status), status, name)
    spans = spans[:scan.n_intervals]
    quant = np.frombuffer(ffi.buffer(headers.quant), np.uint16).reshape(4, 64)
    n = headers.n_comp
    components = [Component(*((c.h, c.v) if n > 1 else (1, 1)), quant[c.tq].copy(), (0, scan.dc[i]), (1, scan.ac[i]))
                  for i, c in enumerate(headers.comp[0:n])]
    intervals = list(zip(spans[:, 0].tolist(), spans[:, 1].tolist()))
    return BaselineJpeg(headers.width, headers.height, components, headers.restart_mcus, intervals,
                        scan.mcus_x, scan.mcus_y, _huffman(headers), spans, bytes(ffi.buffer(headers)))


def _huffman(headers) -> Dict[Tuple[int, int], Tuple[np.ndarray, bytes]]:
    """Every DHT table defined, (class, id): (BITS as int64, HUFFVAL), in definition order."""
    bits = np.frombuffer(ffi.buffer(headers.huff_bits), np.uint8).reshape(8, 16).astype(np.int64)
    values = ffi.buffer(headers.huff_values)
    tables = {}
    for slot in headers.huff_order[0:headers.huff_tables]:
        tables[(slot >> 2, slot & 3)] = (bits[slot].copy(), values[256 * slot:256 * slot + headers.huff_count[slot]])
    return tables


def lookup_table(bits, values: bytes, name=None) -> dict:
    """A Huffman table in include/pim_jpeg.h's lookup form: maxcode, valoffset, look (codes
    of up to 8 bits), huffval; a set of code lengths that overflows raises DecodeError."""
    table = np.zeros(1, _HUFF)
    lookup_table_into(bits, values, table, name)
    return {field: table[field][0].copy() for field in _HUFF.names}


def lookup_table_into(bits, values: bytes, out: np.ndarray, name=None) -> None:
    """`lookup_table` written into `out`: a writable, contiguous pim_jpeg_huff_t (912 bytes),
    e.g. one of a chunk's tables."""
    counts = np.asarray(bits, np.int64).reshape(16)
    values = bytes(values)
    if counts.min() < 0 or counts.max() > 255 or counts.sum() > len(values) or len(values) > 256:
        raise ValueError(f"{len(values)} Huffman values for code lengths {counts.tolist()} (BITS are bytes, "
                         "at most 256 values)")
    if out.nbytes != _HUFF.itemsize:
        raise ValueError(f"a lookup table takes {_HUFF.itemsize} bytes, not {out.nbytes}")
    table = ffi.cast("pim_jpeg_huff_t *", ffi.from_buffer(out, require_writable=True))
    counts, values = ffi.from_buffer("uint8_t[]", counts.astype(np.uint8)), ffi.from_buffer("uint8_t[]", values)
    if lib.pim_jpeg_huff_build(counts, values, len(values), table):
        raise _fail(name, "bad Huffman table (DHT): its code lengths overflow")


# include/pim_jpeg.h's pim_jpeg_huff_t
_HUFF = np.dtype([("maxcode", "<i4", (18,)), ("valoffset", "<i4", (18,)), ("look", "<u2", (256,)),
                  ("huffval", "u1", (256,))])
assert _HUFF.itemsize == ffi.sizeof("pim_jpeg_huff_t"), "pim_jpeg_huff_t and its dtype differ"
