"""Several byte ranges of one resource in one GET, answered as multipart/byteranges
(RFC 9110, 14.6).

    left, parted = read_ranges(client, url, [(start, end), ...], deliver)

The members a batch reads from one shard under random access (shuffle=True) lie apart,
a run each: read one request each, an epoch of 600 photos is 600 requests, and each costs a
round trip to a remote store, and CPU here and at the server (http.client's request and
header parse, the syscalls: 230-270 us per 44 KB member from nginx on loopback, asked one
at a time in a loop, against 60 us asked 16 at a time; through the loader, 2 workers, the
difference was within the noise of the run, the requests 1,620 -> 175 for 3 epochs).
One GET whose Range lists them all is answered with a part per range, each with its own
Content-Range, in the order asked (nginx). A server may also answer 200 with the whole
body, or one range over them all, and a store that takes one range a request refuse them
(Alibaba's OSS answers 416; S3 does not take several either). `deliver(i, data)` is called
as each part arrives, so the first member is decoded while the others come. What is not
delivered (the server answered otherwise, the request failed, the answer broke off) is
returned for the caller to read range by range, with the retries and the errors of a
single read: nothing is retried here.
"""
from __future__ import annotations

import http.client

from .http import HttpClient, HttpShardError, _Retryable

MAX_LINE = 1024   # a part's delimiter and header lines are short; a longer line is no part's


def read_ranges(client: HttpClient, url: str, spans, deliver) -> tuple[list, bool]:
    """One GET of the ranges `spans` [(start, end)] of `url`, `deliver(i, bytes)` called
    for each part. Returns (the indices of the spans not delivered, in order; whether the
    server answered in parts, or may: False after a whole body, one range or a 4xx)."""
    left = dict.fromkeys(range(len(spans)))
    place = {(start, end): i for i, (start, end) in enumerate(spans)}
    asked = "bytes=" + ",".join(f"{start}-{end - 1}" for start, end in spans)
    try:
        connection, response = client.request("GET", url, {"Range": asked})
    except _Retryable:       # a reset, a timeout, a 5xx: the single reads retry
        return list(left), True
    except HttpShardError:   # a 4xx: the ranges refused (416 from a store that takes one)
        return list(left), False
    boundary = _boundary(response)
    if boundary is None:   # the whole body, or one range over all: read no further
        connection.close()
        return list(left), False
    try:
        while (span := _next_part(response, boundary)) is not None:
            i = place.get(span)
            if i not in left:
                raise ValueError(f"a part of bytes {span[0]}..{span[1]} not asked for")
            data = response.read(span[1] - span[0])
            if len(data) != span[1] - span[0]:
                raise ValueError("a part cut short")
            del left[i]
            deliver(i, data)
    except (OSError, http.client.HTTPException, ValueError):
        connection.close()
        return list(left), True
    client.release(url, connection, response, drain=True)
    return list(left), True


def _boundary(response) -> bytes | None:
    """The parts' boundary of a 206 multipart/byteranges answer; None for any other."""
    kind = response.getheader("Content-Type") or ""
    media, *params = kind.split(";")
    if response.status != 206 or media.strip().lower() != "multipart/byteranges":
        return None
    for param in params:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1")
    return None


def _next_part(response, boundary: bytes) -> tuple[int, int] | None:
    """(start, end) of the next part, its headers read; None at the closing delimiter."""
    delimiter = b"--" + boundary
    while not (line := _line(response)).startswith(delimiter):
        pass   # the CRLF that ends a part's data (or a preamble)
    if line[len(delimiter):].startswith(b"--"):
        return None
    span = None
    while (line := _line(response)).strip():
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-range":
            span = _content_range(value)
    if span is None:
        raise ValueError("a part without a Content-Range")
    return span


def _line(response) -> bytes:
    line = response.readline(MAX_LINE)
    if not line:
        raise ValueError("the answer ended inside its parts")
    return line


def _content_range(value: bytes) -> tuple[int, int]:
    """b" bytes 0-99/4096" -> (0, 100)."""
    try:
        first, _, last = value.split()[1].partition(b"/")[0].partition(b"-")
        return int(first), int(last) + 1
    except (IndexError, ValueError):
        raise ValueError(f"a bad Content-Range {value!r}") from None
