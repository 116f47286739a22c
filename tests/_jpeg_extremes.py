"""JPEGs at the extremes of the IDCT's range, written byte by byte (legal baseline files that
libjpeg-turbo decodes without a warning), and the host decode with libjpeg-turbo's SIMD off.

- `with_dqt_entry(jpeg, position, value)`: a file's first quantisation table with one entry
  (zigzag `position`) set to `value`: the coefficients coded for the old entry are now
  dequantised with the new one (what a fuzzer's one-byte edit of a DQT does).
- `ycc_jpeg(blocks, ...)`: a YCbCr 4:4:4 baseline JPEG (JFIF) whose luma blocks hold exactly
  the given quantised coefficients (DC as coded differences, as corrupt entropy data yields
  them) and whose chroma blocks are flat, with one quantisation table and simple canonical
  Huffman tables (every DC category 0-11 coded in 4 bits, every AC run/size in 8).
- `decode_without_simd(files)`: Pillow's decode of each file in a child process with
  JSIMD_FORCENONE=1 (libjpeg-turbo's C IDCT, whose arithmetic the DPU kernel follows).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

ZIGZAG = [0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
          13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52,
          45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63]
AC_SYMBOLS = [0x00, 0xF0] + [(run << 4) | size for run in range(16) for size in range(1, 11)]


def with_dqt_entry(jpeg: bytes, position: int, value: int) -> bytes:
    """`jpeg` with entry `position` (zigzag order) of its first (8-bit) DQT table = value."""
    at = jpeg.index(b"\xff\xdb") + 5 + position
    return jpeg[:at] + bytes([value]) + jpeg[at + 1:]


class _Bits:
    def __init__(self) -> None:
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value: int, length: int) -> None:
        for bit in range(length - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> bit) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc, self.n = 0, 0

    def done(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def _magnitude(value: int) -> tuple:
    """(category, its bits) of a coefficient (jchuff.c's encoding)."""
    size = abs(value).bit_length()
    return size, (value if value >= 0 else value + (1 << size) - 1)


def _block(bits: _Bits, dc_diff: int, ac: dict) -> None:
    size, magnitude = _magnitude(dc_diff)
    bits.put(size, 4)
    bits.put(magnitude, size)
    run = 0
    for k in range(1, 64):
        value = ac.get(ZIGZAG[k], 0)
        if value == 0:
            run += 1
            continue
        while run > 15:
            bits.put(AC_SYMBOLS.index(0xF0), 8)
            run -= 16
        size, magnitude = _magnitude(value)
        bits.put(AC_SYMBOLS.index((run << 4) | size), 8)
        bits.put(magnitude, size)
        run = 0
    if run:
        bits.put(AC_SYMBOLS.index(0x00), 8)


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def ycc_jpeg(blocks: list, blocks_across: int, quant: list) -> bytes:
    """A YCbCr 4:4:4 baseline JPEG of len(blocks) 8x8 luma blocks, `blocks_across` per row,
    each (dc_diff, {natural index: AC value}), flat chroma; `quant`: 64 entries (natural
    order), 1..255, for every component."""
    if len(blocks) % blocks_across:
        raise ValueError("whole rows of blocks only")
    height, width = 8 * len(blocks) // blocks_across, 8 * blocks_across
    jfif = b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dqt = bytes([0]) + bytes(quant[ZIGZAG[k]] for k in range(64))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0])
    dc_counts = [0, 0, 0, 12] + [0] * 12
    ac_counts = [0] * 7 + [len(AC_SYMBOLS)] + [0] * 8
    dht = (bytes([0x00] + dc_counts + list(range(12))) + bytes([0x10] + ac_counts + AC_SYMBOLS))
    bits = _Bits()
    for dc_diff, ac in blocks:
        _block(bits, dc_diff, ac)
        _block(bits, 0, {})
        _block(bits, 0, {})
    return (b"\xff\xd8" + _segment(0xE0, jfif) + _segment(0xDB, dqt) + _segment(0xC0, sof) + _segment(0xC4, dht)
            + _segment(0xDA, bytes([3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0])) + bits.done() + b"\xff\xd9")


def decode_without_simd(files: list, workdir: Path) -> list:
    """Each file decoded by Pillow (its libjpeg-turbo) in a child process whose libjpeg-turbo
    runs no SIMD code (JSIMD_FORCENONE=1)."""
    request, answer = workdir / "files.pkl", workdir / "decoded.pkl"
    request.write_bytes(pickle.dumps(files))
    script = ("import io, pickle, sys; import numpy as np; from PIL import Image;"
              "files = pickle.load(open(sys.argv[1], 'rb'));"
              "pickle.dump([np.asarray(Image.open(io.BytesIO(f))) for f in files], open(sys.argv[2], 'wb'))")
    env = {**os.environ, "JSIMD_FORCENONE": "1"}
    subprocess.run([sys.executable, "-c", script, str(request), str(answer)], check=True, env=env, timeout=120)
    return pickle.loads(answer.read_bytes())


def extreme_files() -> dict:
    """Legal 64x48 JPEGs whose luma blocks leave the range where libjpeg-turbo's SIMD and C
    IDCTs agree, by name: each decodes differently with and without SIMD."""
    ones, flat = [1] * 64, [(0, {})] * 48
    coarse = [60 if k % 2 else 90 for k in range(64)]
    return {
        "dc_climb_q1.jpg": ycc_jpeg([(2047, {})] * 48, 8, ones),      # DC 2047, 4094, ... (int16 wrap)
        "dc_4092_q1.jpg": ycc_jpeg([(2047, {}), (2045, {})] + flat[2:], 8, ones),  # output 512: C wraps
        "strong_ac_q1.jpg": ycc_jpeg([(0, {1: 1023, 8: -1023, 9: 1023})] + flat[1:], 8, ones),
        "many_ac_q1.jpg": ycc_jpeg([(0, {k: (700 if k % 3 else -700) for k in range(1, 40)})] + flat[1:], 8, ones),
        "strong_ac_q60.jpg": ycc_jpeg([(0, {2: 600, 16: -600})] + flat[1:], 8, coarse),
    }


def edge_files() -> dict:
    """Legal 64x48 JPEGs at the inner edge of that range: the DPUs decode them, and SIMD and C
    agree on them."""
    ones, flat = [1] * 64, [(0, {})] * 48
    return {
        "dc_4091_q1.jpg": ycc_jpeg([(2047, {}), (2044, {})] + flat[2:], 8, ones),   # output 511
        "dc_minus_4096_q1.jpg": ycc_jpeg([(-2047, {}), (-2047, {}), (-2, {})] + flat[3:], 8, ones),  # -512
    }
