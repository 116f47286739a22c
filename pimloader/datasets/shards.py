"""Tar shards (webdataset's format) as a map-style dataset of encoded bytes.

    dataset = TarShards("data/shard-{0000..0009}.tar", keys=("jpg;png", "cls"))
    dataset = TarShards("http://host/shard-{0000..0009}.tar", keys="jpg;png cls")
    len(dataset); image_bytes, label = dataset[17]      # as webdataset's .to_tuple(...)

Shards are local paths, file:// or http(s):// URLs, brace patterns expanded as webdataset
expands them. Members are grouped into samples by webdataset's key rule (shard_index.py);
an item is a tuple with one value per field: the first field's bytes as they are (the image
or audio member, for the loader's Decode step or torchvision's decode_image), the others
decoded by extension (cls -> int, txt -> str, json -> object, others bytes).

The index (shard, key, per field the member's offset and size) is built once, in the
process that makes the dataset, from the tar headers (shard_members.py: seeks on local
files, one streaming pass, a sidecar `<shard>.idx` or the local cache over HTTP), and kept in
numpy arrays. Members are read in the process that asks for them (shard_reader.py), over
files and connections opened there on first use, never pickled; `prefetch(indices)` (the
loader calls it with each batch, and with the next batch while it makes this one) has
their members fetched ahead over HTTP, in runs, by a thread of the reader's own.
A member whose bytes cannot be read whole (a shard cut short) is a `ShardMemberError` (a
DecodeError: the loader's on_error="skip" drops and counts it) naming "<shard url>#<key>";
an HTTP server that fails past the retries is an `HttpShardError` (http.py), raised
whatever on_error says.
"""
from __future__ import annotations

import os
import re
import threading

from torch.utils.data import Dataset

from pimloader.decode.errors import DecodeError

from .http import HttpClient, RetryPolicy
from .shard_index import ShardIndex, decode_target, parse_fields
from .shard_members import is_http, member_list
from .shard_reader import ShardReader
from .source import EncodedSample, Source, register_source

AUDIO_EXTENSIONS = frozenset({"wav", "flac", "mp3", "ogg", "opus"})


class ShardMemberError(DecodeError):
    """A member of a shard whose bytes cannot be read whole."""


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pimloader", "shards")


def expand_urls(urls) -> list:
    """A URL, a brace pattern ("shard-{0000..0009}.tar", "{a,b}.tar") or a list of them,
    as a list of URLs (numeric ranges keep their zero padding, as braceexpand's)."""
    if isinstance(urls, (str, os.PathLike)):
        urls = [os.fspath(urls)]
    expanded = []
    for url in urls:
        expanded.extend(_expand(os.fspath(url)))
    if not expanded:
        raise ValueError("TarShards: no shard URLs given")
    return expanded


_BRACE = re.compile(r"\{([^{}]*)\}")


def _expand(pattern: str) -> list:
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    head, tail, body = pattern[:match.start()], pattern[match.end():], match.group(1)
    numeric = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if numeric:
        first, last = numeric.groups()
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        step = 1 if int(last) >= int(first) else -1
        choices = [str(n).zfill(width) for n in range(int(first), int(last) + step, step)]
    else:
        choices = body.split(",")
    return [url for choice in choices for url in _expand(head + choice + tail)]


