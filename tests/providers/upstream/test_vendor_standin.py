"""The vendor stand-in the end-to-end tests rely on (conftest `vendor_exits`): a real Squid that leaves from a new
exit for each new session of the account and keeps a session on its exit; wrong passwords get a 407. Shown through
requests to an origin that echoes the caller's address."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from fleet.testing.http import LoopbackServer
from tests.integration.test_prober import _Echo
from tests.providers.upstream.conftest import PASSWORD, USER

pytestmark = pytest.mark.integration


def _exit(port: int, origin: str, username: str, password: str = PASSWORD) -> str:
    auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
    with opener.open(urllib.request.Request(f"{origin}/ip", headers={"Proxy-Authorization": auth}), timeout=10) as r:
        return json.loads(r.read())["origin"]


def test_each_new_session_leaves_from_the_next_exit_and_keeps_it(vendor_exits):
    port, exits = vendor_exits
    with LoopbackServer(_Echo, "echo") as echo:
        seen = [_exit(port, echo.url, f"{USER}-session-{s}-country-us") for s in ("aaa1", "bbb2", "aaa1", "ccc3")]
        assert seen[0] != seen[1] and seen[0] == seen[2] and len({seen[0], seen[1], seen[3]}) == 3
        assert set(seen) <= set(exits)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _exit(port, echo.url, f"{USER}-session-aaa1-country-us", password="wrong")
        assert refused.value.code == 407
        refused.value.close()
