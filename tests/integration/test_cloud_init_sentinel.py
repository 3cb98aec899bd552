"""No Redis key holds the cloud-init text after a create (issue 18): real
redis-server, a real controller and provider worker (`celery worker`
processes), standalone manifests with the text inline (and in kubectl's
last-applied annotation) or in a `--secrets-dir` file. Every key of every
type is read, the broker's queues, unacked messages and bindings included.
The staged text is taken by the worker once (GETDEL); the standalone object
holds only its digest."""

from __future__ import annotations

import json

import pytest

from fleet.gc.live import from_documents
from fleet.proxies.decide import spec_hash
from fleet.proxies.manifests import load_manifests
from fleet.testing.procs import wait_for

pytestmark = pytest.mark.integration

SENTINEL = "SENTINEL-4b1d-cloud-init-text"
TEXT = f"#cloud-config\nwrite_files:\n- path: /etc/token\n  content: {SENTINEL}\n"

INLINE = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata:
  name: a
  namespace: crawl
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: {last}
spec:
  provider: edge
  cloudInit:
    inline: {text}
"""

SECRET_REF = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {name: a, namespace: crawl}
spec:
  provider: edge
  cloudInit: {secretRef: {name: init, key: user-data}}
"""


def every_value(client) -> list[bytes]:
    out = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "hash":
            for k, v in client.hgetall(key).items():
                out += [k, v]
        elif kind == "list":
            out += client.lrange(key, 0, -1)
        elif kind == "set":
            out += list(client.smembers(key))
        elif kind == "zset":
            out += client.zrange(key, 0, -1)
        elif kind == "stream":
            for _, fields in client.xrange(key):
                for k, v in fields.items():
                    out += [k, v]
        elif kind != "none":  # gone between the scan and the read
            raise AssertionError(f"{key!r}: a {kind} this scan cannot read")
    return out


@pytest.mark.parametrize("source", ["inline", "secrets-dir file"])
def test_no_redis_key_holds_the_cloud_init_text_after_a_create(redis_server, make_stack, tmp_path, source):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    secrets = tmp_path / "secrets"
    if source == "inline":
        last = json.dumps({"spec": {"provider": "edge", "cloudInit": {"inline": TEXT}}})
        (manifests / "a.yaml").write_text(INLINE.format(last=json.dumps(last), text=json.dumps(TEXT)))
    else:
        (secrets / "crawl" / "init").mkdir(parents=True)
        (secrets / "crawl" / "init" / "user-data").write_text(TEXT)
        (manifests / "a.yaml").write_text(SECRET_REF)
    stack = make_stack(redis_server.url, [{"name": "edge", "type": "fake"}], FLEET_PROXIES=str(manifests),
                       FLEET_SECRETS_DIR=str(secrets), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROVIDER_CALL_TIMEOUT="30s", FLEET_PROVIDER_CHECK_INTERVAL="0")
    r = redis_server.client()
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")

    def status() -> dict:
        got = stack.fleet("get", "px", "a", "-n", "crawl", "-o", "json")
        items = json.loads(got.stdout)["items"] if got.returncode == 0 else []
        return (items[0].get("status") or {}) if items else {}

    wait_for(lambda: status().get("phase") == "Running", 60, "crawl/a Running")
    (declared,), _ = load_manifests(str(manifests / "a.yaml"))
    assert status()["specHash"] == spec_hash(declared.spec, TEXT)  # the controller did resolve the text
    # taken by the create (GETDEL), long before its 30 s TTL
    wait_for(lambda: not list(r.scan_iter(match="fleet:cloudinit:*")), 5, "the staged cloud-init to be gone")

    values = every_value(r)
    assert len(values) > 10  # the scan saw the broker's and fleet's keys
    assert [v for v in values if SENTINEL.encode() in v] == []
    assert not any(b"write_files" in v for v in values)

    # what reads the objects still works: fleet get px (table and yaml), GC's live UIDs
    table = stack.fleet("get", "px")
    assert table.returncode == 0 and "Running" in table.stdout, table.stderr
    shown = stack.fleet("get", "px", "-o", "yaml")
    assert shown.returncode == 0 and SENTINEL not in shown.stdout
    if source == "inline":
        assert f"inline: '<redacted: {len(TEXT.encode())} bytes>'" in shown.stdout
        assert "last-applied-configuration: '<redacted:" in shown.stdout
    else:
        assert "secretRef" in shown.stdout
    assert len(from_documents(r.hgetall("fleet:px:objects").values())) == 1
    for role in ("controller", "worker:edge"):
        assert SENTINEL not in stack.log(role)
        assert "not applied" not in stack.log(role)
