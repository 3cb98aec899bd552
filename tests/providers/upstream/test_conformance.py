"""The provider contract (conformance.py) for upstream, in both modes, and
the Checker rules against scripted upstreams in every state the suite asks for.

Which rules don't apply, and why:

- `FaultConformance` (exempt in tests/providers/test_conformance.py): the
  verbs make no request on a wire: they read and write a state file (and
  read listFile); test_provider.py breaks both (a corrupt state file, a
  missing listFile) and checks the classes.
- "Running only with an IP": a member is Running at once, with the
  upstream's host (which may be a DNS name) as its IP; nothing provisions.
- The cloud-init sentinel: cloud_init is ignored (no machine); the sentinel
  here is the credentials' (test_provider.py).
"""

from __future__ import annotations

import itertools

import pytest

from providers.upstream.check import UPSTREAM_REASONS
from providers.upstream.config import UpstreamConfig
from providers.upstream.provider import UpstreamProvider
from tests.providers import conformance
from tests.providers.upstream.conftest import PASSWORD, USER, bad_gateway, drop, garbage, hang

NAME = "up-conformance"


class TestUpstreamListProvider(conformance.ProviderConformance):
    provider_name = NAME
    malformed_ids = ("", "not-an-id", "ftp://1.2.3.4:21", "http://1.2.3.4:0", "http://u:p@1.2.3.4:8080",
                     "http://1.2.3.4:8080/sessions/SHORT", "http://1.2.3.4:8080/x")

    @pytest.fixture
    def provider(self, tmp_path):
        proxies = [f"http://203.0.113.{i}:8080" for i in range(1, 101)]
        (tmp_path / "list").write_text("".join(f"socks5://u{i}:p{i}@198.51.100.{i}:1080\n" for i in range(1, 101)))
        cfg = UpstreamConfig.model_validate({"mode": "list", "proxies": proxies, "listFile": str(tmp_path / "list"),
                                             "stateDir": str(tmp_path / "state")})
        return UpstreamProvider(NAME, cfg)


class TestUpstreamVendorProvider(conformance.ProviderConformance):
    provider_name = NAME
    malformed_ids = TestUpstreamListProvider.malformed_ids + ("http://gate.vendor.example:7777/sessions/abcdefgh?planet=mars",)

    @pytest.fixture
    def provider(self, tmp_path):
        cfg = UpstreamConfig.model_validate({
            "mode": "vendor", "endpoint": "http://gate.vendor.example:7777",
            "usernameTemplate": "{user}-session-{session}", "usernameFile": str(tmp_path / "u"),
            "passwordFile": str(tmp_path / "p"), "stateDir": str(tmp_path / "state")})
        return UpstreamProvider(NAME, cfg)


SCRIPTS = {
    conformance.MALFORMED: garbage,
    conformance.SERVER_ERROR: bad_gateway,
    conformance.DROPPED: drop,
    conformance.HANGS: hang,
}


@pytest.mark.integration
class TestUpstreamChecker(conformance.CheckerConformance):
    """HEALTHY is a real authenticated SOCKS5 server (microsocks); the
    others an HTTP upstream scripted into each state."""

    own_reasons = UPSTREAM_REASONS

    @pytest.fixture
    def make_checker(self, tmp_path, microsocks, origin, scripted):
        made = itertools.count()

        def make(state: str) -> UpstreamProvider:
            n = next(made)
            if state == conformance.HEALTHY:
                url = f"socks5://{USER}:{PASSWORD}@127.0.0.1:{microsocks}"
            elif state == conformance.UNREACHABLE:
                url = "http://127.0.0.1:1"
            else:
                url = f"http://127.0.0.1:{scripted(SCRIPTS[state]).port}"
            (tmp_path / f"list-{n}").write_text(url + "\n")
            cfg = UpstreamConfig.model_validate({"mode": "list", "listFile": str(tmp_path / f"list-{n}"),
                                                 "checkURL": f"127.0.0.1:{origin}", "stateDir": str(tmp_path / "state")})
            return UpstreamProvider(NAME, cfg)

        return make
