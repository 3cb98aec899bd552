"""`make demo`: the whole local stack on an example config, then its results.

Starts a throwaway redis-server, a local KVM lab (a real sshd + libvirtd
serving libvirt's test driver, when the Debian packages are installed),
`fleet up` (a worker per provider, controller, beat) on
deploy/examples/providers.yaml plus a kvm provider pointing at the lab, waits
for the first round, shows `fleet get ph` and the gauges, and stops it all.
"""

from __future__ import annotations

import contextlib
import os
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

from tests.integration.conftest import RedisServer, free_port  # noqa: E402
from tests.providers.kvm.lab import TEST_POOL, TEST_URI, missing_binaries, running_lab  # noqa: E402


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


def fleet(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fleet-demo-") as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        redis_srv = RedisServer(tmp_path)
        redis_srv.start()
        stack.callback(redis_srv.stop)
        config = yaml.safe_load((ROOT / "deploy/examples/providers.yaml").read_text())
        if missing_binaries():
            print(f"(no KVM lab: missing {', '.join(missing_binaries())})")
        else:
            lab = stack.enter_context(running_lab())
            config["providers"].append(kvm_provider(lab))
        cfg_path = tmp_path / "providers.yaml"
        cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
        metrics = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "FLEET_PROVIDERS_CONFIG": str(cfg_path), "FLEET_BROKER_URL": redis_srv.url,
               "FLEET_PROVIDER_CHECK_INTERVAL": "10s", "FLEET_METRICS_BIND_ADDRESS": metrics,
               "FLEET_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT)}
        print(f"$ fleet up -c {cfg_path}   (broker {redis_srv.url}; logs in {tmp_path}/up.log)")
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
        print("\nRun it yourself: . .venv/bin/activate; redis-server & then fleet up -c deploy/examples/providers.yaml  and  fleet get ph")
    shutil.rmtree(tmp_path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: the ExitStack above has stopped fleet up, the lab and Redis
        print("\nstopped", file=sys.stderr)
        sys.exit(130)
