"""The gateway's pure decisions (fleet.gateway.decide) and the clients file's parse, as tables."""

from __future__ import annotations

import base64
import gzip
import logging
import zlib

import pytest

from fleet.gateway import core, decide, http1
from fleet.gateway.clients import ClientsError, ClientsFile, parse_clients
from fleet.gateway.decide import Options, Refused


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(("username", "want"), [
    ("acme", Options("acme")),
    ("acme-session-s1", Options("acme", session="s1")),
    ("acme-session-1b4e28ba-2fa1-11d2", Options("acme", session="1b4e28ba-2fa1-11d2")),
    ("acme-session-s1-pool-crawl-eu", Options("acme", session="s1", pool="crawl-eu")),
    ("acme-pool-crawl", Options("acme", pool="crawl")),
    ("acme-provider-hetzner-region-fsn1", Options("acme", provider="hetzner", region="fsn1")),
    ("acme-region-us-east-1-zone-us-east-1a", Options("acme", region="us-east-1", zone="us-east-1a")),
    ("a.b_c-zone-z", Options("a.b_c", zone="z")),
    # a later keyword ends a value only when a value follows it: a session id may end in "-zone"
    ("acme-session-a-zone", Options("acme", session="a-zone")),
    # an earlier keyword inside a later value is just text
    ("acme-region-session-x", Options("acme", region="session-x")),
    ("acme-session-a-session-b", Options("acme", session="a-session-b")),
    ("acme-zone-z-region-r", Options("acme", zone="z-region-r")),  # out of order: all of it is the zone
])
def test_usernames_have_one_reading(username, want):
    assert decide.parse_username(username) == want


@pytest.mark.parametrize(("username", "why"), [
    ("", "client name"),
    ("-session-x", "client name"),
    ("a" * 65, "client name"),
    ("acme-", "unknown option"),
    ("acme-session", "bad session"),
    ("acme-session-", "bad session"),
    ("acme-colour-red", "unknown option"),
    ("acme-pool-Crawl", "bad pool"),
    ("acme-session-" + "x" * 65, "bad session"),
    ("acme-session-a b", "bad session"),
])
def test_bad_usernames_say_why(username, why):
    with pytest.raises(ValueError, match=why):
        decide.parse_username(username)


def _basic(text: str) -> bytes:
    return b"Basic " + base64.b64encode(text.encode())


@pytest.mark.parametrize(("header", "want"), [
    (_basic("acme:tok:en"), ("acme", "tok:en")),
    (_basic("acme-session-1:t"), ("acme-session-1", "t")),
    (b"basic " + base64.b64encode(b"a:b"), ("a", "b")),
    (b"Bearer abc", ValueError),
    (b"Basic", ValueError),
    (b"Basic !!!", ValueError),
    (_basic("no-colon"), ValueError),
    (b"Basic " + base64.b64encode(b"\xff:x"), ValueError),
])
def test_basic_credentials(header, want):
    if want is ValueError:
        with pytest.raises(ValueError):
            decide.parse_basic(header)
    else:
        assert decide.parse_basic(header) == want


