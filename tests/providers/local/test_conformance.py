"""The provider contract (conformance.py) for local: the four verbs against
real squid processes, and the Checker rules against scripted squid binaries
and state directories in every state the suite asks for.

The local backend is two things, the state directory and the squid binary;
a state in which no target may read ready (unreachable, server error,
dropped, hang) breaks both: the state dir lies under a regular file, and
`squid -v` is missing, fails, is killed or hangs. A malformed answer (a
squid that prints no version) leaves the state dir healthy.
"""

from __future__ import annotations

import itertools

import pytest

from providers.base import CreateRequest
from providers.local.check import LOCAL_REASONS
from providers.local.config import LocalConfig
from providers.local.provider import LocalProvider
from tests.providers import conformance
from tests.providers.local.conftest import NAME, request

SCRIPTS = {
    conformance.HEALTHY: "echo 'Squid Cache: Version 5.7'; echo 'Service Name: squid'",
    conformance.MALFORMED: "echo '<html>not squid</html>'",
    conformance.SERVER_ERROR: "echo 'FATAL: squid is broken' >&2; exit 1",
    conformance.DROPPED: "kill -9 $$",
    conformance.HANGS: "exec sleep 60",
}


@pytest.mark.integration
class TestLocalProvider(conformance.ProviderConformance):
    provider_name = NAME
    malformed_ids = ("", "not-an-id", "local/", "local/a/b", "fake/proxy-x", "local/UPPER")

    @pytest.fixture
    def provider(self, make_provider, port_window):
        self.ports = itertools.count(port_window[0])
        return make_provider()

    def make_request(self, uid: str) -> CreateRequest:
        return request(next(self.ports), uid=uid, cloud_init="#cloud-config\n")


class TestLocalChecker(conformance.CheckerConformance):
    own_reasons = LOCAL_REASONS

    @pytest.fixture
    def make_checker(self, tmp_path, state_dir):
        made = itertools.count()

        def make(state: str) -> LocalProvider:
            n = next(made)
            good_dir = f"{state_dir}/state-{n}"  # under /tmp: squid's user can enter it
            blocker = tmp_path / f"blocker-{n}"
            blocker.write_text("a file where a directory should be\n")
            squid = tmp_path / f"squid-{n}"
            if state == conformance.UNREACHABLE:
                squid_path = str(tmp_path / "no-such-squid")
            else:
                squid.write_text("#!/bin/sh\n" + SCRIPTS[state] + "\n")
                squid.chmod(0o755)
                squid_path = str(squid)
            healthy_dir = state in (conformance.HEALTHY, conformance.MALFORMED)
            path = good_dir if healthy_dir else str(blocker / "state")
            return LocalProvider(NAME, LocalConfig(stateDir=path, squidPath=squid_path))

        return make


@pytest.mark.integration
class TestLocalProviderWithEgressRange(TestLocalProvider):
    """The same contract with each instance given its own outgoing address."""

    @pytest.fixture
    def provider(self, make_provider, port_window):
        self.ports = itertools.count(port_window[0])
        return make_provider(egressRange="127.0.1.0/24")
