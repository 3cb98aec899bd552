"""`fleet probe` (the workers' and beat's exec probes) and `fleet flower`'s
refusal to start open."""

from __future__ import annotations

import subprocess
import sys

import fakeredis
import pytest

from fleet.celery import presence
from fleet.cli import commands, probe
from fleet.cli import subcommands as cli
from fleet.serving import with_probes
from fleet.store import Store

UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def client():
    return Store(fakeredis.FakeRedis())


def test_ready_when_the_broker_answers(client):
    assert probe.ready(client)[0] == probe.OK


def test_not_ready_when_it_does_not():
    assert probe.run("ready", UNREACHABLE, None, 1.0) == probe.FAILED


def test_alive_needs_this_pods_heartbeat(client):
    assert probe.live(client, "kvm-home", "pod-a")[0] == probe.FAILED
    presence.beat_once(client, ["kvm-home"], probe.node_name("kvm-home", "pod-a"))
    assert probe.live(client, "kvm-home", "pod-a")[0] == probe.OK
    assert probe.live(client, "kvm-home", "pod-b")[0] == probe.FAILED, "another pod's heartbeat is not ours"


def test_node_name_is_the_worker_name_template_expanded():
    argv = commands.worker_argv("kvm-home")
    assert argv[argv.index("-n") + 1].replace("%h", "pod-a") == probe.node_name("kvm-home", "pod-a")


def test_a_broker_outage_never_fails_liveness():
    assert probe.run("live", UNREACHABLE, "kvm-home", 1.0) == probe.OK


def test_the_probe_never_touches_a_backend():
    """A dead hypervisor cannot make a pod unready: the probe does not even
    import the providers or their SDKs."""
    code = (
        "import sys, fleet.cli.probe; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('providers', 'libvirt', 'paramiko', 'google', 'kubernetes')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == "[]"


def test_cli_probe(monkeypatch, capsys):
    monkeypatch.setenv("FLEET_BROKER_URL", UNREACHABLE)
    assert cli.main(["probe", "ready", "--timeout", "1s"]) == 1
    assert "broker unreachable" in capsys.readouterr().err
    assert cli.main(["probe", "live"]) == cli.EXIT_BAD_INPUT
    assert cli.main(["probe", "live", "-p", "x", "--timeout", "1s"]) == 0


def test_flower_refuses_to_start_open(monkeypatch, capsys):
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("FLOWER_AUTH", raising=False)
    monkeypatch.setattr(cli, "_exec", lambda argv, env: pytest.fail("started Flower without auth"))
    assert cli.main(["flower"]) == cli.EXIT_BAD_INPUT
    assert "without authentication" in capsys.readouterr().err


def test_flower_with_basic_auth_runs_the_one_flower_command(monkeypatch):
    started = []
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "ops:secret")
    monkeypatch.setattr(cli, "_exec", lambda argv, env: started.append((argv, env)) or 0)
    assert cli.main(["flower", "--port", "5555", "--address", "0.0.0.0"]) == 0
    ((argv, env),) = started
    assert argv == commands.flower_argv(5555, "0.0.0.0")
    assert "ops:secret" not in " ".join(argv) and env["FLOWER_BASIC_AUTH"] == "ops:secret"


def _get(app, path: str) -> tuple[str, bytes]:
    seen = []
    body = b"".join(app({"PATH_INFO": path}, lambda status, headers: seen.append(status)))
    return seen[0], body


def test_controller_probes_on_the_metrics_port():
    def metrics(environ, start_response):
        start_response("200 OK", [])
        return [b"# metrics\n"]

    def down():
        raise ConnectionError("Error 111 connecting to redis:6379")

    up = with_probes(metrics, lambda: True)
    assert _get(up, "/readyz")[0].startswith("200")
    assert _get(up, "/metrics") == ("200 OK", b"# metrics\n")
    broken = with_probes(metrics, down)
    status, body = _get(broken, "/readyz")
    assert status.startswith("503") and b"broker unreachable" in body
    assert _get(broken, "/livez")[0].startswith("200"), "a Redis outage never fails liveness"
