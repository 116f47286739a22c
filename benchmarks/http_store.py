"""A static HTTP store on a loopback port, for the benchmarks and tests that read shards
over HTTP: nginx (Debian's package) from a generated config, with `limit_rate` to model a
remote store's bandwidth per connection, or `python -m http.server` where nginx is absent.

    with static_server(root, tmp, limit_rate="100m") as server:   # server.url, server.kind
        ...

The server process is terminated and waited for on exit (no leaked process).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time

NGINX = shutil.which("nginx") or next(
    (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(path)),
    None)

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
        # limit_rate delays each write by its bytes / rate, in whole milliseconds: nginx's
        # 64 KB writes at 100 MB/s round to no delay at all (a 4.8 MB shard came at 500-870
        # MB/s). Files sent in 256 KB pieces are held to the rate (measured 91-102 MB/s).
        sendfile on;
        sendfile_max_chunk 256k;
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StaticServer:
    """A running server process: its port, its URL and which server it is."""

    def __init__(self, process: subprocess.Popen, port: int, kind: str) -> None:
        self.process, self.port, self.kind = process, port, kind
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@contextlib.contextmanager
def static_server(root, tmp, limit_rate: str | None = None, prefer: str = "nginx"):
    """nginx serving `root` on a free loopback port (its config and logs in `tmp`), or
    Python's http.server when nginx is absent or prefer="python"."""
    port = free_port()
    if NGINX and prefer == "nginx":
        tmp = os.path.abspath(tmp)   # nginx takes relative paths from its prefix (-p)
        os.makedirs(tmp, exist_ok=True)
        conf = os.path.join(tmp, "nginx.conf")
        limit = f"limit_rate {limit_rate};" if limit_rate else ""
        with open(conf, "w") as file:
            file.write(NGINX_CONF.format(tmp=tmp, port=port, root=os.path.abspath(root),
                                         limit=limit))
        command = [NGINX, "-c", conf, "-p", str(tmp), "-e", os.path.join(tmp, "error.log")]
        kind = "nginx"
    else:
        command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                   "--directory", str(root)]
        kind = "http.server"   # no rate limit
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = StaticServer(process, port, kind)
    try:
        _wait_listening(process, port)
        yield server
    finally:
        server.stop()
        process.stderr.close()


def _wait_listening(process: subprocess.Popen, port: int, timeout: float = 15.0) -> None:
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