@pytest.mark.parametrize(("raw", "want"), [
    (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", ("CONNECT", "example.com:443", 1)),
    (b"GET http://a/ HTTP/1.0\r\n\r\n", ("GET", "http://a/", 0)),
    (b"GET / HTTP/2\r\n\r\n", 400),
    (b"GET  / HTTP/1.1\r\n\r\n", 400),
    (b"G@T / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
    (b"\r\n\r\n", 400),
])
def test_request_heads(raw, want):
    if isinstance(want, int):
        with pytest.raises(Refused) as err:
            decide.parse_head(raw)
        assert err.value.status == want
    else:
        head = decide.parse_head(raw)
        assert (head.method, head.target, len(head.headers)) == want


@pytest.mark.parametrize(("method", "target", "want"), [
    ("CONNECT", "Example.COM:443", ("example.com", 443, "")),
    ("CONNECT", "127.0.0.1:8080", ("127.0.0.1", 8080, "")),
    ("CONNECT", "example.com", "bad-target"),
    ("CONNECT", "example.com:0", "bad-target"),
    ("CONNECT", "example.com:99999", "bad-target"),
    ("CONNECT", "[::1]:443", ("::1", 443, "")),
    ("CONNECT", "[2001:DB8:0:0::1]:8443", ("2001:db8::1", 8443, "")),  # compressed, lower case
    ("CONNECT", "[::ffff:127.0.0.1]:443", ("::ffff:7f00:1", 443, "")),
    ("CONNECT", "[::1]", "bad-target"),  # no port
    ("CONNECT", "::1:443", "bad-target"),  # unbracketed: which colon?
    ("CONNECT", "[::1]443", "bad-target"),
    ("CONNECT", "[::1]:", "bad-target"),
    ("CONNECT", "[fe80::1%eth0]:443", "bad-target"),  # no zone ids
    ("CONNECT", "[fe80::1%25eth0]:443", "bad-target"),
    ("CONNECT", "[127.0.0.1]:443", "bad-target"),
    ("CONNECT", "[example.com]:443", "bad-target"),
    ("CONNECT", "[]:443", "bad-target"),
    ("CONNECT", "[::1:443", "bad-target"),
    ("CONNECT", "[:::1]:443", "bad-target"),
    ("CONNECT", "[::1]:443:1", "bad-target"),
    ("CONNECT", "[::1]:\u0661\u0662", "bad-target"),  # Arabic-Indic digits are not a port
    ("GET", "http://[::1]:8080/a", ("::1", 8080, "/a")),
    ("GET", "http://[::1]/a", ("::1", 80, "/a")),
    ("GET", "http://[::1]?q", ("::1", 80, "/?q")),
    ("GET", "http://::1/a", "bad-target"),
    ("CONNECT", "exa_mple.com:443", "bad-target"),
    ("GET", "http://example.com/a?b=c", ("example.com", 80, "/a?b=c")),
    ("GET", "http://example.com:8080", ("example.com", 8080, "/")),
    ("GET", "http://example.com?q", ("example.com", 80, "/?q")),
    ("GET", "HTTP://example.com/", ("example.com", 80, "/")),
    ("GET", "http://user:pw@example.com/", "bad-target"),
    ("GET", "https://example.com/", "bad-target"),
    ("GET", "/index.html", "not-a-proxy-request"),
])
def test_targets(method, target, want):
    head = decide.Head(method, target, "HTTP/1.1")
    if isinstance(want, str):
        with pytest.raises(Refused) as err:
            decide.target_of(head)
        assert err.value.reason == want
    else:
        t = decide.target_of(head)
        assert (t.host, t.port, t.path) == want


BANS = frozenset(decide.DEFAULT_BAN_STATUSES)


@pytest.mark.parametrize(("status", "want"), [(403, True), (429, True), (503, True), (200, False), (404, False),
                                              (500, False), (502, False)])
def test_ban_signature(status, want):
    assert decide.is_ban(status, BANS) is want


@pytest.mark.parametrize(("status", "pattern", "body", "encoding", "want"), [
    (200, "", b"captcha", "", False),  # no pattern: status codes only
    (429, "", b"", "", True),
    (200, r"(?i)captcha", b"<title>CAPTCHA</title>", "", True),  # any status
    (404, r"(?i)captcha", b"please solve the captcha", "", True),
    (200, r"access denied", b"welcome", "", False),
    (429, r"never", b"welcome", "", True),  # a ban status needs no pattern
    (200, r"captcha", gzip.compress(b"a captcha page"), "gzip", True),  # decoded before the search
    (200, r"captcha", zlib.compress(b"a captcha page"), "deflate", True),
    (200, r"captcha", _raw_deflate(b"a captcha page"), "deflate", True),  # raw deflate (no zlib header)
    (200, r"captcha", gzip.compress(b"a captcha page"), "", False),  # compressed, undeclared: not decoded
    (200, r"captcha", b"a captcha page", "br", False),  # a coding the gateway does not decode: no pattern ban
    (200, r"captcha", b"not gzip at all captcha", "gzip", False),  # undecodable: no pattern ban
    (200, r"captcha", b"x" * decide.BAN_WINDOW + b"captcha", "", False),  # past the window
    (200, r"captcha", gzip.compress(b"x" * (decide.BAN_WINDOW + 10) + b"captcha"), "gzip", False),  # a bomb stops at the window
    (200, r"caf\u00e9", "un café".encode(), "", True),  # UTF-8 text
    (200, r"x", b"\xff\xfe x", "", True),  # bad UTF-8 replaced, not an error
])
def test_ban_pattern(status, pattern, body, encoding, want):
    compiled = decide.compile_ban_pattern(pattern)
    window = decide.ban_window(body, encoding)
    assert decide.is_ban(status, BANS, compiled, window) is want


def test_a_decompressed_window_is_bounded_whatever_the_ratio():
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))  # 50 MiB of zeros in ~50 KiB
    assert len(decide.ban_window(bomb, "gzip")) == decide.BAN_WINDOW


