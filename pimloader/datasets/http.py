"""Reading shards over HTTP: kept-alive connections, streaming reads, retries with backoff.

    client = HttpClient(RetryPolicy(attempts=5, backoff=0.2, timeout=30.0))
    client.head(url)                       # HeadInfo(size, etag, last_modified)
    stream = HttpStream(client, url, start=4096)      # the bytes from 4096 to the end
    stream.read(1000); stream.skip(512); stream.close()

One `HttpStream` is one streaming GET (`Range: bytes=start-` or `start-end`): it reads
forward without holding the body in memory. A connection reset, a timeout, a 5xx status or
a body that ends before its Content-Length is retried after `backoff * 2**k` seconds, the
request reopened at the byte where the stream stopped; after `attempts` failures in a row it
gives up with an `HttpShardError` naming the URL, the status or cause and the attempts. A
4xx status (404...) is never retried. A server that ignores Range (Python's http.server)
answers 200 with the whole body: the stream then skips to its start. Connections are kept
alive between streams that were read to their end (the client keeps one idle connection per
host); a stream closed early closes its connection. Nothing here is opened at pickle time:
the client belongs to the process that made it.
"""
from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional

CHUNK = 1 << 20
DRAIN = 64 << 10   # a response with no more left than this is read out to keep its connection


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5        # tries of one request before giving up (1: no retry)
    backoff: float = 0.2     # seconds before the first retry, doubled after each
    timeout: float = 30.0    # seconds a connect or a read may wait for the server

    def __post_init__(self):
        if self.attempts < 1 or self.backoff < 0 or self.timeout <= 0:
            raise ValueError(f"RetryPolicy: attempts >= 1, backoff >= 0 and timeout > 0, got "
                             f"{self}")


class HttpShardError(OSError):
    """An HTTP read that failed: `url`, the last `status` (None when no response came) and
    the `attempts` made."""

    def __init__(self, message: str, url: str = "", status: Optional[int] = None,
                 attempts: int = 0) -> None:
        super().__init__(message)
        self.url, self.status, self.attempts = url, status, attempts

    def __reduce__(self):
        return (type(self), (str(self), self.url, self.status, self.attempts))


class _Retryable(Exception):
    def __init__(self, cause: str, status: Optional[int] = None) -> None:
        super().__init__(cause)
        self.cause, self.status = cause, status


@dataclass(frozen=True)
class HeadInfo:
    size: int
    etag: str
    last_modified: str


class HttpClient:
    """Connections to HTTP servers, one idle kept-alive connection per host, and the retry
    policy of every request made through it."""

    def __init__(self, policy: RetryPolicy = RetryPolicy()) -> None:
        self.policy = policy
        self.idle: dict = {}

    def head(self, url: str) -> HeadInfo:
        """The size, ETag and Last-Modified of `url` (retried as any request). A server that
        refuses HEAD (405; 403 as a URL signed for GET only gets) is asked for byte 0."""
        try:
            response = self._headers("HEAD", url, {})
        except HttpShardError as error:
            if error.status not in (403, 405):
                raise
            response = self._headers("GET", url, {"Range": "bytes=0-0"})
        size = response.getheader("Content-Length")
        if response.status == 206:
            size = (response.getheader("Content-Range") or "").rpartition("/")[2]
        if not (size or "").isdigit():
            raise HttpShardError(f"HEAD {url}: the server did not give the size", url,
                                 response.status, 1)
        return HeadInfo(int(size), response.getheader("ETag") or "",
                        response.getheader("Last-Modified") or "")

    def _headers(self, method: str, url: str, headers: dict):
        """The response of a request whose body is empty or small (read out)."""
        failures = _Failures(self.policy, method, url)
        while True:
            try:
                connection, response = self.request(method, url, headers)
            except _Retryable as error:
                failures.add(error)
                continue
            self.release(url, connection, response, drain=True)
            return response

    def get(self, url: str) -> Optional[bytes]:
        """The whole body of a small resource (a sidecar index); None on a 404."""
        stream = HttpStream(self, url)
        try:
            return stream.read_all()
        except HttpShardError as error:
            if error.status == 404:
                return None
            raise
        finally:
            stream.close()

    def request(self, method: str, url: str, headers: dict):
        """(connection, response) of one request with a 2xx answer; _Retryable on a reset,
        a timeout or a 5xx; HttpShardError on a 4xx."""
        parts = urllib.parse.urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        connection = self.idle.pop(parts.netloc, None)
        response = None
        if connection is not None:
            try:
                response = self._send(connection, method, target, headers)
            except (ConnectionError, http.client.BadStatusLine):
                # a kept connection that the server has closed since: one more try on a new
                # connection, not counted as an attempt
                connection.close()
        if response is None:
            connection = self._connect(parts)
            try:
                response = self._send(connection, method, target, headers)
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                raise _Retryable(_cause(error, self.policy)) from None
        if 200 <= response.status < 300:
            return connection, response
        self.release(url, connection, response, drain=True)
        status = f"HTTP {response.status} {response.reason}"
        if response.status >= 500:
            raise _Retryable(status, response.status)
        raise HttpShardError(f"{method} {url}: {status} (not retried)", url, response.status, 1)

    @staticmethod
    def _send(connection, method: str, target: str, headers: dict):
        connection.request(method, target, headers=headers)
        return connection.getresponse()

    def release(self, url: str, connection, response, drain: bool = False) -> None:
        """Keep `connection` for the next request to its host when its response was read to
        the end (or, with `drain`, has at most DRAIN bytes left, read and thrown away) and the
        server keeps it open; close it otherwise."""
        if drain and not response.isclosed() and (response.length or 0) <= DRAIN:
            try:
                response.read()
            except (OSError, http.client.HTTPException):
                pass
        netloc = urllib.parse.urlsplit(url).netloc
        if response.isclosed() and not response.will_close and netloc not in self.idle:
            self.idle[netloc] = connection
        else:
            connection.close()

    def close(self) -> None:
        for connection in self.idle.values():
            connection.close()
        self.idle.clear()

    def _connect(self, parts):
        kind = {"http": http.client.HTTPConnection,
                "https": http.client.HTTPSConnection}.get(parts.scheme)
        if kind is None:
            raise ValueError(f"not an http(s) URL: {urllib.parse.urlunsplit(parts)}")
        return kind(parts.netloc, timeout=self.policy.timeout)


