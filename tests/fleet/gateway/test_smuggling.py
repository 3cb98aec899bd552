"""Request smuggling: a request whose body framing two HTTP parsers could read differently is answered 400 by the
gateway, its connection closed, and nothing of it reaches a proxy (the in-process gateway of
tests/fleet/gateway/harness.py, a recording server in the proxy's place). The cases are the classic ones
(PortSwigger's and RFC 9112 section 11.2's): both framings in either order, two Content-Lengths, a Content-Length
list, an obfuscated or stacked Transfer-Encoding, obs-fold, a space before the colon, a chunk size past 64 bits,
a bare LF."""

from __future__ import annotations

import asyncio

import pytest

from tests.fleet.gateway.harness import FakeLeases, Running, Upstream, auth, status_of

START = f"POST http://origin.test/submit HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: {auth()}\r\n"
SMUGGLED = b"GET http://origin.test/admin HTTP/1.1\r\nHost: origin.test\r\n\r\n"

CASES = {
    "CL+TE": (START + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + b"0\r\n\r\n" + SMUGGLED,
    "TE+CL": (START + "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n").encode() + b"0\r\n\r\n" + SMUGGLED,
    "two Content-Lengths": (START + "Content-Length: 0\r\nContent-Length: 60\r\n\r\n").encode() + SMUGGLED,
    "a Content-Length list": (START + "Content-Length: 60, 60\r\n\r\n").encode() + SMUGGLED,
    "obfuscated Transfer-Encoding": (START + "Transfer-Encoding: xchunked\r\n\r\n").encode() + b"0\r\n\r\n" + SMUGGLED,
    "obfuscated Transfer-Encoding (a control character)":
        (START + "Transfer-Encoding: chunked\x0b\r\n\r\n").encode() + b"0\r\n\r\n" + SMUGGLED,
    "stacked Transfer-Encoding": (START + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n").encode()
                                 + b"0\r\n\r\n" + SMUGGLED,
    "stacked Transfer-Encoding (chunked twice)":
        (START + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + b"0\r\n\r\n" + SMUGGLED,
    "obs-fold": (START + "X-Note: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n").encode() + SMUGGLED,
    "a space before the colon": (START + "Transfer-Encoding : chunked\r\nContent-Length: 60\r\n\r\n").encode()
                                + SMUGGLED,
    "chunk-size overflow": (START + "Transfer-Encoding: chunked\r\n\r\n").encode()
                           + b"10000000000000005\r\nhello\r\n0\r\n\r\n" + SMUGGLED,
    "bare LF in the head": (START + "Content-Length: 60\nTransfer-Encoding: chunked\r\n\r\n").encode()
                           + b"0\r\n\r\n" + SMUGGLED,
    "bare LF in a chunk-size line": (START + "Transfer-Encoding: chunked\r\n\r\n").encode()
                                    + b"5\nhello\r\n0\r\n\r\n" + SMUGGLED,
}


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_an_ambiguous_request_is_400_closed_and_never_forwarded(raw):
    async def go() -> tuple[bytes, bool, list[bytearray]]:
        upstream = await Upstream().start()
        gw = await Running.start(FakeLeases({"crawl/a": ("127.0.0.1", upstream.port)}))
        try:
            got, closed = await gw.exchange(raw)
        finally:
            await gw.close()
            await upstream.close()
        return got, closed, upstream.received

    got, closed, received = asyncio.run(go())
    assert status_of(got) == 400, got[:200]
    assert got.count(b"HTTP/1.1") == 1 and b"Connection: close" in got  # one answer, and no second (smuggled) one
    assert closed
    assert received == []  # not a byte reached the proxy


def test_a_well_framed_request_on_the_same_harness_is_forwarded():
    """The harness can fail: the same request with one framing reaches the proxy and is answered 200."""
    async def go() -> tuple[bytes, list[bytearray]]:
        upstream = await Upstream().start()
        gw = await Running.start(FakeLeases({"crawl/a": ("127.0.0.1", upstream.port)}))
        try:
            got, _ = await gw.exchange((START + "Content-Length: 5\r\nConnection: close\r\n\r\n").encode() + b"hello")
        finally:
            await gw.close()
            await upstream.close()
        return got, upstream.received

    got, received = asyncio.run(go())
    assert status_of(got) == 200 and got.endswith(b"ok")
    assert len(received) == 1 and received[0].endswith(b"\r\n\r\nhello")
    assert b"Content-Length: 5\r\n" in received[0] and b"Proxy-Authorization" not in received[0]
