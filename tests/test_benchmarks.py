"""The benchmarks import the project (its harnesses are `fleet.testing`), never its tests: a benchmark runs from a
checkout or an installed tree that has no tests package, and a test's fixture is not a benchmark's harness."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_imports_no_test_module(path):
    assert {n for n in imported(path) if n == "tests" or n.startswith("tests.")} == set()


def test_the_benchmarks_are_found():
    assert len(BENCHMARKS) > 5


@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_the_gateway_benchmark_writes_a_bought_member_as_the_reconciler_does(tmp_path, scheme):
    """benchmarks/gateway.py --upstream: the member's endpoint has the dial hook's kind and credentials reference,
    and the gateway's Credentials find the secret it wrote under that reference."""
    from benchmarks import gateway as bench
    from fleet.credentials import Credentials, member_url
    from fleet.upstream import Auth

    doc = bench.upstream_endpoint("vendor-x", f"{scheme}://127.0.0.1:3128", tmp_path)
    assert {k: doc[k] for k in ("ip", "port", "scheme", "credentials", "provider")} == {
        "ip": "127.0.0.1", "port": 3128, "scheme": scheme, "credentials": "vendor-x", "provider": "vendor-x"}
    auth = Credentials(str(tmp_path)).get(doc["credentials"], member=member_url(doc["scheme"], doc["ip"], doc["port"]))
    assert auth == Auth(bench.UPSTREAM_USER, bench.UPSTREAM_PASSWORD)
    assert bench.UPSTREAM_PASSWORD not in repr(doc)  # a reference in Redis, never the secret


def test_the_gateway_benchmarks_haproxy_config_is_valid(tmp_path):
    """benchmarks/gateway.py --haproxy: the relay's floor is HAProxy in TCP mode with one thread, in front of the
    same Squids, and `haproxy -c` accepts the configuration the benchmark writes."""
    from benchmarks import gateway as bench

    binary = bench.haproxy_binary()
    if binary is None:
        pytest.fail("haproxy not found (on PATH or at /usr/sbin/haproxy). It comes from the Debian package `haproxy`, "
                    "listed in ci/apt-packages.txt: run `make deps` or `apt-get install haproxy`.")
    text = bench.haproxy_config(8080, [("127.0.0.1", 3128), ("127.0.0.1", 3129)], bench.haproxy_maxconn())
    lines = [line.strip() for line in text.splitlines()]
    assert {"nbthread 1", "mode tcp", "balance roundrobin", "bind 127.0.0.1:8080"} <= set(lines)
    assert [line for line in lines if line.startswith("server ")] == [
        "server squid0 127.0.0.1:3128", "server squid1 127.0.0.1:3129"]
    (tmp_path / "haproxy.cfg").write_text(text)
    checked = subprocess.run([binary, "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
