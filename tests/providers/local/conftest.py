"""local provider fixtures: a state directory squid's user can reach, a
window of loopback ports, providers on both, an origin HTTP server, and a
leak check: no squid started under the state directory outlives its test."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import tempfile
import time
import uuid

import pytest

from fleet.testing.http import LoopbackServer, Quiet
from providers import base
from providers.base import CreateRequest, Deadline
from providers.local import process
from providers.local.config import FALLBACK_SQUID, LocalConfig
from providers.local.provider import LocalProvider

WINDOW = 100
NAME = "local-test"
ORIGIN_BODY = b"hello from the origin\n"


def squid_binary() -> str | None:
    found = shutil.which("squid") or FALLBACK_SQUID
    return found if os.access(found, os.X_OK) else None


def squids_under(root: str) -> list[tuple[int, int]]:
    """Live processes whose arguments name a file under `root` (our squids)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and any(a.startswith(root + "/") for a in process.cmdline(int(entry))):
            ticks = process.start_ticks(int(entry))
            if ticks is not None:
                out.append((int(entry), ticks))
    return out


def kill_all(root: str) -> list[int]:
    left = squids_under(root)
    for pid, ticks in left:
        process.signal_if_alive(pid, ticks, signal.SIGKILL)
    for pid, ticks in left:
        process.wait_gone(pid, ticks, time.monotonic() + 5)
    return [pid for pid, _ in left]


@pytest.fixture
def state_dir():
    """Under /tmp (pytest's tmp_path is 0700 below /tmp/pytest-of-root: the
    `proxy` user squid runs as under root could not enter it)."""
    root = tempfile.mkdtemp(prefix="fleet-local-test-")
    os.chmod(root, 0o755)
    yield root
    leaked = kill_all(root)
    shutil.rmtree(root, ignore_errors=True)
    assert not leaked, f"squid processes outlived the test: {leaked}"


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def port_window() -> tuple[int, int]:
    """100 loopback ports below the ephemeral range, the first few free now."""
    rng = random.Random()
    for _ in range(200):
        lo = 20000 + rng.randrange(100) * WINDOW
        if all(_free(p) for p in range(lo, lo + 10)):
            return lo, lo + WINDOW - 1
    pytest.skip("no free window of loopback ports")


@pytest.fixture
def make_provider(state_dir, port_window):
    if squid_binary() is None:
        pytest.skip("squid is not installed (apt-get install squid; `make test` installs it)")
    made: list[LocalProvider] = []

    def make(**kw) -> LocalProvider:
        data = {"stateDir": state_dir, "portRange": f"{port_window[0]}-{port_window[1]}", **kw}
        p = LocalProvider(NAME, LocalConfig.model_validate(data))
        made.append(p)
        return p

    yield make
    kill_all(state_dir)  # fast: the deletes below then find squid gone, and remove the rest
    for p in made:
        with contextlib.suppress(base.ProviderError):
            for inst in p.list_by_tag(Deadline.after(10)):
                with contextlib.suppress(base.ProviderError):
                    p.delete(inst.id, Deadline.after(10))


@pytest.fixture
def provider(make_provider) -> LocalProvider:
    return make_provider()


@pytest.fixture
def ports(port_window):
    """Ports of the window, one after the other."""
    return itertools.count(port_window[0])


def request(port: int, uid: str | None = None, **kw) -> CreateRequest:
    uid = uid or str(uuid.uuid4())
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", proxy_name="p", port=port, **kw)


def wait_for(cond, timeout: float = 10.0, what: str = "the condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class _Origin(Quiet):
    def do_GET(self) -> None:
        self.reply(200, ORIGIN_BODY)


@pytest.fixture
def origin():
    """An HTTP server on 127.0.0.1 answering ORIGIN_BODY; yields its URL."""
    with LoopbackServer(_Origin, "origin") as server:
        yield server.url + "/"


class _Echo(Quiet):
    """Answers with the client address it sees: the proxy's egress address."""

    def do_GET(self) -> None:
        self.reply(200, self.client_address[0].encode())


@pytest.fixture
def echo_origin():
    """An HTTP server on 127.0.0.1 whose body is the client's address; yields its URL."""
    with LoopbackServer(_Echo, "echo-origin") as server:
        yield server.url + "/"
