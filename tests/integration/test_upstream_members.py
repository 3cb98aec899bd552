"""Bought proxies end to end under `fleet up`, with real upstreams on loopback standing in for what crawlers buy:
an authenticated Squid (an HTTP vendor), an authenticated microsocks (SOCKS5), and the vendor stand-in that leaves
from a new loopback exit for each new session (tests/providers/upstream/conftest.py).

- A list provider's two members (HTTP and SOCKS5) both serve through the gateway (`X-Fleet-Proxy` says which),
  though the crawler asks one request at a time; the endpoints carry the upstream's port, kind and a credentials
  reference, and the password is nowhere in Redis, the logs, /metrics, Flower's task list or the traces.
- A vendor member is one exit: the prober sees its egress address, every request through the gateway leaves from
  it, and the pool's rotation (`maxAgeSeconds`) makes a member on a new session that leaves from another.
- A ProxyPool mixes two own Squids (local provider) and two bought members; one bought member's password is wrong:
  the crawler, through the HTTP and the SOCKS5 front-ends, never sees an error, the prober marks that member
  unhealthy, its ProviderHealth says Unauthorized, and when the SOCKS5 upstream dies mid-crawl the requests go elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from fleet.store import keys
from fleet.testing import upstreams
from fleet.testing.http import LoopbackServer
from fleet.testing.procs import die_with_parent, free_port, wait_for
from tests.integration.test_prober import _Echo
from tests.providers.local.conftest import ORIGIN_BODY, kill_all, origin, port_window, squid_binary, state_dir  # noqa: F401
from tests.providers.upstream.conftest import PASSWORD, USER, VENDOR_USER, microsocks, squid_vendor, vendor_exits  # noqa: F401

pytestmark = pytest.mark.integration

TOKEN = "upstream-e2e-token-0123456789"
PROXY = """apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec: {{provider: dc, port: 3128}}
"""


@pytest.fixture
def echo() -> Iterator[str]:
    """An origin answering {"origin": <the caller's address>} at /ip; yields its URL."""
    with LoopbackServer(_Echo, "echo") as server:
        yield server.url


class Up:
    """`fleet up` with `providers` and the manifests `docs` (file name → text), the gateway on a free port (and a
    SOCKS5 listener), one client `demo` that may reach any port."""

    def __init__(self, tmp_path: Path, redis_url: str, providers: list[dict], docs: dict[str, str],
                 flower: int | None = None, **env: str):
        cfg = tmp_path / "providers.yaml"
        cfg.write_text(yaml.safe_dump({"providers": providers}))
        manifests = tmp_path / "proxies"
        manifests.mkdir()
        for name, text in docs.items():
            (manifests / name).write_text(text)
        clients = tmp_path / "clients.yaml"
        clients.write_text(yaml.safe_dump({"clients": {"demo": {"token": TOKEN, "ports": "*"}}}))
        self.port, self.socks, self.metrics = free_port(), free_port(), free_port()
        self.url, self.redis = redis_url, redis.Redis.from_url(redis_url)
        environ = {**os.environ, "FLEET_BROKER_URL": redis_url, "FLEET_METRICS_BIND_ADDRESS": "0",
                   "FLEET_PROXIES": str(manifests), "FLEET_PROXY_POLL_INTERVAL": "1s",
                   "FLEET_PROVIDER_CHECK_INTERVAL": "0", "FLEET_GATEWAY_CLIENTS_FILE": str(clients),
                   "FLEET_GATEWAY_BIND_ADDRESS": f"127.0.0.1:{self.port}",
                   "FLEET_GATEWAY_SOCKS_BIND_ADDRESS": f"127.0.0.1:{self.socks}",
                   "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{self.metrics}", **env}
        self.log = tmp_path / "up.log"
        with self.log.open("w") as out:
            flags = ["--flower-port", str(flower)] if flower else ["--no-flower"]
            self.proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "-c", str(cfg), *flags],
                                         env=environ, stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=die_with_parent, start_new_session=True)
        self.answers: list[str] = []  # what the gateway said to requests that got no page

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def get(self, url: str, username: str = "demo") -> tuple[bytes, str] | None:
        """(body, X-Fleet-Proxy) of `url` through the HTTP front-end, or None (the answer kept in `answers`)."""
        auth = "Basic " + base64.b64encode(f"{username}:{TOKEN}".encode()).decode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{self.port}"}))
        try:
            with opener.open(urllib.request.Request(url, headers={"Proxy-Authorization": auth}), timeout=10) as resp:
                return resp.read(), resp.headers.get("X-Fleet-Proxy", "")
        except urllib.error.HTTPError as exc:
            with exc:
                self.answers.append(f"{exc.code} {exc.read()[:200]!r}")
        except (urllib.error.URLError, OSError) as exc:
            self.answers.append(repr(exc))
        return None

    def socks_get(self, url: str) -> bytes:
        """`url` through the SOCKS5 front-end by curl --socks5-hostname (the token as the password)."""
        out = subprocess.run(["curl", "-sS", "--max-time", "10", "--socks5-hostname", f"127.0.0.1:{self.socks}",
                              "--proxy-user", f"demo:{TOKEN}", url], capture_output=True, timeout=20)
        assert out.returncode == 0, out.stderr.decode()
        return out.stdout

    def endpoints(self) -> dict[str, dict]:
        return {k.decode(): json.loads(v) for k, v in self.redis.hgetall(keys.PX_ENDPOINTS).items()}

    def verdicts(self) -> dict[str, dict]:
        return {k.decode(): json.loads(v) for k, v in self.redis.hgetall(keys.PROBE_VERDICTS).items()}

    def health(self) -> list[dict]:
        """`fleet get ph -o json`: each provider's health as the controller last wrote it."""
        out = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "ph", "-o", "json"], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "FLEET_BROKER_URL": self.url})
        return json.loads(out.stdout) if out.returncode == 0 else []

    def state(self) -> str:
        """How the lease state stood, for a failure's message."""
        load = self.redis.zrange(keys.LEASE_LOAD, 0, -1, withscores=True)
        return f"answers {self.answers[-3:]}, load {load}, endpoints {sorted(self.endpoints())}"

    def assert_no_secret(self) -> None:
        for key in self.redis.scan_iter(count=1000):
            assert PASSWORD.encode() not in key + (self.redis.dump(key) or b""), key
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=10) as resp:
            assert PASSWORD not in resp.read().decode()


