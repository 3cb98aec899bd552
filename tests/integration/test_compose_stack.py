"""docker-compose.yml's stack run with `fleet up` on loopback, no container engine: the `tokens` service's command
makes the tokens, then `fleet up` runs the roles of the other services with their environment (the same
variables and files; container paths become this test's files, ports free loopback ports, the Redis this test
started), a real provider worker starts a real Squid for each of the two Proxies of deploy/compose/proxies.yaml,
and the gateway relays the curl of docs/compose.md, with the generated token, to a local origin through one of
them.

What differs from compose, each for the test's own sake: the local provider's stateDir and portRange and the
Proxies' ports (a state directory and ports of this test's own), and the target (a local origin on port 80, not
example.com)."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.settings import OPTIONS
from fleet.testing.http import Quiet
from fleet.testing.procs import die_with_parent, free_port, wait_for
from tests.deploy import compose as cf
from tests.providers.local.conftest import ORIGIN_BODY, kill_all, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

PATHS = {o.env for o in OPTIONS if o.check == "path"}
BINDS = {o.env for o in OPTIONS if o.check == "bind"}
CURL = re.compile(r"^curl -x http://(\w+):\$TOKEN@127\.0\.0\.1:8888 (\S+)$", re.M)


class _Origin(Quiet):
    def do_GET(self) -> None:
        self.reply(200, ORIGIN_BODY)


@pytest.fixture
def origin() -> Iterator[str]:
    """An origin on port 80, as docs/compose.md's http://example.com/ (the generated client may use ports 80 and
    443 only), of an address of its own in 127.0.0.0/8; yields its URL."""
    for _ in range(20):
        host = f"127.88.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
        try:
            httpd = ThreadingHTTPServer((host, 80), _Origin)
            break
        except PermissionError:
            pytest.skip("binding port 80 needs root (CI runs as root)")
        except OSError:
            continue
    else:
        pytest.fail("no loopback address with a free port 80")
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="origin-80", daemon=True)
    thread.start()
    yield f"http://{host}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def localized_files(tmp_path: Path, state_dir: str, window: tuple[int, int]) -> dict[str, Path]:  # noqa: F811
    """compose's bind-mounted files as this test runs them: the provider's state dir and ports, and the
    Proxies' ports, moved into the test's own."""
    providers = yaml.safe_load((cf.ROOT / "deploy/compose/providers.yaml").read_text())
    (entry,) = providers["providers"]
    entry["local"].update(stateDir=state_dir, portRange=f"{window[0]}-{window[1]}")
    proxies = yaml.safe_load((cf.ROOT / "deploy/compose/proxies.yaml").read_text())
    for i, item in enumerate(proxies["items"]):
        item["spec"]["port"] = window[0] + i
    out = {"./deploy/compose/providers.yaml": tmp_path / "providers.yaml",
           "./deploy/compose/proxies.yaml": tmp_path / "proxies.yaml"}
    out["./deploy/compose/providers.yaml"].write_text(yaml.safe_dump(providers))
    out["./deploy/compose/proxies.yaml"].write_text(yaml.safe_dump(proxies))
    return out


def stack_env(compose: dict[str, Any], services: list[str], files: dict[str, Path], volumes: Path,
              broker: str) -> dict[str, str]:
    """One environment for `fleet up` (it gives its children one): the services' variables, each with one value
    across them; a path setting the host path of what the service mounts there; a bind address a free loopback
    port; the broker this test's Redis."""
    env: dict[str, str] = {}
    for name in services:
        svc = compose["services"][name]
        for var, value in cf.environment(svc, {}).items():
            if var in PATHS and value:
                source, rest = cf.source_of(svc, value)
                value = str(files[source] if source.startswith("./") else volumes / source / rest)
            elif var in BINDS:
                value = f"127.0.0.1:{free_port()}"
            elif var == "FLEET_BROKER_URL":
                value = broker
            assert env.get(var, value) == value or var in BINDS, f"{var} differs between services"
            env[var] = value
    return env


def fleet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def role(service: str) -> str:
    return service.replace("worker-", "worker:", 1) if service.startswith("worker-") else service


@pytest.mark.timeout(300)
def test_compose_stack_under_fleet_up_relays_a_curl_through_a_proxy(redis_server, tmp_path, state_dir, port_window,  # noqa: F811
                                                                     origin):
    if squid_binary() is None or shutil.which("curl") is None:
        pytest.fail("squid or curl is not installed: run `make test`, which installs both (ci/apt-packages.txt)")
    compose = cf.load()
    services = [n for n in cf.fleet_services(compose) if n != cf.NET]  # plain `up`: flower is behind a profile
    volumes = tmp_path / "volumes"
    for name in compose["volumes"]:
        (volumes / name).mkdir(parents=True)
    files = localized_files(tmp_path, state_dir, port_window)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "FLOWER_"))},
           **stack_env(compose, services, files, volumes, redis_server.url)}

    # the one-shot `tokens` service: twice, as a second `docker compose up` runs it again
    for _ in range(2):
        made = fleet(*compose["services"]["tokens"]["command"][1:], env=env)
        assert made.returncode == 0, made.stderr
        assert made.stdout == ""
    token = fleet("token", "gateway", env=env).stdout.strip()
    assert len(token) == 43 and token not in made.stderr

    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        up = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "--no-flower"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    try:
        # the roles of compose's long-running services; the prober idles there without a target, and is left
        # out here for the same reason
        expected = {role(n) for n in services if n not in ("tokens", "prober")}
        assert not env.get("FLEET_PROBE_TARGET")
        started = wait_for(lambda: set(re.findall(r"fleet up: started (\S+)", log_path.read_text())) or None, 30,
                           "fleet up to start its children")
        wait_for(lambda: set(re.findall(r"fleet up: started (\S+)", log_path.read_text())) >= expected, 30,
                 f"{expected} started")
        started = set(re.findall(r"fleet up: started (\S+)", log_path.read_text()))
        assert started == expected == {"worker:local", "controller", "beat", "api", "gateway"}

        gateway_port = env["FLEET_GATEWAY_BIND_ADDRESS"].rsplit(":", 1)[1]
        (client, _target), = CURL.findall((cf.ROOT / "docs/compose.md").read_text())
        assert client == "crawler"
        headers = tmp_path / "headers"

        def relayed() -> str | None:
            argv = shlex.split(f"curl -x http://{client}:{token}@127.0.0.1:{gateway_port} {origin}")
            argv[1:1] = ["-sS", "--max-time", "10", "-D", str(headers)]
            got = subprocess.run(argv, capture_output=True, timeout=30)
            if got.returncode == 0 and got.stdout == ORIGIN_BODY:
                return headers.read_text()
            return None

        try:
            head = wait_for(relayed, 120, "the gateway to relay the curl through a Proxy", interval=1)
        except AssertionError:
            px = fleet("get", "px", "-o", "wide", env=env)
            pytest.fail(f"no relay; fleet get px:\n{px.stdout}{px.stderr}\nfleet up:\n{log_path.read_text()[-6000:]}")
        proxy = re.search(r"(?im)^X-Fleet-Proxy: (\S+)", head).group(1)
        assert proxy in {"crawl/egress-a", "crawl/egress-b"}
        assert token not in log_path.read_text(), "the token is never logged"
        api = fleet("token", "api", env=env)
        assert api.returncode == 0 and len(api.stdout.strip()) == 43
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        kill_all(state_dir)
