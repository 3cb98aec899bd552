"""upstream provider fixtures: real upstreams on loopback and scripted ones.

- `squid_vendor`: a Squid asking Basic proxy auth through basic_ncsa_auth
  (an htpasswd made with `openssl passwd -apr1`); its helper drops the
  `-session-<id>` part of the username first, as a vendor's gateway takes
  any session of one account: `fleet-session-<any>-country-us` / PASSWORD.
- `vendor_exits`: the same, standing in for a residential vendor: each new
  `-session-<id>` leaves from the next of EXITS, and a session keeps its
  exit; yields (port, EXITS).
- `microsocks`: `microsocks -u USER -P PASSWORD`, an authenticated SOCKS5 server.
  (All started by fleet.testing.upstreams, as benchmarks/gateway.py and `make demo` start them.)
- `scripted`: a TCP server that answers each connection with a script
  (garbage, a 502, a close, nothing at all).
- `origin`: what a tunnel connects to (checkURL).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from fleet.testing import upstreams
from fleet.testing.procs import free_port

USER = "fleet"
PASSWORD = "s3cret-upstream-pass"
VENDOR_USER = "fleet-country-us"  # what the helper sees once the session is dropped


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


EXITS = ("127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14")  # the vendor stand-in's exits, in session order


def _vendor(exits: tuple[str, ...] = ()) -> Iterator[int]:
    if upstreams.squid_binary() is None:
        pytest.skip("squid with basic_ncsa_auth is not installed (apt-get install squid; `make test` installs it)")
    with upstreams.vendor_squid(VENDOR_USER, PASSWORD, exits=exits) as port:
        yield port


@pytest.fixture(scope="module")
def squid_vendor() -> Iterator[int]:
    yield from _vendor()


@pytest.fixture(scope="module")
def vendor_exits() -> Iterator[tuple[int, tuple[str, ...]]]:
    for port in _vendor(EXITS):
        yield port, EXITS


@pytest.fixture(scope="module")
def microsocks() -> Iterator[int]:
    if upstreams.microsocks_binary() is None:
        pytest.skip("microsocks is not installed (apt-get install microsocks; `make test` installs it)")
    port = free_port()
    with upstreams.microsocks(port, USER, PASSWORD):
        yield port


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