@pytest.mark.parametrize(("text", "why"), [
    ("(unclosed", "not a regular expression"),
    ("a" * 1001, "over 1000 characters"),
    ("x*", "matches an empty body"),
    ("|captcha", "matches an empty body"),
])
def test_bad_ban_patterns_say_why(text, why):
    with pytest.raises(ValueError, match=why):
        decide.compile_ban_pattern(text)


@pytest.mark.parametrize(("headers", "want"), [
    ((), ("none", 0)),
    ((("Content-Length", "12"),), ("length", 12)),
    ((("Content-Length", "0"),), ("length", 0)),
    ((("Content-Length", "5"), ("Content-Length", "5")), ("length", 5)),  # the same value twice: one
    ((("Transfer-Encoding", "chunked"),), ("chunked", 0)),
    ((("Transfer-Encoding", "Chunked"),), ("chunked", 0)),
    ((("Content-Length", "5"), ("Content-Length", "6")), 400),
    ((("Content-Length", "-1"),), 400),
    ((("Content-Length", "1e3"),), 400),
    ((("Content-Length", "\u0661"),), 400),
    ((("Content-Length", "1" * 19),), 400),
    ((("Content-Length", "1025"),), 413),  # over max_body
    ((("Transfer-Encoding", "chunked"), ("Content-Length", "5")), 400),  # smuggling
    ((("Transfer-Encoding", "gzip"),), 400),  # chunked must be last
    ((("Transfer-Encoding", "chunked, gzip"),), 400),
    ((("Transfer-Encoding", "gzip, chunked"),), 501),
    ((("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")), 501),
    ((("Transfer-Encoding", ""),), 400),
])
def test_request_body_framing(headers, want):
    head = decide.Head("POST", "http://example.com/", "HTTP/1.1", headers)
    if isinstance(want, int):
        with pytest.raises(Refused) as err:
            decide.request_framing(head, 1024)
        assert err.value.status == want
    else:
        got = decide.request_framing(head, 1024)
        assert (got.kind, got.length) == want


@pytest.mark.parametrize(("line", "want"), [
    (b"0\r\n", 0),
    (b"1a\r\n", 26),
    (b"FF;name=value\r\n", 255),
    (b"10 \r\n", 16),
    (b"\r\n", None),
    (b"-1\r\n", None),
    (b"0x10\r\n", None),
    (b"g\r\n", None),
    (b"1" * 16 + b"\r\n", None),  # over 15 hex digits
    (b"10", None),  # no CRLF
    (b"10\n", None),
])
def test_chunk_sizes(line, want):
    if want is None:
        with pytest.raises(ValueError):
            decide.chunk_size(line)
    else:
        assert decide.chunk_size(line) == want