class HttpStream:
    """The bytes of `url` from `start` to `end` (exclusive; None: the end of the resource),
    read forward over one streaming GET, reopened where it stopped after a failure."""

    def __init__(self, client: HttpClient, url: str, start: int = 0,
                 end: Optional[int] = None) -> None:
        self.client, self.url, self.position, self.end = client, url, start, end
        self.connection = self.response = None
        self.resource_end: Optional[int] = None   # where the server said the body ends
        self.ranges_ignored = False   # the server answered a Range with the whole body

    def read(self, size: int) -> bytes:
        """`size` bytes, fewer only where the resource ends."""
        parts, wanted = [], size
        failures = _Failures(self.client.policy, "GET", self.url)
        while wanted > 0:
            try:
                chunk = self._next(min(wanted, CHUNK))
            except _Retryable as error:
                self._drop()
                failures.add(error)
                continue
            if not chunk:
                break
            parts.append(chunk)
            wanted -= len(chunk)
            self.position += len(chunk)
        return b"".join(parts)

    def skip(self, size: int) -> int:
        """Skip `size` bytes (read and thrown away); the bytes skipped."""
        skipped = 0
        while skipped < size:
            chunk = self.read(min(size - skipped, CHUNK))
            if not chunk:
                break
            skipped += len(chunk)
        return skipped

    def read_all(self) -> bytes:
        parts = []
        while chunk := self.read(CHUNK):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self.response is not None:
            self.client.release(self.url, self.connection, self.response, drain=True)
        self.connection = self.response = None

    def _next(self, size: int) -> bytes:
        if self.end is not None:
            size = min(size, self.end - self.position)
            if size <= 0:
                return b""
        if self.response is None:
            self._open()
        if self.resource_end is not None and self.position >= self.resource_end:
            return b""
        try:
            chunk = self.response.read(size)
        except (OSError, http.client.HTTPException) as error:
            raise _Retryable(_cause(error, self.client.policy)) from None
        if not chunk and self.resource_end is not None and self.position < self.resource_end:
            raise _Retryable(f"the body stopped at byte {self.position} of "
                             f"{self.resource_end}")
        return chunk

    def _open(self) -> None:
        headers = {}
        if self.position or self.end is not None:
            last = "" if self.end is None else str(self.end - 1)
            headers["Range"] = f"bytes={self.position}-{last}"
        try:
            self.connection, self.response = self.client.request("GET", self.url, headers)
        except HttpShardError as error:
            if error.status == 416:   # the range starts past the end: nothing to read
                self.resource_end = self.position
                return self._drop()
            raise
        length = self.response.getheader("Content-Length")
        if self.response.status == 206:
            first = _range_start(self.response.getheader("Content-Range"))
            if first != self.position:
                raise HttpShardError(f"GET {self.url}: the server sent bytes from {first}, "
                                     f"not {self.position}", self.url, 206, 1)
            self.resource_end = None if length is None else self.position + int(length)
        else:   # 200: the whole body (the server ignores Range): skip to the position
            self.ranges_ignored = "Range" in headers
            self.resource_end = None if length is None else int(length)
            self._discard(self.position)

    def _discard(self, size: int) -> None:
        while size > 0:
            try:
                chunk = self.response.read(min(size, CHUNK))
            except (OSError, http.client.HTTPException) as error:
                raise _Retryable(_cause(error, self.client.policy)) from None
            if not chunk:
                raise _Retryable(f"the body stopped {size} bytes before byte {self.position}")
            size -= len(chunk)

    def abandon(self) -> None:
        """Close the connection without reading what is left of the response."""
        if self.connection is not None:
            self.connection.close()
        self.connection = self.response = None

    _drop = abandon

    def __del__(self):
        self.abandon()


class _Failures:
    """Counts the failures of one request in a row, sleeps the backoff between them, and
    gives up after the policy's attempts."""

    def __init__(self, policy: RetryPolicy, method: str, url: str) -> None:
        self.policy, self.method, self.url, self.count = policy, method, url, 0

    def add(self, error: _Retryable) -> None:
        self.count += 1
        if self.count >= self.policy.attempts:
            raise HttpShardError(f"{self.method} {self.url}: {error.cause} (gave up after "
                                 f"{self.count} attempts)", self.url, error.status,
                                 self.count)
        time.sleep(self.policy.backoff * 2 ** (self.count - 1))


def _cause(error: BaseException, policy: RetryPolicy) -> str:
    if isinstance(error, (socket.timeout, TimeoutError)):
        return f"timed out (no answer within {policy.timeout:g} s)"
    if isinstance(error, ConnectionResetError):
        return "connection reset by the server"
    if isinstance(error, http.client.IncompleteRead):
        return f"the body was cut short ({len(error.partial)} bytes read)"
    return f"{type(error).__name__}: {error}"


def _range_start(content_range: Optional[str]) -> int:
    """The first byte of a Content-Range: "bytes 100-199/1000" -> 100."""
    try:
        return int(content_range.split()[1].split("-")[0])
    except (AttributeError, IndexError, ValueError):
        raise HttpShardError(f"a 206 answer with a bad Content-Range {content_range!r}") \
            from None