class TarShards(Dataset):
    """Tar shards' samples as tuples (bytes of the first field, decoded targets).

    urls: a URL / path / brace pattern or a list of them. keys: the fields, webdataset's
    to_tuple spelling. missing: "error", "skip" or "none" (shard_index.py). attempts,
    backoff, timeout: the HTTP retry policy (http.py). cache_dir: where HTTP shards' member
    lists are cached (None: no cache; default ~/.cache/pimloader/shards)."""

    def __init__(self, urls, keys=("jpg;png", "cls"), missing: str = "error",
                 attempts: int = 5, backoff: float = 0.2, timeout: float = 30.0,
                 cache_dir="default") -> None:
        self.urls = expand_urls(urls)
        self.fields = parse_fields(keys)
        self.policy = RetryPolicy(attempts, backoff, timeout)
        cache_dir = default_cache_dir() if cache_dir == "default" else cache_dir
        client = HttpClient(self.policy)
        try:
            lists = [member_list(url, client, cache_dir) for url in self.urls]
        finally:
            client.close()
        self.index = ShardIndex.build(self.urls, lists, self.fields, missing)
        self.remote = any(is_http(url) for url in self.urls)
        self._readers: dict = {}   # (process id, thread id) -> ShardReader

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, index: int) -> tuple:
        index = range(len(self))[index]
        return tuple(self.field(index, field) for field in range(len(self.fields)))

    @property
    def shard_bounds(self):
        """Samples of shard s are shard_bounds[s]:shard_bounds[s + 1] (numpy int64)."""
        return self.index.shard_bounds

    def name(self, index: int) -> str:
        """"<shard url>#<key>": how errors name sample `index`."""
        return f"{self.index.url(index)}#{self.index.key(index)}"

    def field(self, index: int, field: int):
        """The value of field `field` of sample `index` (None when it is missing)."""
        member = self.index.member(index, field)
        if member is None:
            return None
        data = self.index.inline_bytes(index, field)
        if data is None:
            data = self.member_bytes(index, member)
        if field == 0:
            return data
        try:
            return decode_target(member[2], data)
        except ValueError as error:
            raise ShardMemberError(f"{self.name(index)}: its .{member[2]} member does not "
                                   f"decode: {error}", self.name(index), str(error)) from None

    def member_bytes(self, index: int, member) -> bytes:
        offset, size, extension = member
        data = self.reader().read(self.index.url(index), offset, size)
        if len(data) != size:
            raise ShardMemberError(
                f"{self.name(index)}: truncated tar: its .{extension} member needs bytes "
                f"{offset}..{offset + size} but the shard ends at byte {offset + len(data)}",
                self.name(index), "truncated tar")
        return data

    def prefetch(self, indices) -> None:
        """Fetch the members of samples `indices` (to be read by this thread) ahead:
        over HTTP, runs of adjacent members in one bounded request each, fetched in the
        background in the order asked and held until each member has been read once.
        Returns at once; errors are raised by the reads they concern."""
        if not self.remote:
            return
        try:
            members = self.index.spans(indices)
        except (TypeError, ValueError, IndexError):
            return   # indices that the reads refuse, each with its own error
        self.reader().prefetch(members)

    def reader(self) -> ShardReader:
        """This thread's reader (a forked or spawned worker, another thread, makes its own:
        a reader's streams are read by one thread)."""
        identity = (os.getpid(), threading.get_ident())
        reader = self._readers.get(identity)
        if reader is None:
            if any(pid != identity[0] for pid, _ in self._readers):
                self._readers = {}   # inherited over fork: the parent's, left to it
            reader = self._readers[identity] = ShardReader(self.policy)
        return reader

    def close(self) -> None:
        """Close this process's files and connections (reads reopen them)."""
        readers, self._readers = self._readers, {}
        for (pid, _), reader in readers.items():
            if pid == os.getpid():
                reader.close()

    def __enter__(self) -> "TarShards":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_readers"] = {}
        return state

    def __repr__(self) -> str:
        return (f"TarShards({len(self.urls)} shards, {len(self)} samples, fields="
                f"{[';'.join(f) for f in self.fields]}, index {self.index.nbytes} bytes)")


class TarShardSource(Source):
    """A TarShards as a source: the first field's bytes, the rest as the target (one value,
    a tuple of several, or None when there is no other field)."""

    encoded_items = True

    def __init__(self, dataset: TarShards) -> None:
        self.dataset = dataset
        data_kind = "audio" if AUDIO_EXTENSIONS & set(dataset.fields[0]) else "image"
        self.fields = frozenset({data_kind, "label"})

    def __len__(self) -> int:
        return len(self.dataset)

    def metadata(self, index: int) -> tuple:
        targets = [self.dataset.field(index, f) for f in range(1, len(self.dataset.fields))]
        target = None if not targets else targets[0] if len(targets) == 1 else tuple(targets)
        return target, self.dataset.name(index)

    @property
    def prefetches(self) -> bool:
        return self.dataset.remote

    def prefetch(self, indices) -> None:
        self.dataset.prefetch(indices)

    def read(self, index: int) -> EncodedSample:
        target, name = self.metadata(index)
        return EncodedSample(self.dataset.field(index, 0), target, name)

    def key(self, index: int) -> bytes:
        return self.dataset.name(index).encode("utf-8", "surrogateescape")


register_source(TarShards, TarShardSource)
