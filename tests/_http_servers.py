"""HTTP servers for the shard tests: the benchmarks' static store (benchmarks/http_store.py:
nginx from a generated config, or `python -m http.server` where nginx is absent), and a
fault-injecting server in a thread (Range as nginx answers it: cut at the file's end, 416
past it, several ranges as multipart/byteranges in the order asked).

    with static_server(root, tmp, limit_rate="1m") as server:   # server.url, server.kind
    with FaultServer(root) as faults:                       # faults.url
        faults.plan("/shard-0000.tar", ["500", "ok"])       # the next requests' answers

Both shut down on exit: the server process is terminated and waited for (no leaked
process), the fault server's thread joined and its socket closed.
"""
import http.server
import os
import socket
import struct
import sys
import threading

from benchmarks.http_store import NGINX, free_port, static_server  # noqa: F401 (re-exported)

BOUNDARY = b"0000000000000001"


class _FaultHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body):
        server = self.server
        action = server.next_action(self.path)
        server.log.append((self.command, self.path, self.headers.get("Range"), action))
        server.clients.add(self.client_address)
        if action.startswith("slow:"):
            server.stopping.wait(float(action[5:]))
            action = "ok"
        if action.isdigit():
            self.send_response(int(action))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = os.path.join(server.root, self.path.lstrip("/"))
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as file:
            data = file.read()
        ranged = self.headers.get("Range")
        spans = [(0, len(data))]
        if ranged and action != "whole":
            spans = [_span(asked, len(data)) for asked in ranged.split("=", 1)[1].split(",")]
            if spans[0][0] >= len(data):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
        else:
            self.send_response(200)
        if len(spans) == 1:
            start, end = spans[0]
            payload = data[start:end]
            if ranged and action != "whole":
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:   # several ranges: multipart/byteranges, as nginx answers them
            payload = b"".join(
                b"\r\n--" + BOUNDARY + b"\r\nContent-Type: application/x-tar\r\n"
                + f"Content-Range: bytes {start}-{end - 1}/{len(data)}".encode()
                + b"\r\n\r\n" + data[start:end] for start, end in spans) \
                + b"\r\n--" + BOUNDARY + b"--\r\n"
            self.send_header("Content-Type",
                             f"multipart/byteranges; boundary={BOUNDARY.decode()}")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("ETag", f'"{os.stat(path).st_mtime_ns}-{len(data)}"')
        self.end_headers()
        if not body:
            return
        if action.startswith("reset:"):   # send some of the body, then reset the connection
            self.wfile.write(payload[:int(action[6:])])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        self.wfile.write(payload)
        if action == "close":   # close the connection after the answer, without saying so
            self.close_connection = True


def _span(asked: str, size: int) -> tuple:
    """(start, end) of one range of a Range header ("100-199", "100-"), cut at the end."""
    first, _, last = asked.strip().partition("-")
    return int(first), min(int(last) + 1 if last else size, size)


class FaultServer(http.server.ThreadingHTTPServer):
    """Serves files of `root` (with Range), each request of a path answered by the next
    action planned for it: "ok", a status ("404", "500"), "slow:S" (answer after S
    seconds), "whole" (the whole body, as a server that ignores Range), "reset:N" (N bytes
    of the body, then a connection reset), "close" (the answer, then the connection closed
    though its headers said it was kept)."""

    daemon_threads = True

    def __init__(self, root):
        super().__init__(("127.0.0.1", 0), _FaultHandler)
        self.root = str(root)
        self.plans, self.log, self.clients = {}, [], set()   # clients: connections seen
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05})

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):   # a client that hung up
            super().handle_error(request, client_address)

    def plan(self, path, actions):
        with self.lock:
            self.plans[path] = list(actions)

    def next_action(self, path):
        with self.lock:
            actions = self.plans.get(path)
            return actions.pop(0) if actions else "ok"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self.thread.join(10)
