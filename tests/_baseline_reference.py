"""The Python reading of a baseline JPEG's structure that csrc/jpeg_layout.c replaced (from
pimloader/decode/baseline.py as of main 7a163cf, unchanged but for its imports): the oracle
of tests/test_jpeg_layout.py. The C parse must give the same layouts, and the same errors
(type, reason, message) for every corrupt or unsupported file."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from pimloader.decode.baseline import NATURAL_ORDER, BaselineJpeg, Component, UnsupportedJpeg
from pimloader.decode.errors import DecodeError, _check_pixels, _fail, _pixel_limit

_SOF_REASONS = {0xC2: "progressive", 0xC6: "progressive", 0xC3: "lossless", 0xC5: "hierarchical",
                0xC7: "hierarchical", 0xC9: "arithmetic", 0xCA: "arithmetic", 0xCB: "arithmetic",
                0xCD: "arithmetic", 0xCE: "arithmetic", 0xCF: "arithmetic", 0xCC: "arithmetic"}


class _Reader:
    """The markers before the scan, and what they set."""

    def __init__(self, data: bytes, name) -> None:
        self.data, self.name = data, name
        self.quant: Dict[int, np.ndarray] = {}
        self.huff: Dict[Tuple[int, int], Tuple[np.ndarray, bytes]] = {}
        self.restart_mcus = 0
        self.frame = None          # (height, width, [(id, h, v, tq)])
        self.jfif = False
        self.adobe_transform: Optional[int] = None

    def fail(self, reason: str) -> DecodeError:
        return _fail(self.name, reason)

    def segments(self):
        """(marker, payload, end offset) up to and including SOS."""
        data, pos = self.data, 2
        while True:
            if pos + 4 > len(data):
                raise self.fail("file ends before the image data (no SOS marker)")
            if data[pos] != 0xFF:
                raise self.fail(f"expected a marker at byte {pos}, found 0x{data[pos]:02x}")
            while pos < len(data) - 3 and data[pos] == 0xFF:
                pos += 1
            marker = data[pos]
            if marker == 0xD9 or 0xD0 <= marker <= 0xD7 or marker in (0x01, 0xD8):
                raise self.fail(f"marker 0x{marker:02x} before the image data")
            length = int.from_bytes(data[pos + 1:pos + 3], "big")
            end = pos + 1 + length
            if length < 2 or end > len(data):
                raise self.fail(f"marker 0x{marker:02x} at byte {pos - 1}: segment runs past the end")
            yield marker, data[pos + 3:end], end
            if marker == 0xDA:
                return
            pos = end

    def read_dqt(self, p: bytes) -> None:
        while p:
            precision, index = p[0] >> 4, p[0] & 15
            size = 128 if precision else 64
            if index > 3 or precision > 1 or len(p) < 1 + size:
                raise self.fail("bad quantisation table (DQT)")
            values = np.frombuffer(p[1:1 + size], ">u2" if precision else "u1").astype(np.uint16)
            if values.max(initial=0) > 32767:
                raise UnsupportedJpeg("quantisation", self.name)
            table = np.zeros(64, np.uint16)
            table[NATURAL_ORDER] = values
            self.quant[index] = table
            p = p[1 + size:]

    def read_dht(self, p: bytes) -> None:
        while p:
            if len(p) < 17:
                raise self.fail("bad Huffman table (DHT)")
            table_class, index = p[0] >> 4, p[0] & 15
            bits = np.frombuffer(p[1:17], np.uint8).astype(np.int64)
            count = int(bits.sum())
            if table_class > 1 or index > 3 or count > 256 or len(p) < 17 + count:
                raise self.fail("bad Huffman table (DHT)")
            values = bytes(p[17:17 + count])
            if table_class == 0 and any(v > 15 for v in values):
                raise self.fail("bad Huffman table (DHT): DC symbol over 15")
            lookup_table(bits, values, self.name)   # checks the codes now
            self.huff[(table_class, index)] = (bits, values)
            p = p[17 + count:]

    def read_sof(self, marker: int, p: bytes) -> None:
        if marker in _SOF_REASONS:
            raise UnsupportedJpeg(_SOF_REASONS[marker], self.name)
        if self.frame is not None:
            raise self.fail("two frame headers (SOF)")
        if len(p) < 6:
            raise self.fail("bad frame header (SOF)")
        precision, height, width, n = p[0], int.from_bytes(p[1:3], "big"), int.from_bytes(p[3:5], "big"), p[5]
        if precision != 8:
            raise UnsupportedJpeg("precision", self.name, f"{precision}-bit samples")
        if len(p) < 6 + 3 * n or n == 0:
            raise self.fail("bad frame header (SOF)")
        if height == 0 or width == 0:
            raise self.fail("empty image (a zero dimension, or DNL, which libjpeg does not support)")
        comps = [(p[6 + 3 * i], p[7 + 3 * i] >> 4, p[7 + 3 * i] & 15, p[8 + 3 * i]) for i in range(n)]
        if any(not 1 <= h <= 4 or not 1 <= v <= 4 or tq > 3 for _, h, v, tq in comps):
            raise self.fail("bad sampling factors or table number (SOF)")
        self.frame = (height, width, comps)

    def read_app(self, marker: int, p: bytes) -> None:
        if marker == 0xE0 and p[:5] == b"JFIF\0":
            self.jfif = True
        elif marker == 0xEE and p[:5] == b"Adobe" and len(p) >= 12:
            self.adobe_transform = p[11]


def _colour_checks(reader: _Reader, comps, name) -> None:
    """libjpeg's guess of the colour space (jdapimin.c's default_decompress_parms)."""
    if len(comps) == 1:
        return
    if len(comps) != 3:
        raise UnsupportedJpeg("components", name, f"{len(comps)} components")
    ids = tuple(c[0] for c in comps)
    if reader.jfif:
        return
    if reader.adobe_transform is not None:
        if reader.adobe_transform != 1:
            raise UnsupportedJpeg("colour space", name, "Adobe transform 0 (RGB)")
        return
    if ids == (82, 71, 66):   # 'R', 'G', 'B'
        raise UnsupportedJpeg("colour space", name, "component ids R, G, B")


def _check_sampling(comps, name) -> None:
    if len(comps) == 1:
        return
    max_h, max_v = max(c[1] for c in comps), max(c[2] for c in comps)
    (_, h0, v0, _), chroma = comps[0], comps[1:]
    ok = (h0, v0) == (max_h, max_v) and max_h <= 2 and max_v <= 2 and chroma[0][1:3] == chroma[1][1:3]
    if not ok:
        factors = ",".join(f"{c[1]}x{c[2]}" for c in comps)
        raise UnsupportedJpeg("sampling", name, f"sampling factors {factors}")


def _read_scan(reader: _Reader, p: bytes, comps):
    n = p[0] if p else 0
    if len(p) < 4 + 2 * n or n == 0:
        raise reader.fail("bad scan header (SOS)")
    selectors = [(p[1 + 2 * i], p[2 + 2 * i] >> 4, p[2 + 2 * i] & 15) for i in range(n)]
    ss, se, approx = p[1 + 2 * n], p[2 + 2 * n], p[3 + 2 * n]
    if (ss, se, approx) != (0, 63, 0):
        raise reader.fail("bad scan parameters for a sequential JPEG (SOS)")
    if [s[0] for s in selectors] != [c[0] for c in comps]:
        raise UnsupportedJpeg("multi-scan", reader.name, "the scan does not hold every component")
    return selectors


def _find_intervals(data: bytes, start: int, name) -> List[Tuple[int, int]]:
    """[start, end) of each restart interval's bytes, checking the RSTn sequence; the scan
    must end with EOI."""
    intervals, begin, expected, i = [], start, 0, start
    while True:
        j = data.find(b"\xff", i)
        if j < 0:
            raise _fail(name, "premature end of the JPEG file (no EOI marker)")
        k = j + 1
        while k < len(data) and data[k] == 0xFF:
            k += 1
        if k >= len(data):
            raise _fail(name, "premature end of the JPEG file (no EOI marker)")
        marker = data[k]
        if marker == 0x00:
            i = k + 1
            continue
        intervals.append((begin, j))
        if 0xD0 <= marker <= 0xD7:
            if marker - 0xD0 != expected % 8:
                raise _fail(name, f"restart marker RST{marker - 0xD0} out of sequence at byte {j} "
                                  f"(expected RST{expected % 8})")
            expected += 1
            begin = i = k + 1
            continue
        if marker != 0xD9:
            raise UnsupportedJpeg("multi-scan", name, f"marker 0x{marker:02x} after the scan")
        return intervals


def parse_baseline(data, name=None) -> BaselineJpeg:
    """The frame, tables and restart intervals of a baseline (or extended sequential,
    8-bit, Huffman) JPEG; UnsupportedJpeg for other files, DecodeError if corrupt."""
    data = bytes(data)
    if data[:2] != b"\xff\xd8":
        raise UnsupportedJpeg("not a JPEG", name)
    reader = _Reader(data, name)
    for marker, payload, end in reader.segments():
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            reader.read_sof(marker, payload)
        elif marker == 0xCC:
            raise UnsupportedJpeg("arithmetic", name)
        elif marker == 0xC4:
            reader.read_dht(payload)
        elif marker == 0xDB:
            reader.read_dqt(payload)
        elif marker == 0xDD:
            if len(payload) < 2:
                raise reader.fail("bad restart interval (DRI)")
            reader.restart_mcus = int.from_bytes(payload[:2], "big")
        elif 0xE0 <= marker <= 0xEF:
            reader.read_app(marker, payload)
    if reader.frame is None:
        raise reader.fail("image data (SOS) before the frame header (SOF)")
    height, width, comps = reader.frame
    _check_pixels(name, height, width, _pixel_limit())
    _colour_checks(reader, comps, name)
    _check_sampling(comps, name)
    selectors = _read_scan(reader, payload, comps)
    components = []
    for (_, h, v, tq), (_, td, ta) in zip(comps, selectors):
        if tq not in reader.quant or (0, td) not in reader.huff or (1, ta) not in reader.huff:
            raise reader.fail("a component's quantisation or Huffman table is not defined")
        sampling = (h, v) if len(comps) > 1 else (1, 1)
        components.append(Component(*sampling, reader.quant[tq], (0, td), (1, ta)))
    max_h, max_v = max(c.h for c in components), max(c.v for c in components)
    mcus_x, mcus_y = -(-width // (8 * max_h)), -(-height // (8 * max_v))
    intervals = _find_intervals(data, end, name)
    restart = reader.restart_mcus
    expected = -(-mcus_x * mcus_y // restart) if restart else 1
    if len(intervals) != expected:
        raise _fail(name, f"{len(intervals)} restart intervals where the frame and DRI imply {expected}")
    return BaselineJpeg(width, height, components, restart, intervals, mcus_x, mcus_y, dict(reader.huff))


def lookup_table(bits, values: bytes, name=None) -> dict:
    """A Huffman table in include/pim_jpeg.h's lookup form: maxcode, valoffset, look (codes
    of up to 8 bits), huffval; a set of code lengths that overflows raises DecodeError."""
    maxcode = np.full(18, -1, np.int32)
    valoffset = np.zeros(18, np.int32)
    look = np.zeros(256, np.uint16)
    code = k = 0
    for length in range(1, 17):
        count = int(bits[length - 1])
        if count:
            valoffset[length] = k - code
            for _ in range(count):
                if length <= 8:
                    shift = 8 - length
                    look[code << shift:(code + 1) << shift] = (length << 8) | values[k]
                code += 1
                k += 1
            maxcode[length] = code - 1
        if code >= 1 << length:
            raise _fail(name, "bad Huffman table (DHT): its code lengths overflow")
        code <<= 1
    huffval = np.zeros(256, np.uint8)
    huffval[:len(values)] = np.frombuffer(values, np.uint8)
    return {"maxcode": maxcode, "valoffset": valoffset, "look": look, "huffval": huffval}
