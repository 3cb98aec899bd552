"""The command lines of each role, in one place: `fleet worker|controller|
beat|up` run them, and the deploy manifests and compose file use the same."""

from __future__ import annotations

import sys

from fleet.celery import routing

CELERY = [sys.executable, "-m", "celery", "-A", "fleet.celery.app"]
# Provider calls are I/O-bound and share per-process connection pools.
WORKER_POOL = ["--pool", "threads"]


def worker_node(provider: str) -> str:
    """The worker name template of a provider's workers (`%h`: the host)."""
    return f"{provider}@%h"


def worker_argv(provider: str, concurrency: int = 4) -> list[str]:
    return CELERY + [
        "worker", "-Q", routing.provider_queue(provider), "-n", worker_node(provider),
        *WORKER_POOL, "--concurrency", str(concurrency), "--without-mingle",
    ]


def controller_argv(concurrency: int = 4) -> list[str]:
    return CELERY + [
        "worker", "-Q", routing.CONTROLLER_QUEUE, "-n", "controller@%h",
        *WORKER_POOL, "--concurrency", str(concurrency), "--without-mingle",
    ]


def beat_argv() -> list[str]:
    return CELERY + ["beat", "--scheduler", "beat.scheduler:FleetScheduler"]


def flower_argv(port: int = 5555, address: str = "127.0.0.1") -> list[str]:
    return CELERY + ["flower", f"--port={port}", f"--address={address}"]


def prober_argv() -> list[str]:
    """`fleet prober`: asyncio, no Celery; settings from FLEET_* in its environment."""
    return [sys.executable, "-m", "fleet.cli", "prober"]


def api_argv() -> list[str]:
    """`fleet api` (issue 14): uvicorn, no Celery; settings and token from FLEET_* in its environment."""
    return [sys.executable, "-m", "fleet.cli", "api"]


def gateway_argv() -> list[str]:
    """`fleet gateway` (issue 23): asyncio, no Celery; settings and clients file from FLEET_* in its environment."""
    return [sys.executable, "-m", "fleet.cli", "gateway"]