@pytest.mark.parametrize(("failure", "attempt", "most", "resendable", "want"), [
    (decide.REFUSED, 1, 3, False, True),  # nothing left: a POST too
    (decide.TIMEOUT, 2, 3, False, True),
    (decide.CONNECT_ERROR, 1, 3, True, True),
    (decide.REFUSED, 3, 3, True, False),  # the bound
    (decide.BANNED, 1, 3, True, True),
    (decide.BANNED, 1, 3, False, False),  # a POST that was sent: never twice
    (decide.BROKEN, 1, 3, False, False),
    (decide.BROKEN, 1, 3, True, True),
    (decide.BANNED, 1, 1, True, False),
])
def test_retry_choice(failure, attempt, most, resendable, want):
    assert decide.retry(failure, attempt, most, resendable) is want


@pytest.mark.parametrize(("method", "kept", "want"), [("GET", True, True), ("HEAD", True, True), ("PUT", True, True),
                                                      ("POST", True, False), ("PATCH", True, False),
                                                      ("GET", False, False)])
def test_resend(method, kept, want):
    assert decide.may_resend(method, kept) is want


@pytest.mark.parametrize(("failures", "lease", "want"), [
    ([decide.TIMEOUT, decide.TIMEOUT], "none", (504, "upstream-timeout")),
    ([decide.TIMEOUT, decide.REFUSED], "", (502, "upstream-failed")),
    ([decide.CONNECT_ERROR], "busy", (502, "upstream-failed")),
    ([], "busy", (503, "proxies-busy")),
    ([], "none", (503, "no-proxy")),
    ([], "grace", (503, "recovering")),
    ([], "unavailable", (503, "store-unavailable")),
])
def test_what_the_crawler_sees_when_nothing_worked(failures, lease, want):
    refused = http1.refusal(core.gave_up(failures, lease, retry_after=7))
    assert (refused.status, refused.reason) == want
    assert refused.retry_after == (7 if want[1] == "proxies-busy" else None)


@pytest.mark.parametrize(("method", "status", "headers", "want"), [
    ("GET", 200, [("Content-Length", "5")], ("length", 5)),
    ("HEAD", 200, [("Content-Length", "5")], ("none", 0)),
    ("GET", 204, [], ("none", 0)),
    ("GET", 304, [("Content-Length", "5")], ("none", 0)),
    ("GET", 200, [("Transfer-Encoding", "chunked"), ("Content-Length", "5")], ("chunked", 0)),
    ("GET", 200, [("Transfer-Encoding", "gzip")], ("close", 0)),
    ("GET", 200, [], ("close", 0)),
    ("GET", 200, [("Content-Length", "5"), ("Content-Length", "6")], ("close", 0)),
    ("GET", 200, [("Content-Length", "-1")], ("close", 0)),
])
def test_response_framing(method, status, headers, want):
    f = decide.response_framing(method, status, headers)
    assert (f.kind, f.length) == want


