"""The probe target and the readings of answers (pure): table tests."""

from __future__ import annotations

import pytest

from fleet.prober.target import (
    MAX_HEAD,
    Target,
    TargetError,
    content_length,
    dechunk,
    describe_status,
    egress_ip,
    is_chunked,
    parse_target,
    status_code,
)


@pytest.mark.parametrize(("text", "want"), [
    ("example.com:443", Target("example.com", 443)),
    ("10.0.0.1:8080", Target("10.0.0.1", 8080)),
    ("[2001:db8::1]:443", Target("2001:db8::1", 443)),
    ("http://ifconfig.example/ip", Target("ifconfig.example", 80, "/ip")),
    ("http://127.0.0.1:8000", Target("127.0.0.1", 8000, "/")),
    ("http://127.0.0.1:8000/a/b", Target("127.0.0.1", 8000, "/a/b")),
    (" example.com:80 ", Target("example.com", 80)),
])
def test_parse(text, want):
    assert parse_target(text) == want


@pytest.mark.parametrize("text", [
    "example.com", "example.com:0", "example.com:70000", ":443", "http://user:pw@h/", "http://h/?q=1",
    "https://h:443/", "exa mple.com:80", "http://h:99999/",
])
def test_parse_refuses(text):
    with pytest.raises(TargetError) as err:
        parse_target(text)
    assert "--probe-target" in str(err.value)
    assert ":pw@" not in str(err.value)  # credentials never quoted


def test_requests():
    t = Target("example.com", 443)
    assert t.connect_request() == b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: fleet-prober\r\n\r\n"
    assert str(t) == "example.com:443"
    v6 = Target("2001:db8::1", 443)
    assert v6.connect_request().startswith(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n")
    g = Target("echo.example", 80, "/ip")
    get = g.get_request()
    assert get.startswith(b"GET /ip HTTP/1.1\r\nHost: echo.example\r\n") and b"Connection: close\r\n" in get
    assert get.endswith(b"\r\n\r\n")
    assert Target("echo.example", 8080, "/").get_request().startswith(b"GET / HTTP/1.1\r\nHost: echo.example:8080\r\n")
    assert str(g) == "http://echo.example:80/ip"


@pytest.mark.parametrize(("line", "code"), [
    (b"HTTP/1.1 200 Connection established\r\n\r\n", 200),
    (b"HTTP/1.0 200 OK\r\n", 200),
    (b"HTTP/1.1 403 Forbidden\r\n", 403),
    (b"HTTP/1.1 200\r\n", 200),
    (b"HTTP/2 200\r\n", None),
    (b"SSH-2.0-OpenSSH\r\n", None),
    (b"HTTP/1.1 2000 x\r\n", None),
    (b"HTTP/1.1 abc x\r\n", None),
    (b"", None),
])
def test_status_code(line, code):
    assert status_code(line) == code


def test_describe_status_is_printable_and_bounded():
    assert describe_status(b"HTTP/1.1 403 Forbidden\r\n") == "HTTP/1.1 403 Forbidden"
    assert describe_status(b"\x1b[31m" + b"x" * 500) == "?[31m" + "x" * 75


@pytest.mark.parametrize(("headers", "length", "chunked"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", 12, False),
    (b"HTTP/1.1 200 OK\r\ncontent-length:  7 \r\n\r\n", 7, False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", None, False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999\r\n\r\n", None, False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", None, True),
])
def test_headers(headers, length, chunked):
    assert content_length(headers) == length
    assert is_chunked(headers) is chunked


def test_dechunk():
    assert dechunk(b"4\r\n1.2.\r\n3\r\n3.4\r\n0\r\n\r\n") == b"1.2.3.4"
    assert dechunk(b"zz\r\n") == b""
    assert dechunk(b"") == b""


@pytest.mark.parametrize(("body", "ip"), [
    (b"203.0.113.7", "203.0.113.7"),
    (b"203.0.113.7\n", "203.0.113.7"),
    (b"2001:db8::7\n", "2001:db8::7"),
    (b'{"ip": "198.51.100.2"}', "198.51.100.2"),
    (b'{"origin": "198.51.100.2, 10.0.0.1"}', "198.51.100.2"),
    (b'{"origin": "not an ip"}', None),
    (b'{"ip": 5}', None),
    (b"[1, 2]", None),
    (b"{not json", None),
    (b"<html>hello</html>", None),
    (b"", None),
    (b"\xff\xfe", None),
])
def test_egress_ip(body, ip):
    assert egress_ip(body) == ip


def test_limits():
    assert MAX_HEAD == 16 * 1024
