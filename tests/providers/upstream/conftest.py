"""upstream provider fixtures: real upstreams on loopback and scripted ones.

- `squid_vendor`: a Squid asking Basic proxy auth through basic_ncsa_auth
  (an htpasswd made with `openssl passwd -apr1`); its helper drops the
  `-session-<id>` part of the username first, as a vendor's gateway takes
  any session of one account: `fleet-session-<any>-country-us` / PASSWORD.
- `vendor_exits`: the same Squid account, standing in for a residential
  vendor: each new `-session-<id>` leaves from the next of EXITS (loopback
  addresses, by `tcp_outgoing_address` on a tag an external ACL helper sets),
  and a session keeps its exit; yields (port, EXITS).
- `microsocks`: `microsocks -u USER -P PASSWORD`, an authenticated SOCKS5 server.
- `scripted`: a TCP server that answers each connection with a script
  (garbage, a 502, a close, nothing at all).
- `origin`: what a tunnel connects to (checkURL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator

import pytest

from fleet.testing.procs import free_port, wait_for
from providers.local import squid as local_squid

USER = "fleet"
PASSWORD = "s3cret-upstream-pass"
VENDOR_USER = "fleet-country-us"  # what the helper sees once the session is dropped
SQUID_HELPERS = "/usr/lib/squid"


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    """A loopback TCP server that accepts and closes: a tunnel's target."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    t = threading.Thread(target=serve, daemon=True, name="origin")
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    srv.close()