@contextlib.contextmanager
def up(tmp_path: Path, redis_url: str, providers: list[dict], docs: dict[str, str], flower: int | None = None,
       **env: str) -> Iterator[Up]:
    stack = Up(tmp_path, redis_url, providers, docs, flower, **env)
    try:
        yield stack
    finally:
        stack.stop()
    assert PASSWORD not in stack.log.read_text(errors="replace")


def served_by(stack: Up, url: str, want: set[str], body: bytes | None = None, timeout: float = 60) -> set[str]:
    """Requests one at a time until each proxy of `want` has served one (`body`, when given, the page's)."""
    served: set[str] = set()

    def done() -> bool:
        got = stack.get(url)
        if got is not None and (body is None or got[0] == body):
            served.add(got[1])
        return want <= served

    try:
        wait_for(done, timeout, f"the gateway to reach the origin through {sorted(want)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; served {sorted(served)}, {stack.state()}") from None
    return served


def test_a_crawler_asking_one_at_a_time_reaches_the_origin_through_each_bought_member(
        tmp_path, redis_server, squid_vendor, microsocks, origin):  # noqa: F811
    secrets = tmp_path / "dc"
    secrets.mkdir()
    (secrets / "proxies.txt").write_text(f"http://{VENDOR_USER}:{PASSWORD}@127.0.0.1:{squid_vendor}\n"
                                         f"socks5://{USER}:{PASSWORD}@127.0.0.1:{microsocks}\n")
    providers = [{"name": "dc", "type": "upstream", "upstream": {
        "mode": "list", "listFile": str(secrets / "proxies.txt"), "stateDir": str(tmp_path / "state"),
        "checkURL": origin.removeprefix("http://").rstrip("/")}}]
    flower = free_port()
    with up(tmp_path, redis_server.url, providers, {f"{n}.yaml": PROXY.format(name=n) for n in ("a", "b")},
            flower=flower, FLOWER_BASIC_AUTH="ops:flower-pass", OTEL_TRACES_EXPORTER="console",
            FLEET_PROXY_RESYNC_INTERVAL="3s") as stack:
        served_by(stack, origin, {"crawl/a", "crawl/b"}, ORIGIN_BODY)
        by_scheme = {ep["scheme"]: ep for ep in stack.endpoints().values()}
        assert by_scheme["http"]["port"] == squid_vendor and by_scheme["socks5"]["port"] == microsocks
        assert {ep["credentials"] for ep in by_scheme.values()} == {"dc"}
        assert stack.socks_get(origin) == ORIGIN_BODY
        wide = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "px", "-o", "wide"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "FLEET_BROKER_URL": stack.url}).stdout
        assert "upstream/http" in wide and "upstream/socks5" in wide, wide  # the MEMBER column
        stack.assert_no_secret()
        auth = {"Authorization": "Basic " + base64.b64encode(b"ops:flower-pass").decode()}

        def flower_tasks() -> str:
            req = urllib.request.Request(f"http://127.0.0.1:{flower}/api/tasks?limit=1000", headers=auth)
            with urllib.request.urlopen(req, timeout=10) as resp:
                body = resp.read().decode()
            return body if f"socks5://127.0.0.1:{microsocks}" in body else ""

        # Flower sees the provider calls (it turns task events on when it connects): the list sweep's answers
        # name the members by their credential-free URLs, never with a password
        tasks = wait_for(flower_tasks, 60, "Flower to list the provider calls", interval=1)
        assert PASSWORD not in tasks
    log = stack.log.read_text(errors="replace")
    assert '"trace_id"' in log  # the spans (console exporter) went to the log, which holds no password (up())