def test_the_upstream_request_drops_hop_by_hop_headers_and_credentials():
    head = decide.parse_head(b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
                             b"Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 5\r\nAccept: */*\r\n\r\n")
    out = decide.upstream_head(head, decide.target_of(head))
    assert out == (b"GET http://a.example:80/x HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    # on a channel that reaches the origin itself (a tunnel, not an HTTP proxy): origin-form, the same headers
    out = decide.upstream_head(head, decide.target_of(head), absolute=False)
    assert out == (b"GET /x HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n")


@pytest.mark.parametrize(("sent", "want"), [
    (decide.Framing("length", 7), b"Content-Length: 7\r\n"),  # a chunked body kept: sent with its length
    (decide.Framing("chunked"), b"Transfer-Encoding: chunked\r\n"),  # a long one: chunked on
    (decide.Framing("none"), b""),
])
def test_the_upstream_request_carries_the_bodys_framing_as_sent(sent, want):
    head = decide.parse_head(b"POST http://[::1]:8080/x HTTP/1.1\r\nHost: [::1]:8080\r\nTransfer-Encoding: chunked\r\n"
                             b"Content-Length: 99\r\n\r\n")
    out = decide.upstream_head(head, decide.target_of(head), sent)
    assert out == (b"POST http://[::1]:8080/x HTTP/1.1\r\nHost: [::1]:8080\r\n" + want + b"Connection: close\r\n\r\n")


def _head(version: str, *headers: str) -> decide.Head:
    return decide.parse_head(f"POST http://a.example/ {version}\r\n{''.join(h + chr(13) + chr(10) for h in headers)}"
                             f"\r\n".encode())


@pytest.mark.parametrize(("version", "headers", "body", "want"), [
    ("HTTP/1.1", ("Expect: 100-continue",), decide.Framing("length", 5), True),
    ("HTTP/1.1", ("Expect: 100-Continue",), decide.Framing("chunked"), True),  # case-insensitive
    ("HTTP/1.1", ("Expect: 100-continue",), decide.Framing("length", 0), False),  # no body to wait for
    ("HTTP/1.1", ("Expect: 100-continue",), decide.Framing("none"), False),
    ("HTTP/1.0", ("Expect: 100-continue",), decide.Framing("length", 5), False),  # ignored (RFC 9110 10.1.1)
    ("HTTP/1.1", (), decide.Framing("length", 5), False),
    ("HTTP/1.1", ("Expect: 200-ok",), decide.Framing("length", 5), 417),
    ("HTTP/1.1", ("Expect: 100-continue, x",), decide.Framing("length", 5), 417),
    ("HTTP/1.0", ("Expect: 200-ok",), decide.Framing("none"), 417),
])
def test_the_gateway_meets_an_expect_itself(version, headers, body, want):
    head = _head(version, *headers)
    if want == 417:
        with pytest.raises(Refused) as exc:
            decide.expects_continue(head, body)
        assert (exc.value.status, exc.value.reason) == (417, "expectation-failed")
    else:
        assert decide.expects_continue(head, body) is want


@pytest.mark.parametrize(("headers", "want"), [((), False), (("Content-Length: 0",), False),
                                               (("Content-Length: 3",), True), (("Transfer-Encoding: chunked",), True)])
def test_a_declared_body(headers, want):
    assert decide.declares_body(_head("HTTP/1.1", *headers)) is want


@pytest.mark.parametrize(("status", "want"), [(100, True), (102, True), (103, True), (199, True), (200, False),
                                              (204, False), (404, False), (101, ValueError)])
def test_interim_responses_are_read_past(status, want):
    if want is ValueError:
        with pytest.raises(ValueError, match="101"):
            decide.interim(status)
    else:
        assert decide.interim(status) is want


def test_the_upstream_request_drops_expect():
    head = _head("HTTP/1.1", "Host: a.example", "Expect: 100-continue", "Content-Length: 5")
    out = decide.upstream_head(head, decide.target_of(head), decide.Framing("length", 5))
    assert b"expect" not in out.lower() and b"Content-Length: 5\r\n" in out


def test_the_relayed_response_head_says_our_connection_and_the_proxy():
    raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\nX-Fleet-Proxy: forged\r\nContent-Length: 2\r\n\r\n"
    assert decide.client_head(raw, True, "crawl/a") == (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Fleet-Proxy: crawl/a\r\n"
                                                        b"Connection: keep-alive\r\n\r\n")


@pytest.mark.parametrize(("text", "want"), [("403,429,503", {403, 429, 503}), ("", set()), (" 429 , ", {429}),
                                            ("99", ValueError), ("600", ValueError), ("4xx", ValueError)])
def test_ban_statuses_setting(text, want):
    if want is ValueError:
        with pytest.raises(ValueError):
            decide.parse_statuses(text)
    else:
        assert decide.parse_statuses(text) == want


def test_keep_alive():
    assert decide.Head("GET", "/", "HTTP/1.1").keep_alive()
    assert not decide.Head("GET", "/", "HTTP/1.1", (("Connection", "close"),)).keep_alive()
    assert not decide.Head("GET", "/", "HTTP/1.0").keep_alive()
    assert decide.Head("GET", "/", "HTTP/1.0", (("Proxy-Connection", "Keep-Alive"),)).keep_alive()


TOK = "t" * 16


@pytest.mark.parametrize(("doc", "problem"), [
    (f"clients: {{acme: {{token: {TOK}}}}}", None),
    (f"clients: {{acme: {{token: {TOK}, namespaces: [crawl], ports: '*', maxTunnels: 5}}}}", None),
    ("[]", "one key"),
    (f"clients: {{acme: {{token: {TOK}}}}}\nextra: 1", "one key"),
    (f"clients: {{a-b: {{token: {TOK}}}}}", "no '-'"),
    ("clients: {acme: {token: short}}", "at least 16"),
    (f"clients: {{acme: {{token: {TOK}, colour: red}}}}", "unknown field"),
    (f"clients: {{acme: {{token: {TOK}, namespaces: [Bad]}}}}", "namespaces must be a list"),
    (f"clients: {{acme: {{token: {TOK}, namespaces: crawl}}}}", "namespaces must be a list"),
    (f"clients: {{acme: {{token: {TOK}, pools: [crawl]}}}}", "pools is now namespaces"),  # the old name, said so
    (f"clients: {{acme: {{token: {TOK}, ports: [0]}}}}", "ports"),
    (f"clients: {{acme: {{token: {TOK}, ports: [true]}}}}", "ports"),
    (f"clients: {{acme: {{token: {TOK}, maxTunnels: -1}}}}", "maxTunnels"),
    ("clients: {acme: ", "not valid YAML"),
    # the one hostile-YAML reader's rules (fleet.untrusted) hold here too
    (f"clients: {{acme: {{token: {TOK}}}, acme: {{token: {TOK}}}}}", "duplicate key 'acme'"),
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: &d [*c, *c]\ne: &e [*d, *d]\nf: &f [*e, *e]\ng: &g [*f, *f]\n"
     "h: &h [*g, *g]\ni: &i [*h, *h]\nj: &j [*i, *i]\nk: &k [*j, *j]\nl: &l [*k, *k]\nm: &m [*l, *l]\nn: &n [*m, *m]\n"
     "o: &o [*n, *n]\np: &p [*o, *o]\nq: [*p, *p]", "more than"),
    (b"\xff\xfec\x00l\x00", "UTF-16"),
])
def test_clients_file(doc, problem):
    if problem is None:
        assert set(parse_clients(doc)) == {"acme"}
    else:
        with pytest.raises(ClientsError, match=problem):
            parse_clients(doc)


