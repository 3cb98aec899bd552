"""`fleet up`: every process of a local stack as a child, restarted with
back-off when it exits, stopped together on SIGINT/SIGTERM (SIGTERM to each
process group, SIGKILL after 15 s)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet.cli import commands
from fleet.durations import format_duration
from fleet.settings import Settings

# A child that exits is restarted after 1s, doubling to 30s; a child that
# stayed up 60s starts again from 1s.
RESTART_MIN, RESTART_MAX, RESTART_RESET_AFTER = 1.0, 30.0, 60.0
STOP_GRACE = 15.0
# `fleet up` is a local stack: the prober's /metrics listens on loopback unless told otherwise.
LOCAL_PROBER_METRICS_BIND = "127.0.0.1:8081"
# ... and the lease API on loopback too (issue 14).
LOCAL_API_BIND = "127.0.0.1:8090"
# ... and the gateway and its /metrics (issue 23).
LOCAL_GATEWAY_BIND = "127.0.0.1:8888"
LOCAL_GATEWAY_METRICS_BIND = "127.0.0.1:8083"


def upstream_secrets(dial_files: dict[str, tuple[tuple[str, str], ...]], root: str) -> str | None:
    """The credentials directory the gateway and prober read (fleet.credentials) for the providers whose members
    they dial with credentials: `root/<provider>/<name>` a symbolic link to the file the provider's block names
    (`Runtime.dial_files`), so a rotated file is read as it is and no secret is copied. None when there are none."""
    made = False
    for provider, files in sorted(dial_files.items()):
        if not files:
            continue
        d = os.path.join(root, provider)
        os.makedirs(d, mode=0o700, exist_ok=True)
        for name, path in files:
            link = os.path.join(d, name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.symlink(path, link)
        made = True
    return root if made else None


def with_secrets_dir(children: list[Child], directory: str | None, environ: dict[str, str] | None = None) -> None:
    """Point the gateway and the prober at `directory` unless the user set their own."""
    user_env = os.environ if environ is None else environ
    if directory is None:
        return
    for child in children:
        var = {"gateway": "FLEET_GATEWAY_UPSTREAM_SECRETS_DIR", "prober": "FLEET_PROBER_UPSTREAM_SECRETS_DIR"}.get(child.role)
        if var and var not in user_env:
            child.env = {**child.env, var: directory}


@dataclass
class Child:
    """One process of `fleet up`, restarted with backoff when it exits."""

    role: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = RESTART_MIN
    restart_at: float = 0.0
    restarts: int = field(default=0)


def say(text: str) -> None:
    print(f"fleet up: {text}", file=sys.stderr, flush=True)


def _start(child: Child) -> None:
    child.proc = subprocess.Popen(child.argv, env=child.env, start_new_session=True)
    child.started = time.monotonic()
    say(f"{'restarted' if child.restarts else 'started'} {child.role} (pid {child.proc.pid})")


def next_restart(child: Child, now: float) -> float:
    """After `child` exited at `now`: the delay before starting it again.
    1s, doubling to 30s; back to 1s after a run of at least 60s."""
    if now - child.started >= RESTART_RESET_AFTER:
        child.delay = RESTART_MIN
    delay = child.delay
    child.delay = min(child.delay * 2, RESTART_MAX)
    return delay


def flower_auth(environ: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """Flower's environment for `fleet up`: the user's FLOWER_BASIC_AUTH /
    FLOWER_AUTH, else a generated `fleet:<random>` (returned, to print once)."""
    if environ.get("FLOWER_BASIC_AUTH") or environ.get("FLOWER_AUTH"):
        return environ, None
    generated = f"fleet:{secrets.token_urlsafe(18)}"
    return {**environ, "FLOWER_BASIC_AUTH": generated}, generated

def prober(settings: Settings, env: dict[str, str], environ: dict[str, str] | None = None) -> list[Child]:
    """The prober as a member of `fleet up` when --probe-target is set; otherwise none, said once."""
    if not settings.probe_target:
        say("prober off (no --probe-target): Proxies stay Healthy=Unknown/NotProbed")
        return []
    user_env = os.environ if environ is None else environ
    child_env = dict(env)
    if "FLEET_PROBER_METRICS_BIND_ADDRESS" not in user_env and settings.prober_metrics_bind_address == ":8081":
        child_env["FLEET_PROBER_METRICS_BIND_ADDRESS"] = LOCAL_PROBER_METRICS_BIND
    return [Child("prober", commands.prober_argv(), child_env)]


def api(settings: Settings, env: dict[str, str], environ: dict[str, str] | None = None) -> list[Child]:
    """The lease API as a member of `fleet up` when it has a token (FLEET_API_TOKEN or --api-token-file) or
    --insecure-no-auth; otherwise none, said once. On 127.0.0.1:8090 unless --api-bind-address says otherwise."""
    user_env = os.environ if environ is None else environ
    if not (settings.api_token_file or env.get("FLEET_API_TOKEN", "").strip() or settings.api_insecure):
        say("lease API off (no FLEET_API_TOKEN, --api-token-file or --insecure-no-auth)")
        return []
    child_env = dict(env)
    if "FLEET_API_BIND_ADDRESS" not in user_env and settings.api_bind_address == ":8090":
        child_env["FLEET_API_BIND_ADDRESS"] = LOCAL_API_BIND
    return [Child("api", commands.api_argv(), child_env)]


def gateway(settings: Settings, env: dict[str, str], environ: dict[str, str] | None = None) -> list[Child]:
    """The crawlers' gateway as a member of `fleet up` when --gateway-clients-file is set; otherwise none,
    said once. On 127.0.0.1:8888 (metrics 127.0.0.1:8083) unless the user's settings say otherwise."""
    if not settings.gateway_clients_file:
        say("gateway off (no --gateway-clients-file)")
        return []
    user_env = os.environ if environ is None else environ
    child_env = dict(env)
    if "FLEET_GATEWAY_BIND_ADDRESS" not in user_env and settings.gateway_bind_address == ":8888":
        child_env["FLEET_GATEWAY_BIND_ADDRESS"] = LOCAL_GATEWAY_BIND
    if "FLEET_GATEWAY_METRICS_BIND_ADDRESS" not in user_env and settings.gateway_metrics_bind_address == ":8083":
        child_env["FLEET_GATEWAY_METRICS_BIND_ADDRESS"] = LOCAL_GATEWAY_METRICS_BIND
    return [Child("gateway", commands.gateway_argv(), child_env)]


class Stop:
    """Set by SIGINT or SIGTERM (installed on creation)."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGINT, self._set)
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: Any) -> None:
        self.requested = True


def run(children: list[Child], stop: Stop, started: Callable[[], None] = lambda: None) -> None:
    """Start `children`, call `started`, restart what exits until `stop`;
    then stop them all."""
    for child in children:
        if not stop.requested:
            _start(child)
    started()
    while not stop.requested:
        now = time.monotonic()
        for child in children:
            if child.proc is not None and child.proc.poll() is not None:
                delay = next_restart(child, now)
                say(f"{child.role} exited with {child.proc.returncode}; restarting in {format_duration(delay)}")
                child.proc, child.restart_at = None, now + delay
            elif child.proc is None and now >= child.restart_at:
                child.restarts += 1
                _start(child)
        time.sleep(0.2)
    running = [c.proc for c in children if c.proc is not None]
    for p in running:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for p in running:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    say("stopped")