def _apr1(password: str) -> str:
    out = subprocess.run(["openssl", "passwd", "-apr1", password], capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()


EXITS = ("127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14")  # the vendor stand-in's exits, in session order
# the stand-in's external ACL helper: the session part of the login → the next exit's tag, the same for a session seen
_EXIT_HELPER = ("#!/bin/sh\n# session -> exit: a new session takes the next exit, a known one keeps its own\n"
                "exec mawk -W interactive '{{ s = $1; sub(/^.*-session-/, \"\", s); sub(/-.*$/, \"\", s);"
                " if (!(s in m)) m[s] = (n++) % {n}; print \"OK tag=e\" m[s] }}'\n")


def _authenticating_squid(name: str, extra: Callable[[str], list[str]] = lambda d: []) -> Iterator[int]:
    """A Squid asking Basic proxy auth of the one account VENDOR_USER / PASSWORD, any `-session-<id>` dropped first
    (a vendor's gateway takes any session of one account); `extra(dir)`: more config lines (before the access
    rules)."""
    binary = shutil.which("squid") or "/usr/sbin/squid"
    if not os.access(binary, os.X_OK) or not os.access(f"{SQUID_HELPERS}/basic_ncsa_auth", os.X_OK):
        pytest.skip("squid with basic_ncsa_auth is not installed (apt-get install squid; `make test` installs it)")
    d = tempfile.mkdtemp(prefix=f"fleet-upstream-{name}-")
    os.chmod(d, 0o755)
    who = local_squid.run_as()
    port = free_port()
    htpasswd = os.path.join(d, "htpasswd")
    with open(htpasswd, "w") as f:
        f.write(f"{VENDOR_USER}:{_apr1(PASSWORD)}\n")
    helper = os.path.join(d, "auth.sh")
    with open(helper, "w") as f:
        f.write("#!/bin/sh\n# a vendor's gateway: any session of the account\n"
                f"exec sed -u 's/^\\([^ ]*\\)-session-[a-z0-9]*/\\1/' | {SQUID_HELPERS}/basic_ncsa_auth {htpasswd}\n")
    os.chmod(helper, 0o755)
    os.chmod(htpasswd, 0o644)
    conf = "\n".join([
        f"http_port 127.0.0.1:{port}", f"visible_hostname fleet-upstream-{name}", "workers 1",
        f"pid_filename {d}/squid.pid", f"cache_log stdio:{d}/cache.log", "access_log none", "cache_store_log none",
        f"coredump_dir {d}", "cache deny all", "cache_mem 8 MB", "pinger_enable off", "shutdown_lifetime 1 second",
        f"auth_param basic program {helper}", "auth_param basic children 2", "auth_param basic realm fleet-test",
        "acl authed proxy_auth REQUIRED", *extra(d), "http_access allow authed", "http_access deny all", "",
    ])
    conf_path = local_squid.prepare(d, conf, who)
    service = local_squid.service_name(d, name)
    proc = local_squid.start(binary, conf_path, service, d, who)
    try:
        wait_for(lambda: listening(port) or proc.poll() is not None, 30, "squid to listen")
        if proc.poll() is not None:
            with open(os.path.join(d, local_squid.OUT), errors="replace") as f:
                pytest.fail(f"squid exited: {f.read()[-2000:]}")
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        local_squid.remove_shm(service)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def squid_vendor() -> Iterator[int]:
    yield from _authenticating_squid("vendor")


def _exit_lines(d: str) -> list[str]:
    helper = os.path.join(d, "exit.sh")
    with open(helper, "w") as f:
        f.write(_EXIT_HELPER.format(n=len(EXITS)))
    os.chmod(helper, 0o755)
    # one helper process (its map is the vendor's memory), asked on every request (no cache)
    lines = [f"external_acl_type exit ttl=0 negative_ttl=0 children-max=1 children-startup=1 %LOGIN {helper}",
             "acl exit_tagged external exit", "http_access deny !authed", "http_access allow exit_tagged"]
    for i, address in enumerate(EXITS):
        lines += [f"acl e{i} tag e{i}", f"tcp_outgoing_address {address} e{i}"]
    return lines


@pytest.fixture(scope="module")
def vendor_exits() -> Iterator[tuple[int, tuple[str, ...]]]:
    for port in _authenticating_squid("exits", _exit_lines):
        yield port, EXITS


@pytest.fixture(scope="module")
def microsocks() -> Iterator[int]:
    binary = shutil.which("microsocks")
    if binary is None:
        pytest.skip("microsocks is not installed (apt-get install microsocks; `make test` installs it)")
    port = free_port()
    proc = subprocess.Popen([binary, "-i", "127.0.0.1", "-p", str(port), "-u", USER, "-P", PASSWORD],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: listening(port) or proc.poll() is not None, 15, "microsocks to listen")
        assert proc.poll() is None, "microsocks exited"
        yield port
    finally:
        proc.kill()
        proc.wait(10)


Script = Callable[[socket.socket], None]


class Scripted:
    """A loopback server running `script` on each accepted connection, in a thread."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True, name="scripted-upstream")
        self.thread.start()

    def _serve(self) -> None:
        self.srv.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            self.conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self.script(conn)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.srv.close()


def garbage(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.sendall(b"<html>not a proxy</html>\r\n\r\n")


def bad_gateway(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")


def drop(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.close()


def stall(conn: socket.socket) -> None:
    """Reads the request, then answers one byte a second (a read timeout per recv never trips)."""
    conn.recv(4096)
    for _ in range(60):
        threading.Event().wait(0.3)
        conn.sendall(b"H")


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], Scripted]]:
    made: list[Scripted] = []

    def make(script: Script) -> Scripted:
        s = Scripted(script)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def secrets_dir(tmp_path):
    """usernameFile and passwordFile, as a mounted Secret leaves them (a trailing newline)."""
    (tmp_path / "username").write_text(USER + "\n")
    (tmp_path / "password").write_text(PASSWORD + "\n")
    return tmp_path


def socks_stall(conn: socket.socket) -> None:
    """Reads the greeting, sends half an answer (the version byte), then nothing."""
    conn.recv(4096)
    conn.sendall(b"\x05")
    threading.Event().wait(20)


def hang(conn: socket.socket) -> None:
    """Accepts and never answers."""
    threading.Event().wait(20)
