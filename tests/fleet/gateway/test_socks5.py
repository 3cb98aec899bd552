"""The SOCKS5 front-end's messages (`fleet.gateway.socks5`): each read from a real StreamReader fed the bytes (no
socket), as a table: what is accepted, what is refused with which reply, what ends short."""

from __future__ import annotations

import asyncio

import pytest

from fleet.gateway import socks5
from fleet.gateway.core import (
    Forbidden,
    NoProxy,
    Paced,
    TunnelLimit,
    UpstreamFailed,
    UpstreamTimeout,
)
from fleet.gateway.decide import Target


def _read(fn, data: bytes, *args):
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        got = await fn(reader, *args)
        return got, await reader.read()  # and what it left unread

    return asyncio.run(go())


PORT = b"\x01\xbb"  # 443

REQUESTS = [
    # (bytes, the target or the reply code of the refusal)
    (b"\x05\x01\x00\x03\x0bexample.com" + PORT, Target("example.com", 443, "")),
    (b"\x05\x01\x00\x03\x0bEXAMPLE.com" + PORT, Target("example.com", 443, "")),  # as the HTTP front-end: lower-cased
    (b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50", Target("127.0.0.1", 80, "")),
    (b"\x05\x01\x00\x04" + bytes(15) + b"\x01" + PORT, Target("::1", 443, "")),
    (b"\x05\x02\x00\x01\x7f\x00\x00\x01" + PORT, socks5.COMMAND_NOT_SUPPORTED),  # BIND
    (b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00", socks5.COMMAND_NOT_SUPPORTED),  # UDP ASSOCIATE
    (b"\x05\x09\x00\x03\x01a" + PORT, socks5.COMMAND_NOT_SUPPORTED),  # no such command
    (b"\x05\x01\x00\x05\x7f\x00\x00\x01" + PORT, socks5.ADDRESS_TYPE_NOT_SUPPORTED),
    (b"\x05\x01\x00\x00", socks5.ADDRESS_TYPE_NOT_SUPPORTED),
    (b"\x04\x01\x00\x01\x7f\x00\x00\x01" + PORT, socks5.GENERAL_FAILURE),  # a version 4 request after a v5 greeting
    (b"\x05\x01\x00\x03\x00" + PORT, socks5.HOST_UNREACHABLE),  # an empty name
    (b"\x05\x01\x00\x03\x05a b c" + PORT, socks5.HOST_UNREACHABLE),
    (b"\x05\x01\x00\x03\x06caf\xc3\xa9s" + PORT, socks5.HOST_UNREACHABLE),  # not ASCII (IDNA is the client's)
    (b"\x05\x01\x00\x03\x09[::1]:443" + PORT, socks5.HOST_UNREACHABLE),
    (b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x00", socks5.HOST_UNREACHABLE),  # port 0
]


@pytest.mark.parametrize(("data", "want"), REQUESTS)
def test_a_request_is_a_target_or_the_reply_that_refuses_it(data, want):
    if isinstance(want, Target):
        got, rest = _read(socks5.read_request, data + b"GET / HTTP/1.1\r\n")
        assert got == socks5.Request(socks5.CONNECT, want)
        assert rest == b"GET / HTTP/1.1\r\n"  # early tunnel bytes stay in the reader for the relay
    else:
        with pytest.raises(socks5.SocksError) as err:
            _read(socks5.read_request, data)
        assert err.value.reply == want


@pytest.mark.parametrize("data", [b"", b"\x05", b"\x05\x01\x00", b"\x05\x01\x00\x01\x7f\x00",
                                  b"\x05\x01\x00\x03\x0bexample", b"\x05\x01\x00\x03\x0bexample.com\x01"])
def test_a_request_that_ends_short_is_an_incomplete_read(data):
    with pytest.raises(asyncio.IncompleteReadError):
        _read(socks5.read_request, data)


GREETINGS = [
    # (bytes, (first byte already read), the methods offered or the refusal, the method chosen)
    (b"\x05\x01\x02", b"", b"\x02", socks5.USERNAME_PASSWORD),
    (b"\x01\x02", b"\x05", b"\x02", socks5.USERNAME_PASSWORD),
    (b"\x05\x03\x00\x01\x02", b"", b"\x00\x01\x02", socks5.USERNAME_PASSWORD),
    (b"\x05\x01\x00", b"", b"\x00", socks5.NO_ACCEPTABLE),  # no authentication only: an open proxy it is not
    (b"\x05\xff" + bytes(range(255)).replace(b"\x02", b"\x03"), b"", None, socks5.NO_ACCEPTABLE),
    (b"\x05\xff" + bytes(range(255)), b"", bytes(range(255)), socks5.USERNAME_PASSWORD),
]


@pytest.mark.parametrize(("data", "first", "offered", "chosen"), GREETINGS)
def test_a_greeting_offers_methods_and_only_username_password_is_chosen(data, first, offered, chosen):
    got, _ = _read(socks5.read_greeting, data, first)
    if offered is not None:
        assert got == offered
    assert socks5.method_of(got) == chosen


@pytest.mark.parametrize("data", [b"\x04\x01\x00\x00\x50", b"GET / HTTP/1.1\r\n", b"\x05\x00"])
def test_a_greeting_of_another_version_or_no_method_is_closed_without_a_reply(data):
    with pytest.raises(socks5.SocksError) as err:
        _read(socks5.read_greeting, data)
    assert err.value.reply is None


@pytest.mark.parametrize("data", [b"\x05", b"\x05\x03\x02", b"\x05\xff" + bytes(254)])
def test_a_truncated_greeting_is_an_incomplete_read(data):
    with pytest.raises(asyncio.IncompleteReadError):
        _read(socks5.read_greeting, data)


CREDENTIALS = [
    (b"\x01\x04acme\x05token", ("acme", "token")),
    (b"\x01\x0facme-session-s1\x00", ("acme-session-s1", "")),
    (b"\x01\x05jos\xc3\xa9\x02\xc3\xa9", ("josé", "é")),
    (b"\x02\x04acme\x05token", None),  # not RFC 1929's version
    (b"\x01\x04ac\xffe\x05token", None),  # not UTF-8
]


@pytest.mark.parametrize(("data", "want"), CREDENTIALS)
def test_credentials_are_utf8_username_and_password(data, want):
    if want is None:
        with pytest.raises(socks5.SocksError) as err:
            _read(socks5.read_credentials, data)
        assert err.value.label == "unauthorized"
    else:
        assert _read(socks5.read_credentials, data)[0] == want


@pytest.mark.parametrize(("outcome", "code"), [
    (Forbidden(25), socks5.NOT_ALLOWED),
    (UpstreamTimeout(3), socks5.TTL_EXPIRED),
    (UpstreamFailed(("refused", "connect_error")), socks5.HOST_UNREACHABLE),
    (NoProxy("none"), socks5.GENERAL_FAILURE),
    (NoProxy("busy", 3), socks5.GENERAL_FAILURE),
    (NoProxy("unavailable"), socks5.GENERAL_FAILURE),
    (TunnelLimit(True, 10), socks5.GENERAL_FAILURE),
    (Paced(2), socks5.GENERAL_FAILURE),
])
def test_the_cores_refusals_map_to_replies(outcome, code):
    assert socks5.reply_of(outcome) == code


def test_a_reply_names_no_bound_address():
    assert socks5.reply(socks5.SUCCEEDED) == b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    assert socks5.reply(socks5.COMMAND_NOT_SUPPORTED)[1] == 0x07