def test_the_clients_file_is_re_read_and_a_broken_version_keeps_the_last_good(tmp_path):
    now = [0.0]
    path = tmp_path / "clients.yaml"
    path.write_text(f"clients: {{acme: {{token: {TOK}}}}}")
    f = ClientsFile(str(path), clock=lambda: now[0])
    assert f.check("acme", TOK) is not None and f.check("acme", TOK + "x") is None and f.check("bob", TOK) is None
    assert TOK not in repr(f.clients["acme"])
    path.write_text("clients: {bob: {token: %s}}" % (TOK + "b"))
    now[0] = 10
    assert f.check("bob", TOK + "b") is not None and f.check("acme", TOK) is None
    path.write_text("clients: {broken")
    now[0] = 20
    assert f.check("bob", TOK + "b") is not None  # the last good one
    with pytest.raises(ClientsError, match="cannot read"):
        ClientsFile(str(tmp_path / "missing.yaml"))


def test_a_broken_clients_file_is_logged_once_per_version(tmp_path, caplog):
    # the reload machinery is the rules file's too (fleet.gateway.watched; tests/fleet/gateway/test_rules.py)
    now = [0.0]
    path = tmp_path / "clients.yaml"
    path.write_text(f"clients: {{acme: {{token: {TOK}}}}}")
    f = ClientsFile(str(path), clock=lambda: now[0])
    path.write_text("clients: {acme: {token: short}}")
    for _ in range(4):
        now[0] += 10
        assert f.check("acme", TOK) is not None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.fields["error"] for r in errors] == [
        f"--gateway-clients-file {path}: client acme: token must be at least 16 printable characters, no spaces"]


