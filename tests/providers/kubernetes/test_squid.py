"""The generated Squid config, run by a real squid as the pod runs it: not
root (when the test is root, as uid 13 through setpriv, with its stdout and
stderr handed to that uid as runc does), writing only to the two directories
the pod mounts as emptyDir, `squid -N -f <file>`. An allowed source gets its
page; any other source gets 403. Skipped where squid is not installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from fleet.testing.http import LoopbackServer
from providers.kubernetes.pod import squid_conf

SQUID = shutil.which("squid") or "/usr/sbin/squid"
SETPRIV = shutil.which("setpriv")
PROXY_UID = 13

pytestmark = pytest.mark.skipif(not os.path.exists(SQUID), reason="squid is not installed (apt-get install squid)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello through the proxy"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    with LoopbackServer(Hello, "origin") as server:
        yield server.url + "/"


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory the non-root squid can reach (pytest's tmp_path is private to root)."""
    with tempfile.TemporaryDirectory(prefix="fleet-squid-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


@contextmanager
def running_squid(tmp_path: Path, sources: tuple[str, ...]) -> Iterator[int]:
    port = free_port()
    run, spool = tmp_path / "run", tmp_path / "spool"
    for d in (run, spool):
        d.mkdir()
        d.chmod(0o777)  # an emptyDir is world-writable
    text = squid_conf(port, sources, run_dir=str(run), spool_dir=str(spool))
    # the pod's squid listens on every address of its own network namespace; here, loopback only
    text = text.replace(f"http_port {port}\n", f"http_port 127.0.0.1:{port}\n")
    conf = tmp_path / "squid.conf"
    conf.write_text(text)
    conf.chmod(0o644)
    argv = [SQUID, "-N", "-f", str(conf)]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if os.geteuid() == 0:
        if SETPRIV is None:
            pytest.skip("running as root without setpriv: cannot drop to a non-root uid as the pod does")
        argv = [SETPRIV, f"--reuid={PROXY_UID}", f"--regid={PROXY_UID}", "--clear-groups", *argv]
        for fd in (out_w, err_w):
            os.fchown(fd, PROXY_UID, -1)  # what runc does for the container user
    proc = subprocess.Popen(argv, stdout=out_w, stderr=err_w, stdin=subprocess.DEVNULL)
    os.close(out_w)
    os.close(err_w)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"squid exited {proc.returncode}: {os.read(err_r, 65536).decode(errors='replace')}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("squid did not listen within 30 s") from None
                time.sleep(0.05)
        yield port
    finally:
        proc.kill()  # a graceful stop waits shutdown_lifetime; nothing to keep here
        proc.wait(10)
        os.close(out_r)
        os.close(err_r)


def status_of(port: int, request: str) -> int:
    """The status of the answer to a raw request sent to the proxy."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return int(s.recv(65536).split(b"\r\n", 1)[0].split()[1])


def fetch(url: str, proxy_port: int) -> int:
    """The status of a GET of `url` through the proxy."""
    return status_of(proxy_port, f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")


def test_an_allowed_source_is_proxied(workdir, origin):
    with running_squid(workdir, ("10.0.0.0/8", "127.0.0.0/8")) as port:
        assert fetch(origin, port) == 200


def test_any_other_source_is_denied(workdir, origin):
    with running_squid(workdir, ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")) as port:
        assert fetch(origin, port) == 403


def test_nobody_reads_the_cache_manager(workdir):
    """Squid answers these itself (200 without `http_access deny manager`),
    even to an allowed source."""
    with running_squid(workdir, ("127.0.0.0/8",)) as port:
        assert status_of(port, "GET cache_object://127.0.0.1/info HTTP/1.0\r\n\r\n") == 403
        assert status_of(port, f"GET /squid-internal-mgr/info HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                               "Connection: close\r\n\r\n") == 403
