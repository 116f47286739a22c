"""A named group of jobs sharing one stream of prepared batches: its address, its messages
and what a job must agree on to join (docs/loader.md "Coordinated prep").

The group is a Unix socket in Linux's abstract namespace, `\\0pimloader.share.<name>`: the
first job to bind it produces, the others connect to it. An abstract name is no file, so
nothing is left behind when the jobs end, however they end; each connection is also how
either side learns that the other is gone (end of file, at once, on SIGKILL too).

Messages are pickled Python values, each behind a header of its length and of the number
of file descriptors it carries (SCM_RIGHTS): a batch slot's memory travels as a descriptor
the first time a consumer sees that slot.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import select
import socket
import struct
import sys
import time

_ADDRESS_PREFIX = b"\0pimloader.share."
_MAX_NAME_BYTES = 90          # sun_path holds 108 bytes, the prefix included
_HEADER = struct.Struct("<QI")  # payload bytes, file descriptors
_MAX_FDS = 4
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CONNECT_RETRY_S = 5.0        # the producer has bound the name but is not listening yet


def check_share_arguments(share_with, share_jobs) -> None:
    """`share_with`: the group's name (None: no sharing); `share_jobs`: how many jobs, the
    producer included, read the group's batches."""
    if share_with is None:
        if share_jobs is not None:
            raise ValueError("share_jobs is given without share_with: name the group "
                             "(share_with='...') or leave share_jobs out")
        return
    if not isinstance(share_with, str) or not share_with.isprintable() or not share_with:
        raise ValueError(f"share_with must be a non-empty printable str naming the group, "
                         f"got {share_with!r}")
    if len(share_with.encode()) > _MAX_NAME_BYTES:
        raise ValueError(f"share_with names a group in at most {_MAX_NAME_BYTES} bytes, "
                         f"got {len(share_with.encode())}")
    if isinstance(share_jobs, bool) or not isinstance(share_jobs, int) or share_jobs < 2:
        raise ValueError(f"share_jobs must be an int >= 2 (the jobs of the group, this one "
                         f"included) when share_with is given, got {share_jobs!r}")
    if not sys.platform.startswith("linux"):
        raise ValueError("share_with needs Linux (the group is an abstract Unix socket)")


def address(name: str) -> bytes:
    return _ADDRESS_PREFIX + name.encode()


def bind_or_connect(name: str) -> tuple[socket.socket, bool]:
    """The group's socket and whether this job produces: a listening socket if this job
    bound the name first, else a connection to the job that did."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(name))
    except OSError:
        listener.close()
        return _connect(name), False
    listener.listen(64)
    return listener, True


def _connect(name: str) -> socket.socket:
    deadline = time.monotonic() + _CONNECT_RETRY_S
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(address(name))
            return connection
        except (ConnectionRefusedError, FileNotFoundError):
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def peer(connection: socket.socket) -> tuple[int, int]:
    """The pid and user id of the process at the other end (the kernel's word for it)."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                        _CREDENTIALS.size)
    pid, uid, _gid = _CREDENTIALS.unpack(credentials)
    return pid, uid


def send(connection: socket.socket, message, fds=()) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(len(payload), len(fds))
    if fds:
        socket.send_fds(connection, [header], list(fds))
    else:
        connection.sendall(header)
    connection.sendall(payload)


def readable(connection: socket.socket, timeout: float | None) -> bool:
    return bool(select.select([connection], [], [], timeout)[0])


def receive(connection: socket.socket) -> tuple[object, list[int]]:
    """The next message and the descriptors it carries; EOFError once the peer is gone."""
    try:
        header, fds, _, _ = socket.recv_fds(connection, _HEADER.size, _MAX_FDS)
    except ConnectionResetError:
        raise EOFError from None
    if not header:
        raise EOFError
    header += _read_exactly(connection, _HEADER.size - len(header))
    length, _ = _HEADER.unpack(header)
    return pickle.loads(_read_exactly(connection, length)), fds


def _read_exactly(connection: socket.socket, length: int) -> bytes:
    parts = []
    while length:
        part = connection.recv(min(length, 1 << 20))
        if not part:
            raise EOFError
        parts.append(part)
        length -= len(part)
    return b"".join(parts)


def configuration(loader, transform, options) -> dict[str, str]:
    """What every job of a group must agree on: everything that decides the batches (the
    dataset by class, length and root; the sampler, batching, seeds, workers, transform and
    pipeline options), each as text so that a refusal can name what differs."""
    dataset = loader.dataset
    try:
        length = len(dataset)
    except TypeError:
        length = None
    generator = loader.generator
    return {
        "dataset": f"{_name(dataset)} len={length} "
                   f"root={getattr(dataset, 'root', None)!r} "
                   f"transform={getattr(dataset, 'transform', None)!r}",
        "sampler": _name(loader.sampler), "batch_sampler": _name(loader.batch_sampler),
        "batch_size": repr(loader.batch_size), "drop_last": repr(loader.drop_last),
        "generator": repr(None if generator is None else generator.initial_seed()),
        "num_workers": repr(loader.num_workers),
        "persistent_workers": repr(loader.persistent_workers),
        "collate_fn": _name(loader.collate_fn), "worker_init_fn": _name(loader.worker_init_fn),
        "transform": repr(transform), "pipeline": repr(options),
    }


def _name(value) -> str:
    if value is None:
        return "None"
    kind = value if callable(value) and hasattr(value, "__qualname__") else type(value)
    module = getattr(kind, "__module__", "")
    # a spawned job imports the main script as __mp_main__
    return f"{'__main__' if module == '__mp_main__' else module}.{kind.__qualname__}"


def fingerprint(config: dict[str, str]) -> str:
    return hashlib.sha256(repr(sorted(config.items())).encode()).hexdigest()


def differences(mine: dict[str, str], theirs: dict[str, str]) -> str:
    keys = sorted(key for key in {*mine, *theirs} if mine.get(key) != theirs.get(key))
    return "; ".join(f"{key}: {theirs.get(key)} here, {mine.get(key)} in the group"
                     for key in keys)


def shared_bytes(nbytes: int, label: str):
    """An anonymous shared file (memfd: no /dev/shm name) of `nbytes`, mapped: (fd, map)."""
    import mmap
    fd = os.memfd_create(label, os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    return fd, mmap.mmap(fd, nbytes)
