"""The `fleet` command imports only what the command it runs uses (issue 24):
building the parser (`fleet --help`, and every command before it runs) imports no
third-party module at all, and `fleet get px` none of the Celery, Kubernetes,
metrics or pydantic stacks. Checked on the modules a fresh interpreter holds after
the real command ran, not on timings (benchmarks/cli.py measures those)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE_PROXIES = Path(__file__).resolve().parents[2] / "deploy/examples/proxies.yaml"

# Runs `fleet ARGV...` in-process and writes the modules it imported (beyond the
# interpreter's start-up) and its exit code to the file named first.
PROBE = """
import json, sys
out, argv = sys.argv[1], sys.argv[2:]
before = set(sys.modules)
from fleet.cli import main
try:
    code = main(argv)
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(set(sys.modules) - before)}, f)
"""

# What `fleet get px` must not load: each is a stack another command needs.
NOT_FOR_GET_PX = ("celery", "kombu", "billiard", "kubernetes", "prometheus_client", "pydantic", "fastapi", "starlette",
                  "uvicorn", "uvloop", "httpx", "boto3", "botocore", "google", "hcloud", "libvirt", "scrapy",
                  "fleet.celery", "fleet.proxies.reconciler", "fleet.serving", "fleet.config")


def imported(tmp_path, *argv: str) -> tuple[int, list[str]]:
    out = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], check=False, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    got = json.loads(out.read_text())
    return got["code"], got["modules"]


def third_party(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] not in sys.stdlib_module_names
                  and m.split(".")[0] not in ("fleet", "providers"))


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("argv", [("--help",), ("get", "--help"), ("up", "--help"), ("scale", "--help")])
def test_the_parser_imports_no_third_party_module(tmp_path, argv):
    code, modules = imported(tmp_path, *argv)
    assert code == 0
    assert third_party(modules) == []
    assert "asyncio" not in modules
    assert "fleet.cli.subcommands" in modules  # the probe ran the real command


def test_a_usage_error_imports_no_third_party_module(tmp_path):
    code, modules = imported(tmp_path, "get")  # RESOURCE missing: argparse's exit 2
    assert code == 2
    assert third_party(modules) == []


def test_get_px_imports_redis_and_the_table_only(tmp_path, redis_server):
    code, modules = imported(tmp_path, "get", "px", "--broker", f"redis://127.0.0.1:{redis_server.port}/0",
                             "--proxies", str(EXAMPLE_PROXIES), "-o", "yaml")
    assert code == 0
    assert "redis" in modules and "fleet.proxies.standalone" in modules  # it did read Redis
    assert loaded(modules, NOT_FOR_GET_PX) == []
