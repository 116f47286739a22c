"""Seekable copies of webdataset tar shards: every JPEG member rewritten losslessly with
restart markers (`decode.add_restart_markers`), every other member kept byte for byte.

    report = make_seekable_shards("/data/train-{0000..0099}.tar", "/data/train-seekable")
    train = TarShards("/data/train-seekable/train-{0000..0099}.tar")  # same samples

Each shard is written under `destination` with its own file name: the same members, names,
order and headers (owner, mode, mtime), in tarfile's POSIX pax format, as webdataset's
ShardWriter writes them, so `tar -tf`, webdataset and TarShards list the same members. A
member is a JPEG by its bytes (`decode.is_jpeg`), whatever its extension. The shard is
written to `<name>.partial` and renamed when whole, so a stopped copy leaves no shard that
looks complete. Sidecar indexes (`<shard>.idx`) are not copied: the offsets change.
"""
from __future__ import annotations

import copy
import glob
import io
import os
import tarfile
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from pimloader.decode.seekable import SeekableCopy, check_copy_arguments, seekable_version

from .shard_members import is_http, local_path, scan_local
from .shards import expand_urls

CALLER = "make_seekable_shards"


def make_seekable_shards(shards, destination, *, max_interval: int = 4,
                         overwrite: bool = False, threads: int | None = None,
                         progress: Callable[[int, int], None] | None = None) -> SeekableCopy:
    """Copy local tar shards into the folder `destination` with every JPEG member rewritten
    by `decode.add_restart_markers` (the same pixels for every decoder; pimloader then
    decodes a crop from the restart intervals around it), as `decode.make_seekable` copies
    an image folder.

    shards: a path, a brace pattern ("train-{0000..0099}.tar", as TarShards expands it), a
    list of them, or a folder (its `*.tar` files). A JPEG member libjpeg cannot read whole
    is copied unchanged and listed in `unreadable` as "<shard path>#<member name>"; other
    members are counted in `copied`. `destination` must not exist, unless
    `overwrite=True`. JPEGs are rewritten on `threads` threads (default: one per CPU),
    shards one after another. `progress`, if given, is called as
    `progress(members_done, members_in_all)` after each regular member."""
    paths = shard_paths(shards)
    destination = os.fspath(destination)
    targets = _targets(paths, destination)
    check_copy_arguments(CALLER, destination, overwrite, progress)
    total = sum(len(scan_local(path)) for path in paths)  # checks every header first
    os.makedirs(destination, exist_ok=True)
    report, done = SeekableCopy(0, 0, [], 0, 0), 0
    workers = threads or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for path, target in zip(paths, targets):
            for outcome in _copy_shard(path, target, _Rewriter(pool, 4 * workers,
                                                               max_interval)):
                report.count(*outcome)
                done += 1
                if progress is not None:
                    progress(done, total)
    return report


def shard_paths(shards) -> list:
    """The local shard files `shards` names (see make_seekable_shards), checked."""
    if isinstance(shards, (str, os.PathLike)) and os.path.isdir(shards):
        paths = sorted(glob.glob(os.path.join(glob.escape(os.fspath(shards)), "*.tar")))
        if not paths:
            raise FileNotFoundError(f"{CALLER}: no .tar files in {os.fspath(shards)!r}")
        return paths
    if isinstance(shards, (list, tuple)) and not shards:
        raise ValueError(f"{CALLER}: no shards given")
    paths = []
    for url in expand_urls(shards):
        if is_http(url):
            raise ValueError(f"{CALLER}: {url!r}: only local shards can be copied (download "
                             f"it first)")
        path = local_path(url)
        if os.path.isdir(path):
            raise ValueError(f"{CALLER}: {path!r} is a folder: give it alone (its *.tar "
                             f"files are copied) or its shards")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{CALLER}: shard {path!r} does not exist")
        paths.append(path)
    return paths


def _targets(paths: list, destination: str) -> list:
    targets = [os.path.join(destination, os.path.basename(path)) for path in paths]
    named = Counter(targets)
    for path, target in zip(paths, targets):
        if named[target] > 1:
            raise ValueError(f"{CALLER}: two shards named {os.path.basename(path)!r}: their "
                             f"copies would both be {target!r}")
        if os.path.exists(target) and os.path.samefile(path, target):
            raise ValueError(f"{CALLER}: {path!r} would be overwritten by its own copy "
                             f"(choose another destination)")
    return targets


class _Rewriter:
    """seekable_version of members run on a thread pool, `window` at most in flight, the
    results in the members' order."""

    def __init__(self, pool, window: int, max_interval: int) -> None:
        self.pool, self.window, self.max_interval = pool, window, max_interval

    def rewritten(self, shard: str, members):
        """(info, data, (kind, bytes to write)) for each (info, data) of a regular member,
        (info, None, None) for another entry."""
        pending: deque = deque()
        for member in members:
            pending.append(self.pool.submit(self._rewrite, shard, *member))
            if len(pending) >= self.window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def _rewrite(self, shard: str, info: tarfile.TarInfo, data):
        if data is None:
            return info, None, None
        return info, data, seekable_version(data, self.max_interval, f"{shard}#{info.name}")


def _copy_shard(path: str, target: str, rewriter: _Rewriter):
    """Writes the seekable copy of one shard; yields (kind, name, bytes before, bytes after)
    for each regular member, in order."""
    partial = target + ".partial"
    try:
        with tarfile.open(path, "r:") as source, \
                tarfile.open(partial, "w", format=tarfile.PAX_FORMAT,
                             pax_headers=source.pax_headers) as sink:
            members = ((info, source.extractfile(info).read() if info.isreg() else None)
                       for info in source)
            for info, data, outcome in rewriter.rewritten(path, members):
                if outcome is None:
                    sink.addfile(info)
                    continue
                kind, written = outcome
                sink.addfile(_header(info, len(written)), io.BytesIO(written))
                yield kind, f"{path}#{info.name}", len(data), len(written)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    os.replace(partial, target)


def _header(info: tarfile.TarInfo, size: int) -> tarfile.TarInfo:
    """`info` with the new size (a pax size record the original carried dropped with it)."""
    header = copy.copy(info)
    header.size = size
    header.pax_headers = {key: value for key, value in info.pax_headers.items()
                          if key != "size"}
    return header
