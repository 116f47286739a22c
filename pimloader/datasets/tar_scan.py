"""A tar archive's member list (name, data offset, size) read from its headers alone.

    members = scan_tar(stream, "shard-0003.tar")   # stream: read(n) and skip(n)

The headers are walked from one to the next; a member's data is skipped (a seek on a local
file, a read that is thrown away on an HTTP stream), except the data of members of at most
`inline_limit` bytes (class labels, captions, JSON), which is kept so that targets need no
second read. Formats: ustar (with its name prefix), GNU (long names in 'L' entries, base-256
sizes) and POSIX pax ('x' per-member and 'g' global records: path, size), as GNU tar,
bsdtar and Python's tarfile (webdataset's TarWriter) write them. Only regular files are
listed (as webdataset's reader does); directories, links and devices are passed over.

A stream that ends inside a header or a member's data is a `TruncatedTarError` naming the
shard, the member and the byte where the data stopped; a header whose checksum is wrong is
a `TarFormatError`. A zero block ends the archive; a stream that ends at a header boundary
without one was cut there (tar and tarfile always write two), also a TruncatedTarError.
"""
from __future__ import annotations

import numpy as np

from .index import Packed

BLOCK = 512
REGULAR_TYPES = (b"0", b"\0", b"7")   # regular file, old regular file, contiguous file
INLINE_LIMIT = 4096


class TarFormatError(ValueError):
    """Bytes where a tar header should be that are not one."""


class TruncatedTarError(TarFormatError):
    """A tar archive that ends inside a header or a member's data."""


