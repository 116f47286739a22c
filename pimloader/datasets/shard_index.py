"""The samples of tar shards, grouped as webdataset groups them, in a few numpy arrays.

    index = ShardIndex.build(urls, [member lists], fields=[("jpg", "png"), ("cls",)])
    index.shard_bounds      # samples of shard s: shard_bounds[s]:shard_bounds[s + 1]
    index.member(i, f)      # (offset, size, extension) of field f of sample i; None if missing
    index.spans([i, j])     # {url: [(offset, size)]} of the members those samples read

webdataset's rule: a member's key is its path up to the first dot of its base name, the rest
(lower-cased) its extension ("a/b/0001.seg.png" -> key "a/b/0001", extension "seg.png");
consecutive members with the same key make one sample; files named `__*__` are metadata and
passed over. A field is a list of alternative extensions, the first present taken (as
`to_tuple("jpg;png")`). A sample that lacks a field is an error naming the shard and key
(`missing="error"`), is left out (`"skip"`), or gives None (`"none"`, as webdataset's
`missing_is_error=False`). Two members with the same key and extension are an error.

`decode_target(extension, data)` decodes a target member as webdataset's basic handlers do:
cls/cls2/class/count/index/inx/id -> int, txt/text/transcript -> str, json/jsn -> object;
any other extension stays bytes.
"""
from __future__ import annotations

import json
import re

import numpy as np

from .index import Packed

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")
MISSING = ("error", "skip", "none")
_DECODERS = {
    **dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "id"), int),
    **dict.fromkeys(("txt", "text", "transcript"), lambda data: data.decode("utf-8")),
    **dict.fromkeys(("json", "jsn"), json.loads),
}


def parse_fields(keys) -> tuple:
    """("jpg;png", "cls") or "jpg;png cls" -> (("jpg", "png"), ("cls",))."""
    if isinstance(keys, str):
        keys = keys.split()
    fields = tuple(tuple(alternative.lower() for alternative in key.split(";"))
                   for key in keys)
    if not fields or any(not all(field) for field in fields):
        raise ValueError(f"keys: one or more extensions per field, like ('jpg;png', 'cls'); "
                         f"got {keys!r}")
    return fields


def decode_target(extension: str, data: bytes):
    decoder = _DECODERS.get(extension.rsplit(".", 1)[-1])
    return data if decoder is None else decoder(data)


class ShardIndex:
    """Per sample: its shard, its key, and per field the member's data offset and size
    (-1: missing), which alternative it was, and its bytes when small (inline)."""

    def __init__(self, urls, fields, shard_of, keys: Packed, offsets, sizes, choices,
                 inline: Packed, is_inline) -> None:
        self.urls = list(urls)
        self.fields = fields
        self.shard_of = shard_of
        self.keys = keys
        self.offsets, self.sizes, self.choices = offsets, sizes, choices
        self.inline, self.is_inline = inline, is_inline
        self.shard_bounds = np.searchsorted(shard_of, np.arange(len(self.urls) + 1))

    @classmethod
    def build(cls, urls, member_lists, fields, missing: str = "error") -> "ShardIndex":
        if missing not in MISSING:
            raise ValueError(f"missing must be one of {MISSING}, got {missing!r}")
        rows = _Rows(fields)
        for shard, (url, members) in enumerate(zip(urls, member_lists)):
            for key, group in _groups(url, members):
                rows.add(url, shard, key, group, members, missing)
        return rows.index(urls)

    def __len__(self) -> int:
        return len(self.shard_of)

    def key(self, index: int) -> str:
        return self.keys[index].decode("utf-8", "surrogateescape")

    def url(self, index: int) -> str:
        return self.urls[int(self.shard_of[index])]

    def member(self, index: int, field: int):
        """(offset, size, extension) of the member of `field`, or None when it is missing."""
        size = int(self.sizes[index, field])
        if size < 0:
            return None
        return (int(self.offsets[index, field]), size,
                self.fields[field][int(self.choices[index, field])])

    def inline_bytes(self, index: int, field: int):
        """The member's bytes when the index holds them, else None."""
        if not self.is_inline[index, field]:
            return None
        return self.inline[index * len(self.fields) + field]

    def spans(self, indices) -> list:
        """[(url, offset, size)] of the members that reading samples `indices` reads from
        their shards (present and not held inline), in the order they are read."""
        rows = np.asarray(indices, dtype=np.int64)
        read = (self.sizes[rows] >= 0) & ~self.is_inline[rows]
        members = []
        for row, field in zip(*np.nonzero(read)):
            index = int(rows[row])
            members.append((self.url(index), int(self.offsets[index, field]),
                            int(self.sizes[index, field])))
        return members

    @property
    def nbytes(self) -> int:
        return (self.shard_of.nbytes + self.keys.nbytes + self.offsets.nbytes
                + self.sizes.nbytes + self.choices.nbytes + self.inline.nbytes
                + self.is_inline.nbytes)


def _groups(url: str, members):
    """(key, {extension: member position}) of each run of members with the same key."""
    key, group = None, {}
    for position in range(len(members)):
        name = members.names[position].decode("utf-8", "surrogateescape")
        if "/" not in name and name.startswith("__") and name.endswith("__"):
            continue
        if _META.match(name):
            continue
        match = _KEY.match(name)
        if match is None:
            continue
        prefix, extension = match.group(1), match.group(2).lower()
        if prefix != key:
            if key is not None:
                yield key, group
            key, group = prefix, {}
        if extension in group:
            raise ValueError(f"{url}#{key}: two members with the extension {extension!r} "
                             f"(the second is {name!r})")
        group[extension] = position
    if key is not None:
        yield key, group


class _Rows:
    """The index's columns as they are gathered, sample by sample."""

    def __init__(self, fields) -> None:
        self.fields = fields
        self.shard_of, self.keys, self.offsets, self.sizes = [], [], [], []
        self.choices, self.inline, self.is_inline = [], [], []

    def add(self, url, shard, key, group, members, missing) -> None:
        found = []
        for alternatives in self.fields:
            choice = next((c for c, ext in enumerate(alternatives) if ext in group), None)
            if choice is None and missing == "error":
                raise ValueError(f"{url}#{key}: no member with the extension "
                                 f"{';'.join(alternatives)!r} (the sample has "
                                 f"{sorted(group)}); missing='skip' leaves such samples "
                                 f"out, missing='none' gives None")
            if choice is None and missing == "skip":
                return
            found.append((choice, None if choice is None else group[alternatives[choice]]))
        self.shard_of.append(shard)
        self.keys.append(key.encode("utf-8", "surrogateescape"))
        for field, (choice, position) in enumerate(found):
            small = position is not None and field > 0 and bool(members.is_inline[position])
            self.choices.append(choice or 0)
            self.offsets.append(-1 if position is None else members.offsets[position])
            self.sizes.append(-1 if position is None else members.sizes[position])
            self.is_inline.append(small)
            self.inline.append(members.inline[position] if small else b"")

    def index(self, urls) -> ShardIndex:
        shape = (len(self.keys), len(self.fields))
        return ShardIndex(urls, self.fields, np.array(self.shard_of, dtype=np.int32),
                          Packed(self.keys),
                          np.array(self.offsets, dtype=np.int64).reshape(shape),
                          np.array(self.sizes, dtype=np.int64).reshape(shape),
                          np.array(self.choices, dtype=np.uint8).reshape(shape),
                          Packed(self.inline), np.array(self.is_inline, bool).reshape(shape))
