"""Seekable JPEGs: copies with restart markers, from which a crop decodes alone.

`add_restart_markers` rewrites one JPEG losslessly (same DCT coefficients) with a restart
marker every few MCUs; `seekable_version` says what a seekable copy holds in place of any
file's bytes; `make_seekable` copies a whole image folder that way (tar shards and Arrow
datasets: `pimloader.datasets.make_seekable_shards`, `make_seekable_arrow`); `seek_info`
says whether (and how) the decoder can seek in a file. pimloader's decoder then decodes a
crop from the restart intervals around it instead of entropy-decoding the image from its
start (docs/transforms.md, "Seekable JPEGs").
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Tuple

from pimloader._jpeg import ffi, lib

from .errors import DecodeError, _check_pixels, _fail, _pixel_limit
from .jpeg import _buffer, is_jpeg, read_header

__all__ = ["SeekInfo", "seek_info", "seek_index", "add_restart_markers", "seekable_version",
           "SeekableCopy", "make_seekable"]


class SeekInfo(NamedTuple):
    interval: int    # MCUs per restart interval
    mcu_size: Tuple[int, int]  # (height, width) of an MCU in pixels


def seek_info(data) -> Optional[SeekInfo]:
    """How the decoder can seek in this JPEG (see add_restart_markers), or None: it must then
    entropy-decode everything above and beside a crop."""
    data, buf, size = _buffer(data)
    interval, mcu_width, mcu_height = (ffi.new("int32_t *") for _ in range(3))
    if not lib.pl_jpeg_seek_info(buf, size, interval, mcu_width, mcu_height):
        return None
    return SeekInfo(interval[0], (mcu_height[0], mcu_width[0]))


def seek_index(data) -> Optional[bytes]:
    """A seek index of a baseline JPEG without restart markers: where its entropy-coded
    data stands every 64 pixels or so of each MCU row (16 bytes a point: about 3 KB for a
    500x375 photo). Given to `decode_jpeg(..., seek_index=)` (or decode_jpeg_into), a crop
    of the file is then decoded from the data of the rows around it only, as from a copy
    with restart markers (add_restart_markers), but with the file left as it is: those
    rows' MCUs are read in place, each row from its index point (csrc/jpeg_seek_index.c,
    csrc/jpeg_huffman.c).
    Making one Huffman-decodes the whole file once (no IDCT), about the entropy-decoding
    part of one full decode.

    None for a file that cannot have one: not a JPEG, progressive or arithmetic-coded,
    restart markers already there (seek_info says how that one seeks), several scans,
    2 or 4 components, or entropy-coded data that does not decode to its last MCU (a
    corrupt or truncated file: its decode raises as before)."""
    if not is_jpeg(data):   # (empty data too)
        return None
    data, buf, size = _buffer(data)
    needed = lib.pl_jpeg_seek_index_size(buf, size)
    if needed == 0:
        return None
    out = bytearray(needed)
    if lib.pl_jpeg_seek_index(buf, size, ffi.from_buffer(out), needed) != needed:
        return None
    return bytes(out)


def add_restart_markers(data, max_interval: int = 4, name=None, *, optimize: bool = True) -> bytes:
    """A lossless copy of a JPEG in which a crop decodes from the restart intervals around it.

    The copy has the same DCT coefficients (read and written with libjpeg's coefficient
    API, never re-quantised), so every decoder gives it the same pixels as the original.
    It is one baseline scan with a restart marker every k MCUs, k the largest divisor of an
    MCU row's count that is at most `max_interval` (an MCU is 16x16 pixels in a 4:2:0 JPEG,
    8x8 in a greyscale one). Progressive and arithmetic-coded JPEGs become baseline;
    markers such as EXIF and ICC profiles are not copied. Each interval costs 2 to 3 bytes:
    at `max_interval=4` a 500x375 photo grows by about 2%.

    Decoding a box of such a file (pimloader's decoder does it by itself) reads only the
    intervals the box and one pixel around it need, where a plain JPEG must be entropy-
    decoded from its start to the box's last row, across the image's whole width.
    `optimize=False` writes the standard Huffman tables instead of tables fitted to the
    file: half the time (one pass over the coefficients instead of two), a copy about 3%
    larger. Corrupt data raises DecodeError naming `name` (libjpeg's warnings are errors
    here)."""
    if not isinstance(max_interval, int) or not 1 <= max_interval <= 65535:
        raise ValueError(f"max_interval must be an int in 1..65535, not {max_interval!r}")
    data, buf, size = _buffer(data, name)
    if not is_jpeg(data):
        raise _fail(name, "not a JPEG (restart markers are a JPEG feature)")
    header = read_header(data, name)  # its coefficients are read whole: check first
    _check_pixels(name, header.height, header.width, _pixel_limit())
    out = ffi.new("uint8_t **")
    out_size = ffi.new("size_t *")
    message = ffi.new("char[]", lib.PL_JPEG_MSG_LEN)
    if lib.pl_jpeg_add_restarts(buf, size, max_interval, int(bool(optimize)), out, out_size,
                                message) != lib.PL_JPEG_OK:
        raise _fail(name, ffi.string(message).decode(errors="replace"))
    try:
        return bytes(ffi.buffer(out[0], out_size[0]))
    finally:
        lib.pl_jpeg_free(out[0])


def seekable_version(data: bytes, max_interval: int = 4, name=None, *,
                     optimize: bool = True) -> Tuple[str, bytes]:
    """What a seekable copy holds in place of `data`: ("transcoded", add_restart_markers'
    copy) for a JPEG, ("copied", data) for anything else, ("unreadable", data) for a JPEG
    that libjpeg cannot read whole (copied as it is, so that the loader's on_error treats
    the copy as it treats the original)."""
    if not is_jpeg(data):
        return "copied", data
    try:
        return "transcoded", add_restart_markers(data, max_interval, name=name,
                                                 optimize=optimize)
    except DecodeError:
        return "unreadable", data


@dataclass
class SeekableCopy:
    """What make_seekable (or make_seekable_shards, make_seekable_arrow) wrote."""
    transcoded: int         # JPEGs rewritten with restart markers
    copied: int             # other files (members, cells), copied as they are
    unreadable: list        # JPEGs libjpeg could not read whole (their names): copied as
                            # they are
    bytes_before: int       # of the transcoded JPEGs
    bytes_after: int

    def count(self, kind: str, name: str, before: int, after: int) -> None:
        """Adds one file's outcome (a kind of seekable_version)."""
        if kind == "transcoded":
            self.transcoded += 1
            self.bytes_before += before
            self.bytes_after += after
        elif kind == "copied":
            self.copied += 1
        else:
            self.unreadable.append(name)


def make_seekable(source, destination, *, max_interval: int = 4, overwrite: bool = False,
                  threads: int | None = None,
                  progress: Callable[[int, int], None] | None = None) -> SeekableCopy:
    """Copy an image folder (any tree of files: an ImageFolder, a DatasetFolder) with every
    JPEG rewritten by `pimloader.add_restart_markers`: the same pixels for every
    decoder, but pimloader then decodes a crop from the restart intervals around it instead
    of entropy-decoding the image from its start. Paths, names and everything else stay as
    they are, so `ImageFolder(destination)` has the same classes, samples and targets.

    A JPEG that libjpeg cannot read whole is copied unchanged (the loader will then raise,
    or skip it with on_error="skip", as for the original) and listed in `unreadable`.
    `destination` must not exist, unless `overwrite=True`. Files are rewritten on `threads`
    threads (default: one per CPU; libjpeg runs without the GIL), about 3 ms per
    ImageNet-sized photo on one core. `progress`, if given, is called as
    `progress(files_done, files_in_all)` after each file (e.g. to draw a progress bar)."""
    source, destination = os.fspath(source), os.fspath(destination)
    if not os.path.isdir(source):
        raise NotADirectoryError(f"make_seekable: {source!r} is not a directory")
    check_copy_arguments("make_seekable", destination, overwrite, progress)
    jobs = []
    for folder, _, files in os.walk(source):
        target_folder = os.path.join(destination, os.path.relpath(folder, source))
        os.makedirs(target_folder, exist_ok=True)
        jobs += [(os.path.join(folder, name), os.path.join(target_folder, name))
                 for name in sorted(files)]
    report = SeekableCopy(0, 0, [], 0, 0)
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        for done, outcome in enumerate(
                pool.map(lambda job: _copy_seekable(*job, max_interval), jobs), 1):
            report.count(*outcome)
            if progress is not None:
                progress(done, len(jobs))
    return report


def check_copy_arguments(caller: str, destination: str, overwrite: bool, progress) -> None:
    """The checks every seekable copy makes of its destination and progress callback."""
    if os.path.exists(destination) and not overwrite:
        raise FileExistsError(f"{caller}: {destination!r} exists (pass overwrite=True)")
    if progress is not None and not callable(progress):
        raise TypeError(f"{caller}: progress must be callable or None, not {progress!r}")


def _copy_seekable(path: str, target: str, max_interval: int) -> tuple:
    """(what was done, path, bytes before, bytes after) for one file."""
    data = _read_file(path)
    kind, rewritten = seekable_version(data, max_interval, path)
    if kind != "transcoded":
        shutil.copyfile(path, target)
        return kind, path, 0, 0
    with open(target, "wb") as file:
        file.write(rewritten)
    return kind, path, len(data), len(rewritten)


def _read_file(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()
