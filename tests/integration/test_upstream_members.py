"""Bought proxies end to end under `fleet up`: an `upstream` list provider whose listFile names an authenticated
Squid (HTTP) and an authenticated microsocks (SOCKS5), two Proxies taking one member each, and requests through the
gateway reaching a loopback origin through each member (`X-Fleet-Proxy` says which). The credentials are read by
the gateway from the listFile (by reference): the password appears nowhere in Redis, the log or /metrics."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import redis
import yaml

from fleet.testing.procs import die_with_parent, free_port, wait_for
from tests.providers.local.conftest import ORIGIN_BODY, origin  # noqa: F401
from tests.providers.upstream.conftest import PASSWORD, USER, VENDOR_USER, microsocks, squid_vendor  # noqa: F401

pytestmark = pytest.mark.integration

TOKEN = "upstream-e2e-token-0123456789"
PROXY = """apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec: {{provider: dc, port: 3128}}
"""


def test_the_gateway_reaches_an_origin_through_each_bought_member(tmp_path, redis_server, squid_vendor, microsocks,  # noqa: F811
                                                                  origin):  # noqa: F811
    secrets = tmp_path / "dc"
    secrets.mkdir()
    (secrets / "proxies.txt").write_text(f"http://{VENDOR_USER}:{PASSWORD}@127.0.0.1:{squid_vendor}\n"
                                         f"socks5://{USER}:{PASSWORD}@127.0.0.1:{microsocks}\n")
    cfg = tmp_path / "providers.yaml"
    cfg.write_text(yaml.safe_dump({"providers": [{"name": "dc", "type": "upstream", "upstream": {
        "mode": "list", "listFile": str(secrets / "proxies.txt"), "stateDir": str(tmp_path / "state"),
        "checkURL": origin.removeprefix("http://").rstrip("/")}}]}))
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    for name in ("a", "b"):
        (manifests / f"{name}.yaml").write_text(PROXY.format(name=name))
    clients = tmp_path / "clients.yaml"
    clients.write_text(yaml.safe_dump({"clients": {"demo": {"token": TOKEN, "ports": "*"}}}))
    port, metrics = free_port(), free_port()
    env = {**os.environ, "FLEET_BROKER_URL": redis_server.url, "FLEET_METRICS_BIND_ADDRESS": "0",
           "FLEET_PROXIES": str(manifests), "FLEET_PROXY_POLL_INTERVAL": "1s", "FLEET_PROVIDER_CHECK_INTERVAL": "0",
           "FLEET_GATEWAY_CLIENTS_FILE": str(clients), "FLEET_GATEWAY_BIND_ADDRESS": f"127.0.0.1:{port}",
           "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{metrics}"}
    log = tmp_path / "up.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "-c", str(cfg), "--no-flower"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent, start_new_session=True)
    try:
        auth = "Basic " + base64.b64encode(f"demo:{TOKEN}".encode()).decode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
        served: set[str] = set()
        answers: list[str] = []

        def through() -> bool:
            req = urllib.request.Request(origin, headers={"Proxy-Authorization": auth})
            try:
                with opener.open(req, timeout=10) as resp:
                    body, who = resp.read(), resp.headers.get("X-Fleet-Proxy", "")
            except urllib.error.HTTPError as exc:
                answers.append(f"{exc.code} {exc.read()[:200]!r}")
                return False
            except (urllib.error.URLError, OSError) as exc:
                answers.append(repr(exc))
                return False
            if body == ORIGIN_BODY:
                served.add(who)
            return {"crawl/a", "crawl/b"} <= served

        client = redis.Redis.from_url(redis_server.url)
        try:
            wait_for(through, 60, "the gateway to reach the origin through both members")
        except AssertionError as exc:  # what the gateway answered last and how the lease state stood
            load = client.zrange("fleet:lease:load", 0, -1, withscores=True)
            raise AssertionError(f"{exc}; served {sorted(served)}, answers {answers[-3:]}, load {load}, endpoints "
                                 f"{sorted(client.hkeys('fleet:px:endpoints'))}") from None
        endpoints = {k.decode(): json.loads(v) for k, v in client.hgetall("fleet:px:endpoints").items()}
        by_scheme = {ep["scheme"]: ep for ep in endpoints.values()}
        assert by_scheme["http"]["port"] == squid_vendor and by_scheme["socks5"]["port"] == microsocks
        assert {ep["credentials"] for ep in endpoints.values()} == {"dc"}
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            dump = client.dump(key) or b""
            assert PASSWORD.encode() not in key + dump, (key, kind)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as resp:
            assert PASSWORD not in resp.read().decode()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert PASSWORD not in log.read_text(errors="replace")