POOL = """apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {{name: {name}, namespace: crawl}}
spec:
  replicas: {replicas}
  template: {template}
  providers: {providers}
{extra}"""


def test_a_vendor_member_is_one_exit_and_its_rotation_a_new_one(tmp_path, redis_server, vendor_exits, echo):  # noqa: F811
    port, exits = vendor_exits
    secrets = tmp_path / "resi"
    secrets.mkdir()
    (secrets / "username").write_text(f"{USER}\n")
    (secrets / "password").write_text(f"{PASSWORD}\n")
    providers = [{"name": "resi", "type": "upstream", "upstream": {
        "mode": "vendor", "endpoint": f"http://127.0.0.1:{port}",
        "usernameTemplate": "{user}-session-{session}-country-{country}",
        "usernameFile": str(secrets / "username"), "passwordFile": str(secrets / "password"),
        "checkPlacement": {"country": "us"}, "checkURL": echo.removeprefix("http://"),
        "stateDir": str(tmp_path / "state")}}]
    pool = POOL.format(name="resi", replicas=1, template=json.dumps({"port": 3128, "placement": {"region": "us"}}),
                       providers=json.dumps([{"provider": "resi"}]), extra="  maxAgeSeconds: 60\n")
    with up(tmp_path, redis_server.url, providers, {"pool.yaml": pool}, FLEET_PROBE_TARGET=f"{echo}/ip",
            FLEET_PROBE_INTERVAL="500ms") as stack:

        def egress(exclude: str = "") -> tuple[str, str] | None:
            """(member, the egress the prober saw) of the pool's Running member other than `exclude`."""
            eps, verdicts = stack.endpoints(), stack.verdicts()
            for key, ep in eps.items():
                v = verdicts.get(key)
                if key != exclude and v and v["uid"] == ep["uid"] and v["healthy"] and v.get("egressIP"):
                    return key, v["egressIP"]
            return None

        first, first_exit = wait_for(egress, 60, "the prober to see the vendor member's exit")
        assert first_exit in exits
        assert stack.endpoints()[first]["username"].startswith("{user}-session-")
        # session = exit: every request through the gateway leaves where the prober saw the member leave
        for _ in range(5):
            got = wait_for(lambda: stack.get(f"{echo}/ip"), 20, "a page through the vendor member")
            assert (json.loads(got[0])["origin"], got[1]) == (first_exit, first)
        # rotation = a new session = a new exit (the stand-in gives each new session the next one)
        second, second_exit = wait_for(lambda: egress(exclude=first), 150, "the rotated member's exit")
        assert second_exit in exits and second_exit != first_exit
        wait_for(lambda: first not in stack.endpoints(), 60, "the old member to go")
        got = wait_for(lambda: stack.get(f"{echo}/ip"), 20, "a page through the new member")
        assert (json.loads(got[0])["origin"], got[1]) == (second_exit, second)
        stack.assert_no_secret()


