"""A standalone ProxyPool end to end on the local provider: real Squid
processes started by a real provider worker, a real controller (the Proxy
reconciler and the pool loop under its Redis lock) reading `--proxies`
manifests, the `fleet` CLI against the same Redis.

A pool of 3 reaches 3 Running members, each serving through its ip:port;
`fleet scale pool web --replicas 1` deletes two (their Squid processes gone)
and the override survives the manifest being re-read; removing the pool from
the manifests deletes every member and its instance.

The local provider listens on exactly the Proxy's port, and every member of
a pool has the template's port, so two members of one local provider (one
bindAddress) would collide (Busy): the pool spreads over three local
providers, each on its own loopback address (weights 1:1:1)."""

from __future__ import annotations

import json
import os
import time

import pytest

from fleet.pools.runtime import INTERVAL
from fleet.testing.procs import wait_for
from providers.local.state import Record
from tests.integration.test_local_proxies import alive, fetch, local_stack
from tests.providers.local.conftest import ORIGIN_BODY, kill_all, origin, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

POOL = """
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata:
  name: web
  namespace: crawl
spec:
  replicas: {replicas}
  providers: [{{provider: lab-a}}, {{provider: lab-b}}, {{provider: lab-c}}]
  template: {{port: {port}}}
"""


LABS = {"lab-a": "127.0.0.2", "lab-b": "127.0.0.3", "lab-c": "127.0.0.4"}


@pytest.fixture
def lab(redis_server, make_stack, tmp_path, state_dir, port_window):  # noqa: F811
    providers = []
    for name, address in LABS.items():
        d = os.path.join(state_dir, name)
        os.mkdir(d)
        os.chmod(d, 0o755)
        providers.append({"name": name, "type": "local", "local": {
            "stateDir": d, "bindAddress": address, "portRange": f"{port_window[0]}-{port_window[1]}"}})
    with local_stack(redis_server, make_stack, tmp_path, state_dir, port_window, providers) as stack:
        yield stack


def records(stack) -> dict[str, Record]:
    out = {}
    for name in LABS:
        d = os.path.join(stack.state_dir, name)
        for entry in os.listdir(d):
            if entry.endswith(".json"):
                with open(os.path.join(d, entry)) as f:
                    rec = Record.from_json(f.read())
                out[rec.name] = rec
    return out


def declare(stack, replicas: int, port: int) -> None:
    tmp = stack.manifests / ".web.tmp"
    tmp.write_text(POOL.format(replicas=replicas, port=port))
    os.replace(tmp, stack.manifests / "web.yaml")


def members(stack) -> list[dict]:
    out = stack.fleet("get", "px", "-l", "pool=web", "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["items"]


def running(stack) -> list[dict]:
    return [m for m in members(stack) if (m.get("status") or {}).get("phase") == "Running"
            and not m["metadata"].get("deletionTimestamp")]


def pool(stack) -> dict:
    out = stack.fleet("get", "pools", "web", "-n", "crawl", "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_standalone_pool_of_3_runs_scales_to_1_and_goes_with_its_manifest(lab, origin):  # noqa: F811
    lo, _ = lab.ports
    declare(lab, 3, lo)
    wait_for(lambda: len(running(lab)) == 3, 120, "3 Running members")
    ms = running(lab)
    assert all(m["metadata"]["name"].startswith("web-") for m in ms)
    assert sorted(m["spec"]["provider"] for m in ms) == sorted(LABS)  # 1:1:1
    for m in ms:
        assert fetch(m["status"]["ip"], m["status"]["port"], origin) == ORIGIN_BODY
    recs = records(lab)
    assert len(recs) == 3 and all(alive(r.pid) for r in recs.values())
    wait_for(lambda: (pool(lab).get("status") or {}).get("availableReplicas") == 3, 30, "the pool's status: 3 available")
    table = lab.fleet("get", "pools", "-n", "crawl")
    assert table.returncode == 0 and table.stdout.split("\n")[1].split()[:4] == ["web", "3", "3", "3"], table.stdout
    other = lab.fleet("get", "px", "-l", "pool=nope", "-o", "json")
    assert json.loads(other.stdout)["items"] == []  # the selector filters

    out = lab.fleet("scale", "pool", "web", "-n", "crawl", "--replicas", "1")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: len(members(lab)) == 1 and len(records(lab)) == 1, 120, "scaled to 1: two members and instances gone")
    (kept,) = members(lab)
    gone = [r for r in recs.values() if r.name not in {x.name for x in records(lab).values()}]
    assert len(gone) == 2 and not any(alive(r.pid) for r in gone)
    assert pool(lab)["spec"]["replicas"] == 1
    declare(lab, 3, lo)  # re-read, replicas unchanged: the scale holds
    assert lab.fleet("scale", "pool", "nope", "-n", "crawl", "--replicas", "1").returncode == 1  # not declared
    time.sleep(3 * INTERVAL)  # the manifests re-read and a few pool passes
    assert (pool(lab).get("status") or {}).get("replicas") == 1 and pool(lab)["spec"]["replicas"] == 1
    assert [m["metadata"]["name"] for m in members(lab)] == [kept["metadata"]["name"]]

    (lab.manifests / "web.yaml").unlink()  # the pool is gone: every member and its instance
    wait_for(lambda: members(lab) == [] and records(lab) == {}, 120, "every member and instance deleted")
    assert not any(alive(r.pid) for r in recs.values())
    assert lab.fleet("get", "pools", "web", "-n", "crawl").returncode != 0
    for role in ("controller", *(f"worker:{n}" for n in LABS)):
        assert "Traceback" not in lab.log(role)