class MemberList:
    """A shard's regular members in archive order: `names` (Packed bytes), `offsets` and
    `sizes` of their data (int64), the data of the small ones (`inline`: Packed, empty for
    the others, `is_inline` says which) and `shard_size`, the archive's bytes."""

    def __init__(self, names: Packed, offsets, sizes, inline: Packed, is_inline,
                 shard_size: int) -> None:
        self.names = names
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.inline = inline
        self.is_inline = np.asarray(is_inline, dtype=bool)
        self.shard_size = int(shard_size)

    def __len__(self) -> int:
        return len(self.offsets)

    def to_arrays(self) -> dict:
        """numpy arrays only (what `np.savez` writes and `np.load` reads without pickle)."""
        return {"names": self.names.buffer, "name_offsets": self.names.offsets,
                "offsets": self.offsets, "sizes": self.sizes, "inline": self.inline.buffer,
                "inline_offsets": self.inline.offsets, "is_inline": self.is_inline,
                "shard_size": np.array([self.shard_size], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, arrays) -> "MemberList":
        return cls(_packed(arrays["names"], arrays["name_offsets"]), arrays["offsets"],
                   arrays["sizes"], _packed(arrays["inline"], arrays["inline_offsets"]),
                   arrays["is_inline"], int(arrays["shard_size"][0]))


def scan_tar(stream, shard: str, shard_size: int, inline_limit: int = INLINE_LIMIT
             ) -> MemberList:
    """The member list of the tar archive `stream` reads (from its first byte): `stream` has
    `read(n)` (fewer bytes only at its end) and `skip(n)` (the bytes skipped, fewer only at
    its end). `shard` names the archive in errors; `shard_size` is its size in bytes."""
    walker = _Walker(stream, shard)
    names, offsets, sizes, inline, is_inline = [], [], [], [], []
    for name, offset, size in walker.members():
        names.append(name)
        offsets.append(offset)
        sizes.append(size)
        small = size <= inline_limit
        inline.append(walker.data(name, size) if small else b"")
        is_inline.append(small)
        if not small:
            walker.skip_data(name, size)
        walker.skip_padding(name, size)
    return MemberList(Packed(names), offsets, sizes, Packed(inline), is_inline, shard_size)


class _Walker:
    """Walks the headers of a tar stream, keeping the position and the pax / GNU records
    that name or size the next member."""

    def __init__(self, stream, shard: str) -> None:
        self.stream = stream
        self.shard = shard
        self.position = 0
        self.global_records: dict = {}

    def members(self):
        """(name bytes, data offset, size) of each regular member; the caller reads or
        skips the data and its padding before asking for the next."""
        records: dict = {}
        while True:
            header = self._header()
            if header is None:
                return
            kind, name, size = header
            if kind in (b"x", b"g", b"L", b"K"):
                payload = self.data(name, size)
                self.skip_padding(name, size)
                if kind == b"L":
                    records["path"] = payload.split(b"\0", 1)[0]
                elif kind == b"x":
                    records.update(_pax_records(payload, self.shard, self.position))
                elif kind == b"g":
                    self.global_records.update(_pax_records(payload, self.shard,
                                                            self.position))
                continue
            merged = {**self.global_records, **records}
            name, size = merged.get("path", name), int(merged.get("size", size))
            records = {}
            if kind in REGULAR_TYPES:
                yield name, self.position, size
            else:
                self.skip_data(name, size)
                self.skip_padding(name, size)

    def data(self, name: bytes, size: int) -> bytes:
        data = self.stream.read(size)
        self._check(name, len(data), size)
        return data

    def skip_data(self, name: bytes, size: int) -> None:
        self._check(name, self.stream.skip(size), size)

    def skip_padding(self, name: bytes, size: int) -> None:
        padding = -size % BLOCK
        if padding:
            self._check(name, self.stream.skip(padding), padding)

    def _check(self, name: bytes, got: int, wanted: int) -> None:
        start = self.position
        self.position += got
        if got < wanted:
            raise TruncatedTarError(
                f"{self.shard}: truncated tar: member {_text(name)!r} needs bytes "
                f"{start}..{start + wanted} but the shard ends at byte {self.position}")

    def _header(self):
        """(type, name, size) of the next header, or None at the archive's end."""
        start = self.position
        block = self.stream.read(BLOCK)
        self.position += len(block)
        if not block:   # tar and tarfile end an archive with zero blocks: this was cut
            raise TruncatedTarError(f"{self.shard}: truncated tar: it ends at byte {start} "
                                    f"without the end-of-archive blocks")
        if block == bytes(BLOCK):
            return None
        if len(block) < BLOCK:
            raise TruncatedTarError(f"{self.shard}: truncated tar: a header at byte {start} "
                                    f"is cut at byte {self.position}")
        if not _checksum_ok(block):
            raise TarFormatError(f"{self.shard}: not a tar archive, or damaged: the block at "
                                 f"byte {start} is not a valid tar header (bad checksum)")
        name = block[0:100].split(b"\0", 1)[0]
        if block[257:265] == b"ustar\x0000" and block[345] != 0:
            name = block[345:500].split(b"\0", 1)[0] + b"/" + name
        return block[156:157], name, _size(block[124:136], self.shard, start)


def _checksum_ok(block: bytes) -> bool:
    field = block[148:156].replace(b"\0", b" ").strip()
    try:
        stored = int(field, 8)
    except ValueError:
        return False
    blanked = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(blanked)
    signed = unsigned - 256 * sum(1 for byte in blanked if byte > 127)
    return stored in (unsigned, signed)


def _size(field: bytes, shard: str, start: int) -> int:
    if field[0] & 0x80:  # GNU base-256, for members of 8 GiB and more
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.replace(b"\0", b" ").strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarFormatError(f"{shard}: the tar header at byte {start} has a bad size field "
                             f"{field!r}") from None


def _pax_records(payload: bytes, shard: str, position: int) -> dict:
    """The path and size of pax records "<length> <key>=<value>\\n" (others ignored)."""
    records, at = {}, 0
    while at < len(payload) and payload[at:at + 1] not in (b"\0", b""):
        space = payload.find(b" ", at)
        try:
            length = int(payload[at:space])
        except ValueError:
            raise TarFormatError(f"{shard}: a bad pax record before byte {position}") from None
        key, _, value = payload[space + 1:at + length - 1].partition(b"=")
        if key == b"path":
            records["path"] = value
        elif key == b"size":
            records["size"] = int(value)
        at += length
    return records


def _packed(buffer, offsets) -> Packed:
    packed = Packed([])
    packed.buffer = np.asarray(buffer, dtype=np.uint8)
    packed.offsets = np.asarray(offsets, dtype=np.int64)
    return packed


def _text(name: bytes) -> str:
    return name.decode("utf-8", "surrogateescape")