@contextlib.contextmanager
def own_microsocks() -> Iterator[tuple[int, subprocess.Popen]]:
    """An authenticated microsocks this test may kill (the module's fixture is shared)."""
    if upstreams.microsocks_binary() is None:
        pytest.skip("microsocks is not installed (apt-get install microsocks; `make test` installs it)")
    port = free_port()
    with upstreams.microsocks(port, USER, PASSWORD) as proc:
        yield port, proc


def test_a_pool_of_own_and_bought_members_serves_through_both_front_ends_and_skips_the_bad_ones(
        tmp_path, redis_server, squid_vendor, echo, state_dir, port_window):  # noqa: F811
    if squid_binary() is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    providers = []
    for name, address in (("lab-a", "127.0.0.2"), ("lab-b", "127.0.0.3")):
        d = os.path.join(state_dir, name)
        os.mkdir(d)
        os.chmod(d, 0o755)
        providers.append({"name": name, "type": "local", "local": {
            "stateDir": d, "bindAddress": address, "portRange": f"{port_window[0]}-{port_window[1]}"}})
    with own_microsocks() as (socks_port, socks_proc):
        secrets = tmp_path / "dc"
        secrets.mkdir()
        # the Squid entry's password is wrong: that member must never cost the crawler a request
        (secrets / "proxies.txt").write_text(f"http://{VENDOR_USER}:wrong-password@127.0.0.1:{squid_vendor}\n"
                                             f"socks5://{USER}:{PASSWORD}@127.0.0.1:{socks_port}\n")
        providers.append({"name": "dc", "type": "upstream", "upstream": {
            "mode": "list", "listFile": str(secrets / "proxies.txt"), "stateDir": str(tmp_path / "state"),
            "checkURL": echo.removeprefix("http://")}})
        pool = POOL.format(name="mix", replicas=4, template=json.dumps({"port": port_window[0]}), extra="",
                           providers=json.dumps([{"provider": "lab-a", "weight": 1}, {"provider": "lab-b", "weight": 1},
                                                 {"provider": "dc", "weight": 2}]))
        try:
            with up(tmp_path, redis_server.url, providers, {"pool.yaml": pool}, FLEET_PROBE_TARGET=f"{echo}/ip",
                    FLEET_PROBE_INTERVAL="500ms", FLEET_PROVIDER_CHECK_INTERVAL="10s") as stack:
                wait_for(lambda: len(stack.endpoints()) == 4, 90, "the pool's 4 members Running")
                by_provider = {ep["provider"]: k for k, ep in stack.endpoints().items() if ep["provider"] != "dc"}
                bought = {ep.get("scheme"): k for k, ep in stack.endpoints().items() if ep["provider"] == "dc"}
                assert set(by_provider) == {"lab-a", "lab-b"} and set(bought) == {"http", "socks5"}
                good = {*by_provider.values(), bought["socks5"]}
                served = served_by(stack, f"{echo}/ip", good)
                stack.answers.clear()
                for _ in range(30):  # the wrong password is the gateway's to retry (upstream_auth), never the crawler's
                    got = stack.get(f"{echo}/ip")
                    assert got is not None, stack.state()
                    served.add(got[1])
                assert bought["http"] not in served
                bad = wait_for(lambda: (v := stack.verdicts().get(bought["http"])) and v["healthy"] is False and v,
                               30, "the prober to mark the bad member unhealthy")
                assert "407" in bad["message"], bad
                for _ in range(3):
                    assert json.loads(stack.socks_get(f"{echo}/ip"))["origin"] in ("127.0.0.1", "127.0.0.2", "127.0.0.3")
                # the provider's check dials the list's first entry: its ProviderHealth says the vendor refused us
                health = wait_for(lambda: next((r for r in stack.health() if r["provider"] == "dc" and
                                                r["targets"] and r["targets"][0]["reason"] == "Unauthorized"), None),
                                  30, "dc's ProviderHealth to say Unauthorized")
                assert health["ready"] == "False" and PASSWORD not in json.dumps(health)
                socks_proc.kill()  # the SOCKS5 upstream dies mid-crawl: its requests go to the others
                socks_proc.wait(10)
                for _ in range(20):
                    got = stack.get(f"{echo}/ip")
                    assert got is not None and got[1] != bought["socks5"], stack.state()
                stack.assert_no_secret()
        finally:
            kill_all(state_dir)
