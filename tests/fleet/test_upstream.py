"""fleet.upstream's pure parts: the SOCKS5 messages (RFC 1928, RFC 1929) and the CONNECT answer, as tables."""

from __future__ import annotations

import pytest

from fleet import upstream
from fleet.upstream import AUTH, CONNECT_ERROR, Auth, UpstreamError

CREDS = Auth("user", "secret-pw")
LONG = ".".join(["a" * 63] * 4)  # 255 bytes: the longest name


@pytest.mark.parametrize(("auth", "want"), [(False, b"\x05\x01\x00"), (True, b"\x05\x02\x00\x02")])
def test_the_greeting_offers_user_pass_only_with_credentials(auth, want):
    assert upstream.socks5_greeting(auth) == want


@pytest.mark.parametrize(("reply", "auth", "want"), [
    (b"\x05\x00", False, 0),
    (b"\x05\x00", True, 0),  # the proxy may waive the credentials offered
    (b"\x05\x02", True, 2),
    (b"\x05\x02", False, (CONNECT_ERROR, "chose method 2, which was not offered")),
    (b"\x05\xff", True, (AUTH, "none of the offered methods")),
    (b"\x05\xff", False, (AUTH, "(it wants credentials)")),
    (b"\x04\x00", False, (CONNECT_ERROR, "not a SOCKS5 proxy")),
    (b"HT", False, (CONNECT_ERROR, "not a SOCKS5 proxy")),
    (b"\x05", False, (CONNECT_ERROR, "not a SOCKS5 proxy")),
])
def test_the_method_choice(reply, auth, want):
    if isinstance(want, int):
        assert upstream.socks5_method(reply, auth) == want
    else:
        with pytest.raises(UpstreamError) as got:
            upstream.socks5_method(reply, auth)
        assert got.value.why == want[0] and want[1] in got.value.detail


@pytest.mark.parametrize(("auth", "want"), [
    (Auth("u", "p"), b"\x01\x01u\x01p"),
    (Auth("user", "secret-pw"), b"\x01\x04user\x09secret-pw"),
    (Auth("\u00fc", "p"), b"\x01\x02\xc3\xbc\x01p"),  # UTF-8 bytes, counted as bytes
    (Auth("", "p"), None),
    (Auth("u", ""), None),
    (Auth("u" * 256, "p"), None),
    (Auth("u", "p" * 256), None),
])
def test_the_username_password_request(auth, want):
    if want is None:
        with pytest.raises(UpstreamError) as got:
            upstream.socks5_userpass(auth)
        assert got.value.why == AUTH and (not auth.password or auth.password not in str(got.value))
    else:
        assert upstream.socks5_userpass(auth) == want
    assert upstream.socks5_userpass(Auth("u" * 255, "p" * 255))[:2] == b"\x01\xff"


@pytest.mark.parametrize(("reply", "want"), [
    (b"\x01\x00", None), (b"\x05\x00", CONNECT_ERROR), (b"\x01\x01", AUTH), (b"\x01\xff", AUTH), (b"\x01", CONNECT_ERROR),
])
def test_the_username_password_answer(reply, want):
    if want is None:
        upstream.socks5_auth_ok(reply)
    else:
        with pytest.raises(UpstreamError) as got:
            upstream.socks5_auth_ok(reply)
        assert got.value.why == want


@pytest.mark.parametrize(("host", "port", "want"), [
    ("127.0.0.1", 80, b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50"),
    ("::1", 443, b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x01\xbb"),
    ("[::1]", 443, b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x01\xbb"),
    ("example.test", 8080, b"\x05\x01\x00\x03\x0cexample.test\x1f\x90"),  # a name: the proxy resolves it
    (LONG, 1, b"\x05\x01\x00\x03\xff" + LONG.encode() + b"\x00\x01"),
    (LONG + "a", 1, None),
    ("b\u00fccher.example", 1, None),  # the gateway's targets are ASCII names (RFC 1123) or addresses
    ("example.test", 0, None),
    ("example.test", 65536, None),
])
def test_the_connect_request(host, port, want):
    if want is None:
        with pytest.raises(UpstreamError):
            upstream.socks5_connect(host, port)
    else:
        assert upstream.socks5_connect(host, port) == want


@pytest.mark.parametrize(("head", "want"), [
    (b"\x05\x00\x00\x01\x7f", 5),  # IPv4: 3 more address bytes, 2 of port
    (b"\x05\x00\x00\x04\x00", 17),
    (b"\x05\x00\x00\x03\x07", 9),  # a name of 7 bytes
    (b"\x05\x01\x00\x01\x00", "general SOCKS server failure (1)"),
    (b"\x05\x02\x00\x01\x00", "connection not allowed by ruleset (2)"),
    (b"\x05\x04\x00\x01\x00", "host unreachable (4)"),
    (b"\x05\x05\x00\x01\x00", "connection refused (5)"),
    (b"\x05\x09\x00\x01\x00", "an unknown reply code (9)"),
    (b"\x05\x00\x00\x02\x00", "address type 2"),
    (b"\x05\x00\x01\x01\x00", "malformed"),  # RSV must be 0
    (b"\x04\x5a\x00\x00\x00", "malformed"),  # a SOCKS4 answer
    (b"\x05\x00\x00\x01", "malformed"),
])
def test_the_connect_reply(head, want):
    if isinstance(want, int):
        assert upstream.socks5_reply(head) == want
    else:
        with pytest.raises(UpstreamError) as got:
            upstream.socks5_reply(head)
        assert got.value.why == CONNECT_ERROR and want in got.value.detail


@pytest.mark.parametrize(("head", "want"), [
    (b"HTTP/1.1 200 Connection established\r\n\r\n", None),
    (b"HTTP/1.0 200 OK\r\n\r\n", None),
    (b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n", AUTH),
    (b"HTTP/1.1 403 Forbidden\r\n\r\n", CONNECT_ERROR),
    (b"HTTP/1.1 503 Service Unavailable\r\n\r\n", CONNECT_ERROR),
    (b"SSH-2.0-OpenSSH\r\n\r\n", CONNECT_ERROR),
    (b"HTTP/1.1 2000 OK\r\n\r\n", CONNECT_ERROR),
])
def test_the_connect_answer(head, want):
    if want is None:
        assert upstream.connect_status(head) == 200
    else:
        with pytest.raises(UpstreamError) as got:
            upstream.connect_status(head)
        assert got.value.why == want


def test_a_connect_request_carries_basic_credentials_only_when_there_are_some():
    assert upstream.connect_request("h:443", None) == b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"
    assert upstream.connect_request("h:443", Auth("Aladdin", "open sesame")) == (
        b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\nProxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n")


def test_the_reasons_are_the_gateways():
    from fleet.gateway import decide, metrics

    assert {upstream.REFUSED, upstream.TIMEOUT, upstream.CONNECT_ERROR, upstream.AUTH} <= set(metrics.RETRY_REASONS)
    assert decide.UPSTREAM_AUTH == AUTH and decide.REPORT_OF[AUTH] == "error"
    assert decide.retry(AUTH, 1, 3, resendable=False) and not decide.retry(AUTH, 3, 3, resendable=True)


def test_auth_shows_no_password():
    assert "secret-pw" not in repr(CREDS) and "secret-pw" not in str(CREDS) and "user" in repr(CREDS)
