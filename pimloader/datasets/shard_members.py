"""Where a shard's member list comes from: its headers, its sidecar, or the local cache.

    members = member_list(url, client, cache_dir)      # a tar_scan.MemberList
    write_sidecar("shards/shard-0003.tar")             # writes shards/shard-0003.tar.idx

A local shard (a path or a file:// URL) is scanned from header to header with seeks, its
members' data never read (but the small ones'). An HTTP shard is asked for its size, ETag
and Last-Modified (HEAD); its member list is then taken from the local cache when an entry
for that URL, size and ETag / Last-Modified is there, else from its sidecar `<url>.idx`
when the server has one (and it was written for a shard of that size), else from one
streaming pass over the shard; what was found goes into the cache. A sidecar is the member
list as `np.savez` writes it (numpy arrays only, read without pickle), made by
`write_sidecar` or `python -m pimloader.datasets.shard_members SHARD...`.
"""
from __future__ import annotations

import hashlib
import io
import os
import sys
import urllib.parse

import numpy as np

from .http import HttpClient, HttpStream
from .tar_scan import MemberList, scan_tar

SIDECAR_SUFFIX = ".idx"
FORMAT = np.array([1], dtype=np.int64)   # the sidecar / cache format's version


def is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def local_path(url: str) -> str:
    """The file a local shard's URL names (a path, or a file:// URL)."""
    if url.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    return url


def member_list(url: str, client: HttpClient, cache_dir) -> MemberList:
    if not is_http(url):
        return scan_local(url)
    info = client.head(url)
    cache_file = _cache_file(cache_dir, url, info)
    members = _load(cache_file) if cache_file else None
    if members is None:
        members = _sidecar(url, client, info.size)
    if members is None:
        stream = HttpStream(client, url)
        try:
            members = scan_tar(stream, url, info.size)
        finally:
            stream.close()
    if cache_file and not os.path.exists(cache_file):
        _save(members, cache_file)
    return members


def scan_local(url: str) -> MemberList:
    with open(local_path(url), "rb") as file:
        stream = _SeekingStream(file)
        return scan_tar(stream, url, stream.size)


def write_sidecar(shard, out=None) -> str:
    """Write the member list of the local tar `shard` to `out` (default `<shard>.idx`),
    for an HTTP server to serve beside the shard; the path written."""
    shard = os.fspath(shard)
    out = os.fspath(out) if out is not None else shard + SIDECAR_SUFFIX
    _save(scan_local(shard), out)
    return out


def _sidecar(url: str, client: HttpClient, shard_size: int) -> MemberList | None:
    data = client.get(url + SIDECAR_SUFFIX)
    if data is None:
        return None
    members = _parse(data, url + SIDECAR_SUFFIX)
    return members if members.shard_size == shard_size else None   # a stale sidecar


def _cache_file(cache_dir, url: str, info) -> str | None:
    if cache_dir is None or not (info.etag or info.last_modified):
        return None   # nothing says when the shard changes: no cache
    identity = "\n".join([url, str(info.size), info.etag, info.last_modified])
    return os.path.join(os.fspath(cache_dir), hashlib.sha256(identity.encode()).hexdigest()
                        + SIDECAR_SUFFIX)


def _load(path: str) -> MemberList | None:
    try:
        with open(path, "rb") as file:
            return _parse(file.read(), path)
    except (OSError, ValueError):
        return None   # absent, or unreadable: scanned again and rewritten


def _parse(data: bytes, name: str) -> MemberList:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            if not np.array_equal(arrays["format"], FORMAT):
                raise ValueError(f"format {arrays['format']}")
            return MemberList.from_arrays(arrays)
    except (OSError, KeyError, ValueError) as error:
        raise ValueError(f"{name}: not a shard index ({error})") from None


def _save(members: MemberList, path: str) -> None:
    """Written to a temporary file first and renamed, so that a reader never sees half."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, format=FORMAT, **members.to_arrays())
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        file.write(buffer.getvalue())
    os.replace(temporary, path)


class _SeekingStream:
    """A local file as scan_tar reads it: skip() seeks, never past the end."""

    def __init__(self, file) -> None:
        self.file = file
        self.size = os.fstat(file.fileno()).st_size

    def read(self, size: int) -> bytes:
        return self.file.read(size)

    def skip(self, size: int) -> int:
        position = self.file.tell()
        skipped = max(0, min(size, self.size - position))
        self.file.seek(position + skipped)
        return skipped


def main(argv=None) -> int:
    shards = sys.argv[1:] if argv is None else argv
    if not shards:
        print("usage: python -m pimloader.datasets.shard_members SHARD.tar...  (writes "
              "SHARD.tar.idx beside each)", file=sys.stderr)
        return 2
    for shard in shards:
        print(write_sidecar(shard))
    return 0


if __name__ == "__main__":
    sys.exit(main())
