"""Issue 21, item 4, on real processes: the first installation to start on a
Redis database owns it; a worker, beat, the lease API or the prober of another
installation exits 1 at start with one line naming both."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleet.cli import commands
from fleet.testing.procs import free_port, wait_for
from tests.integration.test_proxies import fake

pytestmark = pytest.mark.integration


def test_a_second_installation_on_the_same_database_is_refused(redis_server, make_stack, tmp_path):
    blue = make_stack(redis_server.url, fake(tmp_path), FLEET_INSTALLATION="blue", FLEET_PROVIDER_CHECK_INTERVAL="0")
    blue.worker("edge")
    blue.wait_ready("worker:edge")
    assert redis_server.client().get("fleet:installation") == b"blue"

    (tmp_path / "green").mkdir()
    green = make_stack(redis_server.url, fake(tmp_path), FLEET_INSTALLATION="green", FLEET_PROVIDER_CHECK_INTERVAL="0")
    green.tmp = tmp_path / "green"
    for role, argv in (("worker:edge", commands.worker_argv("edge")), ("beat", commands.beat_argv()),
                       ("api", [sys.executable, "-m", "fleet.cli", "api", "--insecure-no-auth", "true",
                                "--api-bind-address", f"127.0.0.1:{free_port()}"])):
        p = green.start(role, argv)
        try:
            assert p.wait(60) == 1, green.log(role)[-2000:]
        except subprocess.TimeoutExpired:
            pytest.fail(f"{role} of installation green kept running on blue's database:\n{green.log(role)[-2000:]}")
        line = next(x for x in green.log(role).splitlines() if "start-up refused" in x)
        assert "belongs to installation 'blue', not 'green'" in line, line
    wait_for(lambda: "ready." in blue.log("worker:edge"), 5, "blue's worker still up")
    assert blue.procs["worker:edge"].poll() is None
