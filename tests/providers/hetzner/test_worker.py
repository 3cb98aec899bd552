"""The hetzner provider through real fleet processes: a real controller and
a real `fleet worker -p hz` (hcloud inside it) against the fake API, from
standalone manifests, the token in a file as a rendered worker mounts it.

A Proxy goes Running with the server's public IPv4, is replaced on a port
change (a new server; its firewall's rules set to the new port), and is
deleted (server and firewall gone). An orphan made behind fleet's back is
collected by a GC sweep (`fleet gc`), firewall and all; one of another
installation is not."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from fleet.testing.procs import wait_for
from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.hetzner.config import HetznerConfig
from providers.hetzner.provider import HetznerProvider
from tests.integration.conftest import make_stack, redis_server  # noqa: F401
from tests.providers.hetzner.conftest import SOURCES

pytestmark = pytest.mark.integration

OURS = "hz-it"
MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: hz
  port: {port}
  placement: {{zone: fsn1, machineType: cx22, image: ubuntu-24.04}}
  cloudInit: {{inline: "#cloud-config\\npackages: [squid]\\n"}}
"""


def declare(stack, name: str, port: int) -> None:
    tmp = stack.manifests / f".{name}.tmp"
    tmp.write_text(MANIFEST.format(name=name, port=port))
    os.replace(tmp, stack.manifests / f"{name}.yaml")


def status(stack, name: str) -> dict:
    out = stack.fleet("get", "px", name, "-n", "crawl", "-o", "json")
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return (items[0].get("status") or {}) if items else {}


@pytest.fixture
def lab(fake, token_file, redis_server, make_stack, tmp_path: Path):  # noqa: F811
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    block = {"apiEndpoint": fake.url, "tokenFile": str(token_file), "allowedSources": list(SOURCES)}
    stack = make_stack(redis_server.url, [{"name": "hz", "type": "hetzner", "hetzner": block}],
                       FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CHECK_INTERVAL="0",
                       FLEET_INSTALLATION=OURS, FLEET_GC_MIN_AGE="1s", FLEET_PROVIDER_CALL_TIMEOUT="20s")
    stack.manifests, stack.block = manifests, block
    stack.worker("hz")
    stack.controller()
    stack.wait_ready("worker:hz", "controller")
    yield stack
    stack.stop()


def running(stack, name: str, port: int):
    def ready():
        st = status(stack, name)
        return st if st.get("phase") == "Running" and st.get("port") == port else None

    return wait_for(ready, 60, f"crawl/{name} Running on {port}:\n{stack.log('worker:hz')[-3000:]}")


def test_a_proxy_runs_is_replaced_deleted_and_an_orphan_is_collected(lab, fake):
    declare(lab, "a", 3128)
    st = running(lab, "a", 3128)
    first = int(st["providerID"].split("/")[1])
    assert st["ip"] == fake.servers[first]["public_net"]["ipv4"]["ip"]
    (fid,) = fake.firewalls

    declare(lab, "a", 8080)
    st = running(lab, "a", 8080)
    second = int(st["providerID"].split("/")[1])
    assert second != first and first not in fake.servers
    assert fid not in fake.firewalls  # deleted with its server; the replacement has its own
    assert {r["port"] for fw in fake.firewalls.values() for r in fw["rules"]} == {"8080"}

    p = HetznerProvider("hz", HetznerConfig(**lab.block))
    placement = Placement(zone="fsn1", machine_type="cx22", image="ubuntu-24.04")

    def make(uid: str, installation: str) -> str:
        return p.create(CreateRequest(name=base.name_from_uid(uid), uid=uid, placement=placement, installation=installation),
                        Deadline.after(20))

    orphan, theirs = make("uid-orphan", OURS), make("uid-theirs", "another-fleet")
    time.sleep(1.5)  # past FLEET_GC_MIN_AGE (the fake's creation times are older anyway)
    sent = lab.fleet("gc")
    assert sent.returncode == 0, sent.stderr
    orphan_sid, orphan_fid = int(orphan.split("/")[1]), int(orphan.rsplit("/", 1)[1])
    wait_for(lambda: orphan_sid not in fake.servers and orphan_fid not in fake.firewalls, 60,
             f"the orphan and its firewall deleted:\n{lab.log('controller')[-3000:]}")
    assert int(theirs.split("/")[1]) in fake.servers and second in fake.servers

    (lab.manifests / "a.yaml").unlink()
    wait_for(lambda: lab.fleet("get", "px", "a", "-n", "crawl").returncode != 0, 60, "crawl/a released")
    assert second not in fake.servers
    assert {fw["name"] for fw in fake.firewalls.values()} == {base.name_from_uid("uid-theirs")}
    for role in ("controller", "worker:hz"):
        assert "Traceback" not in lab.log(role)
