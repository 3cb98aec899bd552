"""Proxies end to end on the local provider: real Squid processes started by a
real provider worker, driven by a real controller from standalone manifests,
with an HTTP request through each Proxy's ip:port to a local origin.

Pending → Provisioning → Running and a fetch through it; a port change
replaces the instance under the same name; deleting the manifest stops the
process and then releases the Proxy; skip-cleanup leaves the process."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.testing.procs import wait_for
from fleet.testing.stack import Stack
from providers.local.state import Record
from tests.providers.local.conftest import ORIGIN_BODY, kill_all, origin, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata:
  name: {name}
  namespace: crawl
  annotations: {annotations}
spec:
  provider: lab
  port: {port}
"""


def fetch(ip: str, port: int, url: str) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:{port}"}))
    with opener.open(url, timeout=10) as resp:
        return resp.read()


@contextlib.contextmanager
def local_stack(redis_server, make_stack, tmp_path: Path, state_dir: str, port_window: tuple[int, int],  # noqa: F811
                providers: list[dict], **env: str) -> Iterator[Stack]:
    """A controller and a worker per provider of `providers` (local ones, squid required) reading standalone
    manifests from tmp_path/proxies, ready; the stack has .manifests, .state_dir and .ports. At the end it
    is stopped and every squid under state_dir killed."""
    if squid_binary() is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    stack = make_stack(redis_server.url, providers, FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROVIDER_CHECK_INTERVAL="0", **env)
    stack.manifests, stack.state_dir, stack.ports = manifests, state_dir, port_window
    names = [p["name"] for p in providers]
    for name in names:
        stack.worker(name)
    stack.controller()
    stack.wait_ready(*(f"worker:{n}" for n in names), "controller")
    yield stack
    stack.stop()
    kill_all(state_dir)


@pytest.fixture
def lab(redis_server, make_stack, tmp_path, state_dir, port_window):  # noqa: F811
    providers = [{"name": "lab", "type": "local",
                  "local": {"stateDir": state_dir, "portRange": f"{port_window[0]}-{port_window[1]}"}}]
    with local_stack(redis_server, make_stack, tmp_path, state_dir, port_window, providers) as stack:
        yield stack


def declare(stack, name: str, port: int, annotations: dict | None = None) -> None:
    text = MANIFEST.format(name=name, port=port, annotations=json.dumps(annotations or {}))
    tmp = stack.manifests / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, stack.manifests / f"{name}.yaml")


def status(stack, name: str) -> dict:
    out = stack.fleet("get", "px", name, "-n", "crawl", "-o", "json")
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return (items[0].get("status") or {}) if items else {}


def records(stack) -> dict[str, Record]:
    out = {}
    for entry in os.listdir(stack.state_dir):
        if entry.endswith(".json"):
            with open(os.path.join(stack.state_dir, entry)) as f:
                rec = Record.from_json(f.read())
            out[rec.name] = rec
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_local_proxy_runs_serves_is_replaced_and_deleted(lab, origin):  # noqa: F811
    lo, _ = lab.ports
    declare(lab, "a", lo)
    st = wait_for(lambda: status(lab, "a") if status(lab, "a").get("phase") == "Running" else None, 60, "crawl/a Running")
    assert (st["ip"], st["port"]) == ("127.0.0.1", lo)
    assert fetch(st["ip"], st["port"], origin) == ORIGIN_BODY
    pid_id = st["providerID"]
    (first,) = records(lab).values()

    declare(lab, "a", lo + 1)  # a port change: delete, wait for NotFound, create under the same name
    st = wait_for(lambda: status(lab, "a") if status(lab, "a").get("port") == lo + 1 else None, 90, "crawl/a on the new port")
    assert st["phase"] == "Running" and st["providerID"] == pid_id
    assert fetch("127.0.0.1", lo + 1, origin) == ORIGIN_BODY
    (second,) = records(lab).values()
    assert second.name == first.name and second.pid != first.pid and not alive(first.pid)

    (lab.manifests / "a.yaml").unlink()
    wait_for(lambda: lab.fleet("get", "px", "a", "-n", "crawl").returncode != 0, 60, "crawl/a released")
    assert records(lab) == {} and not alive(second.pid)
    for role in ("controller", "worker:lab"):
        assert "Traceback" not in lab.log(role)


def test_skip_cleanup_releases_the_proxy_and_leaves_the_process(lab, origin):  # noqa: F811
    lo, _ = lab.ports
    declare(lab, "keep", lo + 5, {"crawl.example.com/skip-cleanup": "true"})
    wait_for(lambda: status(lab, "keep").get("phase") == "Running", 60, "crawl/keep Running")
    (rec,) = records(lab).values()
    (lab.manifests / "keep.yaml").unlink()
    wait_for(lambda: lab.fleet("get", "px", "keep", "-n", "crawl").returncode != 0, 60, "crawl/keep released")
    assert alive(rec.pid) and fetch("127.0.0.1", lo + 5, origin) == ORIGIN_BODY
