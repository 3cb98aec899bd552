"""`make demo`: the whole local stack on an example config, then its results.

Starts a throwaway redis-server (persistent as deployed: an append-only file
fsynced every second, under the demo's state directory), a local KVM lab (a real sshd + libvirtd
serving libvirt's test driver, when the Debian packages are installed), a
local HTTP origin, and `fleet up` (a worker per provider, controller, beat)
on deploy/examples/providers.yaml plus a kvm provider pointing at the lab
and the `squid` provider of deploy/examples/local.yaml, with the three
Proxies of deploy/examples/proxies.yaml. It waits for the first round and
shows `fleet get ph` and the gauges; waits for the Proxies to run, shows
`fleet get px` and fetches the origin through each (each Squid has its own
egress address from the provider's `egressRange`, and the origin answers
with the address it sees); then `curl -x` through `fleet gateway` twice at
once (two proxies: two egress addresses) and twice with one session (the
same one). One more Proxy is a bought one: an `upstream` provider in vendor
mode whose endpoint is a real Squid asking for a password and leaving from
a new loopback address per session (fleet.testing.upstreams stands in for a
residential vendor); the gateway reaches the origin through it with
`-provider-resi`, the credentials read from files the demo wrote, never
from Redis. Then it removes the manifests, waits for the Squid processes to
be deleted, and stops it all.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fleet.testing.http import LoopbackServer, Quiet  # noqa: E402
from fleet.testing.kvmlab import TEST_POOL, TEST_URI, missing_binaries, running_lab  # noqa: E402
from fleet.testing.procs import free_port  # noqa: E402
from fleet.testing.redis import RedisServer  # noqa: E402
from fleet.testing.upstreams import squid_binary, vendor_squid  # noqa: E402

EGRESS_RANGE = "127.0.1.0/24"  # each Squid its own outgoing address (docs/local-provider.md)
VENDOR_EXITS = ("127.0.2.1", "127.0.2.2", "127.0.2.3")  # the stand-in vendor's exits, one per new session
VENDOR_USER = "demo-buyer"  # the account the vendor sold; its password is made up per run


class _EchoOrigin(Quiet):
    """Answers with the client address it sees (a proxy's egress address); /slow after a second, so two
    requests through the gateway overlap and hold two proxies at once."""

    def do_GET(self) -> None:
        if self.path.startswith("/slow"):
            time.sleep(1.0)
        self.reply(200, self.client_address[0].encode() + b"\n")


def kvm_provider(lab) -> dict:
    host = {"address": lab.address, "user": lab.user, "socket": lab.socket, "uri": TEST_URI}
    return {
        "name": "kvm-lab",
        "type": "kvm",
        "kvm": {
            "sshKeyFile": str(lab.key_file),
            "knownHostsFile": str(lab.known_hosts),
            "machineTypes": {"small": {"vcpus": 1, "memoryMiB": 512}},
            "hosts": [
                {"name": "lab", "pool": TEST_POOL, **host},
                # misconfigured on purpose, for contrast: the pool does not exist
                {"name": "lab-typo", "pool": "nope", **host},
            ],
        },
    }


def free_window(size: int = 20) -> int:
    """The first of `size` free loopback ports, from 31280 (the local provider's default range) up."""
    for lo in range(31280, 40000, size):
        if all(_free(p) for p in range(lo, lo + size)):
            return lo
    raise SystemExit("no free window of loopback ports for the demo's proxies")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def curl_gateway(gateway: str, user: str, token: str, url: str) -> subprocess.Popen:
    """A real `curl -x` through the gateway, started (the caller waits: two may overlap)."""
    return subprocess.Popen(["curl", "-s", "-i", "--max-time", "20", "-x", f"http://{gateway}", "--proxy-user",
                             f"{user}:{token}", url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def curl_answer(proc: subprocess.Popen) -> tuple[str, str, str]:
    """(status line, X-Fleet-Proxy, body) of a finished curl_gateway."""
    out, _ = proc.communicate(timeout=30)
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines() or [""]
    via = next((ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("x-fleet-proxy:")), "-")
    return lines[0], via, body.strip()


def through_gateway(gateway: str, token: str, origin_url: str, bought: bool) -> bool:
    """Twice at once without a session (two proxies, two egress addresses), then twice with one (the
    same), then once through the bought member when there is one; True when all hold."""
    ok = True
    print(f"\n$ curl -x http://demo:$GATEWAY_TOKEN@{gateway} {origin_url}slow   # twice at once")
    pair = [curl_answer(p) for p in [curl_gateway(gateway, "demo", token, origin_url + "slow") for _ in range(2)]]
    for status, via, body in pair:
        print(f"{status}  X-Fleet-Proxy: {via}  origin saw {body}")
    if len({body for _, _, body in pair}) != 2 or not all(" 200" in status for status, _, _ in pair):
        print("FAILED: two requests at once should leave through two proxies with two egress addresses")
        ok = False
    print(f"$ curl -x http://demo-session-s1:$GATEWAY_TOKEN@{gateway} {origin_url}   # twice, one session")
    sticky = [curl_answer(curl_gateway(gateway, "demo-session-s1", token, origin_url)) for _ in range(2)]
    for status, via, body in sticky:
        print(f"{status}  X-Fleet-Proxy: {via}  origin saw {body}")
    if len({(via, body) for _, via, body in sticky}) != 1 or not all(" 200" in status for status, _, _ in sticky):
        print("FAILED: one session should keep its proxy and egress address")
        ok = False
    if bought:
        print(f"$ curl -x http://demo-provider-resi:$GATEWAY_TOKEN@{gateway} {origin_url}   # the bought member")
        status, via, body = curl_answer(curl_gateway(gateway, "demo-provider-resi", token, origin_url))
        print(f"{status}  X-Fleet-Proxy: {via}  origin saw {body} (the vendor's exit)")
        if " 200" not in status or body not in VENDOR_EXITS:
            print("FAILED: the bought member should reach the origin from one of the vendor's exits")
            ok = False
    return ok


def buy(stack: contextlib.ExitStack, tmp_path: Path, origin_url: str) -> dict | None:
    """The stand-in vendor started and the `upstream` provider block naming it (vendor mode: each member a session
    of the account), its credentials in files only this run can read; None (said why) without Squid."""
    if squid_binary() is None:
        print("(no bought member: squid with basic_ncsa_auth is not installed)")
        return None
    password = secrets.token_urlsafe(12)
    port = stack.enter_context(vendor_squid(f"{VENDOR_USER}-country-us", password, exits=VENDOR_EXITS))
    creds = tmp_path / "resi"
    creds.mkdir(mode=0o700)
    (creds / "username").write_text(VENDOR_USER + "\n")
    (creds / "password").write_text(password + "\n")
    host = origin_url.removeprefix("http://").rstrip("/")
    return {"name": "resi", "type": "upstream", "upstream": {
        "mode": "vendor", "endpoint": f"http://127.0.0.1:{port}",
        "usernameTemplate": "{user}-session-{session}-country-{country}",
        "usernameFile": str(creds / "username"), "passwordFile": str(creds / "password"),
        "checkPlacement": {"country": "us"}, "checkURL": host, "stateDir": str(tmp_path / "resi-state")}}


def fetch(ip: str, port: int, url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:{port}"}))
    with opener.open(url, timeout=10) as resp:
        return f"{resp.status} {resp.read().decode().strip()}"


def fleet(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fleet-demo-") as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        redis_srv = RedisServer(tmp_path, persistent=True)  # AOF, fsynced every second, in the demo's state dir
        redis_srv.start()
        stack.callback(redis_srv.stop)
        config = yaml.safe_load((ROOT / "deploy/examples/providers.yaml").read_text())
        if missing_binaries():
            print(f"(no KVM lab: missing {', '.join(missing_binaries())})")
        else:
            lab = stack.enter_context(running_lab())
            config["providers"].append(kvm_provider(lab))
        lo = free_window()
        state = tempfile.mkdtemp(prefix="fleet-demo-squid-")  # squid's user must enter it: not under tmp (0700)
        os.chmod(state, 0o755)
        stack.callback(shutil.rmtree, state, True)
        squid = yaml.safe_load((ROOT / "deploy/examples/local.yaml").read_text())["providers"][0]
        squid["local"] = {"stateDir": state, "portRange": f"{lo}-{lo + 19}", "egressRange": EGRESS_RANGE}
        config["providers"].append(squid)
        manifests = tmp_path / "proxies"
        manifests.mkdir()
        declared = yaml.safe_load((ROOT / "deploy/examples/proxies.yaml").read_text())
        for i, item in enumerate(declared["items"]):
            item["spec"]["port"] = lo + i
        origin_url = stack.enter_context(LoopbackServer(_EchoOrigin, "origin")).url + "/"
        bought = buy(stack, tmp_path, origin_url)
        if bought is not None:
            config["providers"].append(bought)
            declared["items"].append({"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
                                      "metadata": {"name": "bought-a", "namespace": "crawl"},
                                      "spec": {"provider": "resi", "port": 3128, "placement": {"region": "us"}}})
        (manifests / "proxies.yaml").write_text(yaml.safe_dump(declared, sort_keys=False))
        gateway_token = secrets.token_urlsafe(24)
        clients = tmp_path / "gateway-clients.yaml"
        clients.write_text(yaml.safe_dump({"clients": {"demo": {"token": gateway_token, "ports": "*"}}}))
        gateway = f"127.0.0.1:{free_port()}"
        cfg_path = tmp_path / "providers.yaml"
        cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
        metrics = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "FLEET_PROVIDERS_CONFIG": str(cfg_path), "FLEET_BROKER_URL": redis_srv.url,
               "FLEET_PROVIDER_CHECK_INTERVAL": "10s", "FLEET_METRICS_BIND_ADDRESS": metrics,
               "FLEET_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT), "FLEET_PROXIES": str(manifests),
               "FLEET_PROXY_POLL_INTERVAL": "2s", "FLEET_PROBE_TARGET": origin_url,
               "FLEET_PROBER_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
               "FLEET_GATEWAY_CLIENTS_FILE": str(clients), "FLEET_GATEWAY_BIND_ADDRESS": gateway,
               "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
               "FLEET_MAX_LEASES_PER_PROXY": "2"}  # room for a session's next request while the last is released
        print(f"$ fleet up -c {cfg_path} --proxies {manifests}   (broker {redis_srv.url}; logs in {tmp_path}/up.log)")
        with open(tmp_path / "up.log", "w") as log:
            up = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "--no-flower"], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def stop_up() -> None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)

        stack.callback(stop_up)
        names = [p["name"] for p in config["providers"]]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = fleet(env, "get", "ph")
            if all(f"\n{n} " in "\n" + text and "NotCheckedYet" not in text for n in names):
                break
            if up.poll() is not None:
                print((tmp_path / "up.log").read_text()[-3000:])
                return 1
            time.sleep(1)
        print("\n$ fleet get ph")
        print(fleet(env, "get", "ph"))
        print(f"$ curl -s http://{metrics}/metrics | grep provider_target_up")
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        print("\n".join(line for line in body.splitlines() if line.startswith("proxy_operator_provider_target_up")))
        proxies = wait_proxies(env, up, tmp_path, len(declared["items"]))
        if proxies is None:
            return 1
        print("\n$ fleet get px")
        print(fleet(env, "get", "px"))
        for item in proxies:
            if item["spec"]["provider"] == "resi":
                continue  # a bought member asks for the vendor's credentials: the gateway has them, below
            st = item["status"]
            print(f"$ curl -x http://{st['ip']}:{st['port']} {origin_url}   # {item['metadata']['name']}")
            print(fetch(st["ip"], st["port"], origin_url))
        if not through_gateway(gateway, gateway_token, origin_url, bought is not None):
            print((tmp_path / "up.log").read_text()[-3000:])
            return 1
        print(f"\n$ rm {manifests}/proxies.yaml   # deleting the Proxies stops their Squid processes")
        (manifests / "proxies.yaml").unlink()
        if wait_proxies(env, up, tmp_path, 0) is None:
            return 1
        print(fleet(env, "get", "px").strip() or "(no Proxies left)")
        print("\nRun it yourself: . .venv/bin/activate; redis-server & then fleet up -c deploy/examples/providers.yaml  and  fleet get ph")
        print("  Proxies: fleet up -c deploy/examples/local.yaml --proxies deploy/examples/proxies.yaml  and  fleet get px")
        print("  Gateway: add --gateway-clients-file clients.yaml (docs/gateway.md), then curl -x http://CLIENT:TOKEN@127.0.0.1:8888 URL")
    shutil.rmtree(tmp_path, ignore_errors=True)
    return 0


def healthy(item: dict) -> bool:
    """Running, and the prober has judged it healthy (a CONNECT + GET through it reached the origin)."""
    st = item.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Healthy" and c.get("status") == "True" for c in st.get("conditions") or [])


def wait_proxies(env: dict, up: subprocess.Popen, tmp_path: Path, count: int, timeout: float = 90) -> list | None:
    """Every Proxy Running and probed healthy (and `count` of them), or None after printing why not."""
    deadline = time.monotonic() + timeout
    items: list = []
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "px", "-o", "json"], env=env, capture_output=True,
                             text=True, timeout=60)
        items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
        if len(items) == count and all(healthy(i) for i in items):
            return items
        if up.poll() is not None:
            break
        time.sleep(1)
    print(f"the Proxies did not settle: {[(i['metadata']['name'], (i.get('status') or {}).get('phase')) for i in items]}")
    print((tmp_path / "up.log").read_text()[-3000:])
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: the ExitStack above has stopped fleet up, the lab and Redis
        print("\nstopped", file=sys.stderr)
        sys.exit(130)
