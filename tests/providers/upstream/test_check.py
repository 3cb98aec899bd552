"""The upstream check against real upstreams on loopback: a Squid asking
Basic auth (basic_ncsa_auth) as an HTTP vendor, microsocks with a username
and password as a SOCKS5 list entry; wrong password → Unauthorized, nothing
listening → Unreachable, a stalled server → Timeout. And the reason table."""

from __future__ import annotations

import socket
import time

import pytest

from fleet.testing.procs import free_port
from providers import base
from providers.base import Deadline
from providers.upstream import check, dialing
from providers.upstream.config import UpstreamConfig
from providers.upstream.provider import UpstreamProvider
from tests.providers.upstream.conftest import PASSWORD, USER, socks_stall, stall

pytestmark = pytest.mark.integration

TEMPLATE = "{user}-session-{session}-country-{country}"


def vendor(secrets_dir, port: int, origin: int, **kw) -> UpstreamProvider:
    cfg = UpstreamConfig.model_validate({
        "mode": "vendor", "endpoint": f"http://127.0.0.1:{port}", "usernameTemplate": TEMPLATE,
        "usernameFile": str(secrets_dir / "username"), "passwordFile": str(secrets_dir / "password"),
        "checkPlacement": {"country": "us"}, "checkURL": f"127.0.0.1:{origin}", "stateDir": str(secrets_dir / "state"), **kw})
    return UpstreamProvider("up-test", cfg)


def socks_list(tmp_path, line: str, origin: int) -> UpstreamProvider:
    (tmp_path / "list").write_text(f"# bought\n{line}\n")
    cfg = UpstreamConfig.model_validate({"mode": "list", "listFile": str(tmp_path / "list"), "checkURL": f"127.0.0.1:{origin}",
                                         "stateDir": str(tmp_path / "state")})
    return UpstreamProvider("up-test", cfg)


def one(provider, seconds: float = 5.0):
    [t] = provider.check(Deadline.after(seconds))
    return t


def test_http_vendor_with_the_right_password_is_reachable(squid_vendor, origin, secrets_dir):
    t = one(vendor(secrets_dir, squid_vendor, origin))
    assert (t.ready, t.reason, t.name) == (True, base.REASON_REACHABLE, "upstream"), t.message
    assert t.details["mode"] == "vendor" and t.details["scheme"] == "http"
    assert PASSWORD not in repr(t.to_dict()) and USER + "-session" not in repr(t.to_dict())


def test_http_vendor_with_a_wrong_password_is_unauthorized(squid_vendor, origin, secrets_dir):
    (secrets_dir / "password").write_text("wrong\n")
    t = one(vendor(secrets_dir, squid_vendor, origin))
    assert (t.ready, t.reason) == (False, base.REASON_UNAUTHORIZED), t.message
    assert "407" in t.message


def test_http_vendor_placement_the_account_lacks_is_unauthorized(squid_vendor, origin, secrets_dir):
    """The vendor's account is for country us: another country's username is refused."""
    t = one(vendor(secrets_dir, squid_vendor, origin, checkPlacement={"country": "de"}))
    assert t.reason == base.REASON_UNAUTHORIZED


def test_socks5_list_entry_with_its_own_credentials_is_reachable(microsocks, origin, tmp_path):
    t = one(socks_list(tmp_path, f"socks5://{USER}:{PASSWORD}@127.0.0.1:{microsocks}", origin))
    assert (t.ready, t.reason) == (True, base.REASON_REACHABLE), t.message
    assert t.address == f"socks5://127.0.0.1:{microsocks}"  # never the credentials
    assert t.details == {"mode": "list", "entries": "1", "scheme": "socks5"}


def test_socks5_wrong_password_and_no_credentials_are_unauthorized(microsocks, origin, tmp_path):
    t = one(socks_list(tmp_path, f"socks5://{USER}:nope@127.0.0.1:{microsocks}", origin))
    assert (t.ready, t.reason) == (False, base.REASON_UNAUTHORIZED), t.message
    t = one(socks_list(tmp_path, f"socks5://127.0.0.1:{microsocks}", origin))
    assert (t.ready, t.reason) == (False, base.REASON_UNAUTHORIZED), t.message


def test_socks5_target_refused_is_an_api_error(microsocks, tmp_path):
    t = one(socks_list(tmp_path, f"socks5://{USER}:{PASSWORD}@127.0.0.1:{microsocks}", free_port()))
    assert (t.ready, t.reason) == (False, base.REASON_API_ERROR), t.message


@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_nothing_listening_is_unreachable(tmp_path, origin, scheme):
    t = one(socks_list(tmp_path, f"{scheme}://127.0.0.1:{free_port()}", origin))
    assert (t.ready, t.reason) == (False, base.REASON_UNREACHABLE)


@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_a_stalled_server_is_a_timeout_at_the_deadline(tmp_path, origin, scripted, scheme):
    """HTTP: it drips a byte every 0.3 s; SOCKS5: half an answer: the deadline bounds the whole check, not each read."""
    server = scripted(stall if scheme == "http" else socks_stall)
    start = time.monotonic()
    t = one(socks_list(tmp_path, f"{scheme}://127.0.0.1:{server.port}", origin), 1.0)
    assert time.monotonic() - start < 2.0
    assert (t.ready, t.reason) == (False, base.REASON_TIMEOUT), t.message


def test_unreadable_credentials_are_their_own_reason(tmp_path, origin):
    cfg = UpstreamConfig.model_validate({"mode": "list", "listFile": str(tmp_path / "missing"), "checkURL": f"127.0.0.1:{origin}"})
    t = one(UpstreamProvider("up-test", cfg))
    assert (t.ready, t.reason) == (False, check.REASON_CREDENTIALS_UNREADABLE)
    assert str(tmp_path / "missing") in t.message


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (dialing.AuthFailed("407"), base.REASON_UNAUTHORIZED),
        (dialing.Refused("403", 403), base.REASON_FORBIDDEN),
        (dialing.Refused("502", 502), base.REASON_API_ERROR),
        (dialing.Refused("socks", 5), base.REASON_API_ERROR),
        (dialing.ProtocolError("garbage"), base.REASON_API_ERROR),
        (TimeoutError(), base.REASON_TIMEOUT),
        (TimeoutError(), base.REASON_TIMEOUT),
        (ConnectionRefusedError(111, "refused"), base.REASON_UNREACHABLE),
        (ConnectionResetError(104, "reset"), base.REASON_UNREACHABLE),
        (socket.gaierror(-2, "Name or service not known"), base.REASON_UNREACHABLE),
        (RuntimeError("?"), base.REASON_API_ERROR),
    ],
)
def test_reason_table(exc, want):
    assert check.reason(exc) == want