# -- ban reports: POST http://fleet.gateway/v1/bans?host=H[&proxy=NS/NAME] --------------------------------------


def _ban(line: str, *headers: str) -> decide.Ban:
    head = decide.parse_head(("\r\n".join([line, "Host: fleet.gateway", *headers]) + "\r\n\r\n").encode())
    return decide.parse_ban(head, decide.target_of(head))


@pytest.mark.parametrize(("query", "want"), [
    ("host=shop.example", decide.Ban("shop.example", "")),
    ("host=Shop.Example&proxy=crawl/p-1", decide.Ban("shop.example", "crawl/p-1")),
    ("proxy=crawl/p-1&host=10.0.0.1", decide.Ban("10.0.0.1", "crawl/p-1")),
    ("host=2001:db8::1", decide.Ban("2001:db8::1", "")),
])
def test_a_ban_report_names_a_host_and_maybe_a_proxy(query, want):
    assert _ban(f"POST http://fleet.gateway/v1/bans?{query} HTTP/1.1", "Content-Length: 0") == want


@pytest.mark.parametrize(("line", "headers", "status"), [
    ("POST http://fleet.gateway/v1/bans HTTP/1.1", (), 400),  # no host
    ("POST http://fleet.gateway/v1/bans?host= HTTP/1.1", (), 400),
    ("POST http://fleet.gateway/v1/bans?host=a%20b HTTP/1.1", (), 400),
    ("POST http://fleet.gateway/v1/bans?host=a.example&host=b.example HTTP/1.1", (), 400),  # twice
    ("POST http://fleet.gateway/v1/bans?host=a.example&why=429 HTTP/1.1", (), 400),  # unknown
    ("POST http://fleet.gateway/v1/bans?host=a.example&proxy=noslash HTTP/1.1", (), 400),
    ("POST http://fleet.gateway/v1/bans?host=a.example&proxy=Crawl/p HTTP/1.1", (), 400),
    ("POST http://fleet.gateway/v1/bans?host=a.example&a=1&b=2&c=3&d=4 HTTP/1.1", (), 400),  # too many fields
    ("POST http://fleet.gateway/v1/bans?host=a.example HTTP/1.1", ("Content-Length: 5",), 400),  # a body
    ("POST http://fleet.gateway/v1/bans?host=a.example HTTP/1.1", ("Transfer-Encoding: chunked",), 400),
    ("GET http://fleet.gateway/v1/bans?host=a.example HTTP/1.1", (), 405),
    ("POST http://fleet.gateway/v1/ban?host=a.example HTTP/1.1", (), 404),
    ("POST http://fleet.gateway/ HTTP/1.1", (), 404),
])
def test_a_bad_ban_report_is_refused_saying_why(line, headers, status):
    with pytest.raises(Refused) as exc:
        _ban(line, *headers)
    assert exc.value.status == status and exc.value.message


def test_the_ban_answer_is_json_naming_the_proxy_host_and_end():
    raw = decide.ban_answer("crawl/a", "shop.example", 1_800_000_600.0, keep_alive=True)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: keep-alive" in head
    assert f"Content-Length: {len(body)}".encode() in head
    import json
    assert json.loads(body) == {"proxy": "crawl/a", "host": "shop.example", "cooldownUntil": 1_800_000_600.0}
