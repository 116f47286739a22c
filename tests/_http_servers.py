"""HTTP servers for the shard tests: nginx (Debian's) from a generated config, or
`python -m http.server` where nginx is absent, and a fault-injecting server in a thread.

    with static_server(root, limit_rate="1m") as server:   # server.url, server.kind
    with FaultServer(root) as faults:                       # faults.url
        faults.plan("/shard-0000.tar", ["500", "ok"])       # the next requests' answers

Both shut down on exit: the server process is terminated and waited for (no leaked
process), the fault server's thread joined and its socket closed.
"""
import contextlib
import http.server
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None)

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        {limit}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StaticServer:
    def __init__(self, process, port, kind):
        self.process, self.port, self.kind = process, port, kind
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@contextlib.contextmanager
def static_server(root, tmp, limit_rate=None, prefer="nginx"):
    """nginx serving `root` on a free loopback port (its files in `tmp`), or Python's
    http.server when nginx is absent or prefer="python"."""
    port = free_port()
    if NGINX and prefer == "nginx":
        os.makedirs(tmp, exist_ok=True)
        conf = os.path.join(tmp, "nginx.conf")
        limit = f"limit_rate {limit_rate};" if limit_rate else ""
        with open(conf, "w") as file:
            file.write(NGINX_CONF.format(tmp=tmp, port=port, root=root, limit=limit))
        command = [NGINX, "-c", conf, "-p", str(tmp), "-e", os.path.join(tmp, "error.log")]
        kind = "nginx"
    else:
        command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                   "--directory", str(root)]
        kind = "http.server"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = StaticServer(process, port, kind)
    try:
        _wait_listening(process, port)
        yield server
    finally:
        server.stop()
        process.stderr.close()


def _wait_listening(process, port, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}): "
                               f"{process.stderr.read().decode(errors='replace')}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


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
        start, end = 0, len(data)
        ranged = self.headers.get("Range")
        if ranged:
            first, _, last = ranged.split("=", 1)[1].partition("-")
            start, end = int(first), (int(last) + 1 if last else len(data))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", f'"{os.stat(path).st_mtime_ns}-{len(data)}"')
        self.end_headers()
        if not body:
            return
        if action.startswith("reset:"):   # send some of the body, then reset the connection
            self.wfile.write(data[start:start + int(action[6:])])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        self.wfile.write(data[start:end])
        if action == "close":   # close the connection after the answer, without saying so
            self.close_connection = True


class FaultServer(http.server.ThreadingHTTPServer):
    """Serves files of `root` (with Range), each request of a path answered by the next
    action planned for it: "ok", a status ("404", "500"), "slow:S" (answer after S
    seconds), "reset:N" (N bytes of the body, then a connection reset), "close" (the answer,
    then the connection closed though its headers said it was kept)."""

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
