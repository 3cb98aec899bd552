"""Issue 18, item 1, as a user meets it: a real controller and a real local
(Squid) provider worker, a Proxy whose port another process holds, so every
create fails Transient for as long as the test runs. The retries must back
off 1, 2, 4, 8 s (before the fix they went 1, 2, 2, 2 …: 23 creates in 45 s),
and once the port frees the next retry runs Squid and the count resets."""

from __future__ import annotations

import itertools
import socket
import time

import pytest

from fleet.store import keys
from fleet.testing.procs import wait_for
from tests.integration.test_local_proxies import declare, lab, status  # noqa: F401  (the fixture)
from tests.providers.local.conftest import kill_all, origin, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration


def test_a_create_that_keeps_failing_backs_off_1_2_4_8_and_recovers(lab, redis_server):  # noqa: F811
    port = lab.ports[0] + 3
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    r = redis_server.client()
    try:
        declare(lab, "held", port)
        seen: list[tuple[float, int]] = []  # (when the count moved, failures in a row)
        end = time.monotonic() + 17
        while time.monotonic() < end:
            raw = r.hget(keys.PX_FAILURES, "crawl/held")
            n = int(raw.decode().partition("|")[0]) if raw else 0
            if n and (not seen or seen[-1][1] != n):
                seen.append((time.monotonic(), n))
            time.sleep(0.02)
        counts = [n for _, n in seen]
        assert counts[:5] == [1, 2, 3, 4, 5], seen
        gaps = [round(b[0] - a[0], 2) for a, b in itertools.pairwise(seen[:5])]
        for gap, want in zip(gaps, (1, 2, 4, 8), strict=True):
            assert want - 0.3 <= gap <= want + 1.5, (gaps, "want 1, 2, 4, 8 s between creates")
        st = status(lab, "held")
        assert st["phase"] == "Pending" and str(port) in st["message"], st
    finally:
        holder.close()
    wait_for(lambda: status(lab, "held").get("phase") == "Running", 60, "Running once the port is free")
    assert r.hget(keys.PX_FAILURES, "crawl/held") is None
