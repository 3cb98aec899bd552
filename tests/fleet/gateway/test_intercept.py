"""fleet.gateway.intercept: the CA's files (made once, the key private, refused when others may read it, never in a
message), its leaves (they verify against the CA for their host only, in a real TLS handshake over memory BIOs), the
bounded leaf cache under 10,000 names; the core's side: an origin that does not verify is never retried and blames
no proxy; the clients file's `intercept`; the target of a request inside an intercepted tunnel."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from pathlib import Path

import pytest

from fleet.gateway import decide, intercept
from fleet.gateway.clients import ClientsError, parse_clients
from fleet.gateway.core import UntrustedOrigin
from fleet.gateway.decide import Options, Refused, Target
from fleet.gateway.dialers import DialError
from tests.fleet.gateway.harness import FakeLeases
from tests.fleet.gateway.test_core import ACME, THREE, FakeDialer, core_of


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("ca") / "ca"
    intercept.make_ca(directory)
    return directory


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> str:
    """A TLS handshake between the two contexts over memory BIOs; the ALPN protocol chosen."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=name)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for key, obj in (("c", c), ("s", s)):
            if not done[key]:
                try:
                    obj.do_handshake()
                    done[key] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return c.selected_alpn_protocol() or ""
    raise AssertionError("no handshake")


def _trusting(ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca / intercept.CERT_FILE))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def test_a_new_ca_has_a_private_key_and_is_never_made_over(tmp_path):
    directory = tmp_path / "ca"
    assert intercept.ensure_ca(directory)
    assert os.stat(directory / intercept.KEY_FILE).st_mode & 0o777 == 0o600
    before = (directory / intercept.KEY_FILE).read_bytes()
    assert not intercept.ensure_ca(directory)
    with pytest.raises(intercept.CaError, match="never overwritten"):
        intercept.make_ca(directory)
    assert (directory / intercept.KEY_FILE).read_bytes() == before


@pytest.mark.parametrize(("mode", "ok"), [(0o600, True), (0o400, True), (0o640, False), (0o604, False),
                                          (0o644, False), (0o660, False)])
def test_a_ca_key_others_may_read_is_refused(tmp_path, mode, ok):
    directory = tmp_path / "ca"
    intercept.make_ca(directory)
    (directory / intercept.KEY_FILE).chmod(mode)
    if ok:
        intercept.Authority(directory)
    else:
        with pytest.raises(intercept.CaError, match=re.escape(f"readable by others (mode {mode:04o})")):
            intercept.Authority(directory)


def test_ca_files_that_do_not_belong_together_or_are_not_pem_are_refused_without_the_keys_bytes(tmp_path, ca):
    other = tmp_path / "other"
    intercept.make_ca(other)
    (other / intercept.CERT_FILE).write_bytes((ca / intercept.CERT_FILE).read_bytes())
    with pytest.raises(intercept.CaError, match=r"is not the certificate of ca\.key"):
        intercept.Authority(other)
    secret = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXNlY3JldC1zZWNyZXQ=\n-----END PRIVATE KEY-----\n"
    (other / intercept.KEY_FILE).write_bytes(secret)
    with pytest.raises(intercept.CaError) as err:
        intercept.Authority(other)
    assert "c2VjcmV0" not in str(err.value) and "PRIVATE" not in str(err.value)
    assert "PRIVATE" not in repr(intercept.Authority(ca))


def test_a_leaf_verifies_against_the_ca_for_its_host_only_and_offers_http11(ca):
    authority = intercept.Authority(ca)
    for host in ("shop.example", "127.0.0.1"):
        assert _handshake(authority.context_for(host), _trusting(ca), host) == "http/1.1"
    # a hello naming another host than the CONNECT's is refused by the gateway's side
    with pytest.raises(ssl.SSLError):
        _handshake(authority.context_for("shop.example"), _trusting(ca), "bank.example")
    # a client that does not trust fleet's CA refuses the leaf
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(authority.context_for("shop.example"), ssl.create_default_context(), "shop.example")


def test_ten_thousand_hosts_keep_the_leaf_cache_bounded(ca):
    authority = intercept.Authority(ca, max_leaves=100)
    first = authority.context_for("host-0.example")
    assert authority.context_for("HOST-0.example.") is first  # one leaf per host, whatever its spelling
    for n in range(10_000):
        authority.context_for(f"host-{n}.example")
    assert len(authority._leaves) == 100 and authority.made == 10_000
    assert authority.context_for("host-9999.example") is authority.context_for("host-9999.example")
    assert authority.made == 10_000  # the recent ones are cached
    assert authority.context_for("host-0.example") is not first  # the oldest were dropped, and are made again


def test_an_origin_that_does_not_verify_is_a_502_reason_never_retried_and_blames_no_proxy(monkeypatch):
    leases = FakeLeases(dict(THREE))
    dialer = FakeDialer()
    core = core_of(leases, dialer)
    core.origin_tls = ssl.create_default_context()
    secured = []

    async def untrusted(channel, host, context, timeout):
        secured.append(host)
        return DialError(decide.UNTRUSTED_ORIGIN, f"{host}: self-signed certificate")

    monkeypatch.setattr(intercept, "secure", untrusted)
    target = Target("origin.test", 443, "/")

    async def go():
        attempts = core.attempts(ACME, Options("acme"), target, tunnel=False, tls=True)
        return await attempts.next(), attempts.outcome()

    attempt, outcome = asyncio.run(go())
    assert attempt is None and outcome == UntrustedOrigin("origin.test: self-signed certificate")
    assert dialer.dials == [("tunnel", "crawl/a", "origin.test")] and secured == ["origin.test"]
    assert leases.reports == [] and len(leases.released) == 1


def test_only_a_client_that_asked_and_a_gateway_with_a_ca_intercept(ca):
    clients = parse_clients('clients: {a: {token: "0123456789abcdef", intercept: true}, b: {token: "0123456789abcdef"}}')
    assert clients["a"].intercept and not clients["b"].intercept
    with pytest.raises(ClientsError, match="intercept must be true or false"):
        parse_clients('clients: {a: {token: "0123456789abcdef", intercept: "yes"}}')
    core = core_of(FakeLeases())
    assert not core.intercepts(clients["a"])  # no CA: never
    core.authority, core.origin_tls = intercept.Authority(ca), intercept.origin_context()
    assert core.intercepts(clients["a"]) and not core.intercepts(clients["b"])


TUNNEL = Target("shop.example", 443, "")


@pytest.mark.parametrize(("method", "target", "want"), [
    ("GET", "/a?b=1", Target("shop.example", 443, "/a?b=1")),
    ("GET", "https://shop.example/a", Target("shop.example", 443, "/a")),
    ("GET", "https://SHOP.example:443?q", Target("shop.example", 443, "/?q")),
    ("GET", "https://bank.example/", None),  # another host than the certificate's
    ("GET", "https://shop.example:8443/", None),
    ("GET", "https://u@shop.example/", None),
    ("GET", "http://shop.example/", None),
    ("GET", "*", None),
    ("CONNECT", "/x", None),
])
def test_the_target_of_a_request_inside_an_intercepted_tunnel(method, target, want):
    head = decide.parse_head(f"{method} {target} HTTP/1.1\r\nHost: shop.example\r\n\r\n".encode())
    if want is None:
        with pytest.raises(Refused) as err:
            decide.inner_target(head, TUNNEL)
        assert err.value.status == 400
    else:
        assert decide.inner_target(head, TUNNEL) == want
