"""Abandoned checks do not leak: the kubernetes and gcp checkers against a
real loopback server that answers one byte at a time (tests/fakes/drip.py).

The per-read socket timeout never trips against such a server; the check
must still return Timeout at its deadline, with its socket closed (the
server sees the client go), so that over many rounds neither `check-<name>`
threads nor the process's sockets pile up. Without the deadline watchdog
the first round overran and every later round either started another
stuck thread (before the one-slot rule) or reported "previous check still
running" forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from fleet.health import checking
from fleet.health.checking import CheckSlots, run_check
from providers import base
from providers.gcp.config import GcpConfig
from providers.gcp.provider import new as new_gcp
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.provider import new as new_kube
from providers.watchdog import CUT_MESSAGE
from tests.fakes.drip import DripServer
from tests.leaks import open_sockets, threads_named


def kube(name: str, url: str, tmp_path: Any) -> Any:
    path = str(tmp_path / "kubeconfig")
    with open(path, "w") as f:
        json.dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "drip", "cluster": {"server": url}}],
                "users": [{"name": "drip", "user": {"token": "t"}}],
                "contexts": [{"name": "drip", "context": {"cluster": "drip", "user": "drip"}}],
                "current-context": "drip",
            },
            f,
        )
    p = new_kube(name, KubernetesConfig(kubeconfig=path))
    p.close = lambda: p.api_client().close()
    return p


def gcp(name: str, url: str, tmp_path: Any) -> Any:
    return new_gcp(name, GcpConfig(project="my-project", apiEndpoint=url), AnonymousCredentials())


PROVIDERS = [pytest.param(kube, id="kubernetes"), pytest.param(gcp, id="gcp")]


@pytest.fixture
def drip(request: pytest.FixtureRequest) -> Iterator[DripServer]:
    with DripServer(interval=getattr(request, "param", 1.0)) as server:
        yield server


@pytest.fixture
def made() -> Iterator[list[Any]]:
    providers: list[Any] = []
    yield providers
    for p in providers:
        p.close()


@pytest.mark.parametrize("make", PROVIDERS)
def test_one_byte_per_second_is_timeout_at_the_deadline(
    make: Callable[..., Any], drip: DripServer, made: list[Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(checking, "GRACE", 0.5)  # a broken watchdog fails here, not at pytest's timeout
    p = make("drip", drip.url, tmp_path)
    made.append(p)
    start = time.monotonic()
    r = run_check("drip", "x", lambda: p, 2.5, slots=CheckSlots())  # every byte comes well within the 2.5 s read timeout
    took = time.monotonic() - start

    (ts,) = r.targets
    assert (ts.ready, ts.reason, ts.message) == (False, base.REASON_TIMEOUT, CUT_MESSAGE)
    assert 2.5 <= took < 3.0
    assert drip.requests <= 1
    assert drip.wait_idle(2), "the check's socket is still open"


@pytest.mark.parametrize("drip", [0.02], indirect=True)  # 50 bytes/s: no read waits long
@pytest.mark.parametrize("make", PROVIDERS)
def test_rounds_against_a_slow_drip_server_leak_nothing(
    make: Callable[..., Any], drip: DripServer, made: list[Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(checking, "GRACE", 0.5)
    slots = CheckSlots()
    timeout = 0.3
    p = make("drip", drip.url, tmp_path)
    made.append(p)
    sockets_before = open_sockets()
    counts = []
    for _ in range(20):
        start = time.monotonic()
        r = run_check("drip", "x", lambda: p, timeout, slots=slots)
        took = time.monotonic() - start
        (ts,) = r.targets
        assert (ts.reason, ts.message) == (base.REASON_TIMEOUT, CUT_MESSAGE)
        assert took < timeout + 0.3
        assert threads_named("check-drip") == 0  # returned: nothing abandoned
        assert drip.wait_idle(2), "the check's socket is still open"
        counts.append(open_sockets() - sockets_before)
    assert 19 <= drip.requests <= 20  # one request a round (the first may be cut before the server reads it)
    assert max(counts) <= 0, counts
