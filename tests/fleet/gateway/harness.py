"""An in-process gateway for tests that need no Redis and no Squid: the real `Gateway` on a loopback port, a lease
store in memory (`FakeLeases`: every proxy has room, the skip list honoured, calls recorded) and upstream proxies
that are asyncio servers recording every byte they receive (`Upstream`). Used by the request-smuggling tests and
the core's tests; the real processes are tests/integration/test_gateway.py's."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fleet import httpguard
from fleet.gateway.clients import Client
from fleet.gateway.server import Gateway, GatewayConfig
from fleet.store.leases import Granted, LeaseCall, NoProxy, ReportCall

TOKEN = "harness-token-0123456789abcdef"


def auth(user: str = "acme", token: str = TOKEN) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


class FakeClients:
    """`ClientsFile.check` over a fixed table (one client, `acme`, any port)."""

    def __init__(self) -> None:
        self.clients = {"acme": Client("acme", TOKEN.encode(), None, None, 0)}

    def check(self, name: str, password: str) -> Client | None:
        client = self.clients.get(name)
        return client if client is not None and password == TOKEN else None


@dataclass
class FakeLeases:
    """The lease store's answers from a dict of proxy → (ip, port) or (ip, port, more of the endpoint: its scheme,
    its credentials reference): the first proxy not skipped, always room."""

    endpoints: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    leased: list[LeaseCall] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    reports: list[tuple[str, str, str]] = field(default_factory=list)
    waits: dict[str, float] = field(default_factory=dict)  # a rule's pace: seconds until the proxy's next turn
    pools: dict[str, str] = field(default_factory=dict)  # proxy → its ProxyPool (a lease naming a pool gets only those)
    cooldowns: list[float] = field(default_factory=list)  # the blocked cooldown each report carried
    paced: list[str] = field(default_factory=list)

    async def lease(self, call: LeaseCall, now: float, rand: float) -> tuple[Any, None, None]:
        self.leased.append(call)
        for proxy, (ip, port, *more) in self.endpoints.items():
            if proxy not in call.skip and (not call.pool or self.pools.get(proxy) == call.pool):
                return Granted(proxy, json.dumps({"ip": ip, "port": port, **(more[0] if more else {})})), None, None
        return NoProxy(), None, None

    async def release(self, lease_id: str, now: float) -> None:
        self.released.append(lease_id)

    async def report(self, call: ReportCall, now: float, blocked: float, *args: Any) -> None:
        self.reports.append((call.proxy, call.target, call.outcome))
        self.cooldowns.append(blocked)

    async def renew(self, call: Any, now: float) -> Any:  # pragma: no cover - no test holds a tunnel that long
        raise AssertionError("no renewal expected")

    async def sessions_active(self, now: float) -> int:
        return 0

    async def pace(self, *, proxy: str, target: str, interval: float, most: float, now: float) -> float:
        """Each proxy's wait in `waits` (0 when not named)."""
        self.paced.append(proxy)
        return self.waits.get(proxy, 0.0)


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


async def answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
    """As a Squid would: a CONNECT gets 200 and an echo tunnel; a plain request (its body by Content-Length) gets a
    200 with a short body."""
    if head.startswith(b"CONNECT "):
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        return
    n = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
              if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(n)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    await writer.drain()


class Upstream:
    """A loopback server in a proxy's place: each connection's bytes recorded in `received` (one entry per
    connection), its head answered by `answer`."""

    def __init__(self, answer: Answer = answer_ok) -> None:
        self.answer = answer
        self.received: list[bytearray] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = bytearray()
        self.received.append(got)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            got += head
            await self.answer(_Recording(reader, got), writer, head)  # type: ignore[arg-type]
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


class _Recording:
    """A StreamReader whose reads are appended to `got`."""

    def __init__(self, reader: asyncio.StreamReader, got: bytearray) -> None:
        self.reader, self.got = reader, got

    async def read(self, n: int = -1) -> bytes:
        data = await self.reader.read(n)
        self.got += data
        return data

    async def readexactly(self, n: int) -> bytes:
        data = await self.reader.readexactly(n)
        self.got += data
        return data


class Running:
    """A `Gateway` listening on loopback with `FakeLeases` and `FakeClients`."""

    def __init__(self, gateway: Gateway, server: asyncio.Server) -> None:
        self.gateway, self.server = gateway, server
        self.port = server.sockets[0].getsockname()[1]

    @classmethod
    async def start(cls, leases: FakeLeases, config: GatewayConfig | None = None, dialer: Any = None,
                    credentials: Any = None) -> Running:
        config = config or GatewayConfig(max_attempts=3, connect_timeout=2.0, header_timeout=2.0, body_timeout=2.0,
                                         idle_timeout=5.0, response_timeout=5.0)
        guard = httpguard.Guard(httpguard.Limits(header_timeout=config.header_timeout,
                                                 idle_timeout=config.idle_timeout))
        gw = Gateway(leases, FakeClients(), config, guard, dialer=dialer, credentials=credentials)
        server = await asyncio.start_server(gw.handle, "127.0.0.1", 0, limit=config.max_header_bytes)
        return cls(gw, server)

    async def exchange(self, raw: bytes, timeout: float = 5.0, half_close: bool = True) -> tuple[bytes, bool]:
        """Send `raw` (then our end shut, when `half_close`: a gateway that lingers for more sees the end at once),
        read until the gateway closes (or `timeout`): (everything read, closed by the gateway)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(raw)
        await writer.drain()
        if half_close:
            writer.write_eof()
        got = b""
        closed = False
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        try:
            while loop.time() < end:
                data = await asyncio.wait_for(reader.read(65536), end - loop.time())
                if not data:
                    closed = True
                    break
                got += data
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
        return got, closed

    async def close(self) -> None:
        self.server.close()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.") else 0
