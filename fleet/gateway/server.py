"""The gateway's listener and wiring: one asyncio server (uvloop when installed, `fleet.gateway.process`) whose
connections pass `fleet.httpguard.Guard` (per client address, in all, the longest-idle one evicted to make room)
and are served by a front-end over one core:

    listener (this module) → front-end (`fleet.gateway.http1`: HTTP/1.1, and HTTP/1.1 inside the TLS it
                                        intercepts, `fleet.gateway.intercept`; `fleet.gateway.socks5` on
                                        the SOCKS5 listener, `handle_socks5`)
      → core (`fleet.gateway.core`: admit, choose, dial, relay, release; outcomes as values)
      → dialer (`fleet.gateway.dialers`: by the upstream's kind, CONNECT through an HTTP proxy or SOCKS5)

`Gateway` holds them together for the process (its `series`, `tunnels`, `config`); `sweep` is the core's sweeper.
"""

from __future__ import annotations

import contextlib
import logging
import random
import ssl
import time
from asyncio import CancelledError, StreamReader, StreamWriter
from collections.abc import Awaitable, Callable

from fleet import httpguard
from fleet.gateway import http1, socks5
from fleet.gateway.config import GatewayConfig
from fleet.gateway.core import SWEEP_EVERY, Clients, Conn, Core, Leases, Tunnel, sweep_every
from fleet.gateway.dialers import Credentials, Dialer, Dialers
from fleet.gateway.intercept import Authority
from fleet.gateway.metrics import GatewaySeries
from fleet.gateway.rules import RuleBook
from fleet.store.leases import AsyncLeases

__all__ = ["SWEEP_EVERY", "Gateway", "GatewayConfig", "sweep", "sweep_every"]

log = logging.getLogger("fleet.gateway")


class Gateway:
    def __init__(self, leases: AsyncLeases | Leases, clients: Clients, config: GatewayConfig, guard: httpguard.Guard,
                 clock: Callable[[], float] = time.time, rand: Callable[[], float] = random.random,
                 dialer: Dialer | None = None, rules: RuleBook | None = None, *, authority: Authority | None = None,
                 origin_tls: ssl.SSLContext | None = None, credentials: Credentials | None = None) -> None:
        self.config = config
        self.guard = guard
        dialer = dialer or Dialers.default(config.connect_timeout, config.max_header_bytes)
        self.core = Core(leases, clients, config, dialer, clock, rand, rules, authority=authority,
                         origin_tls=origin_tls, credentials=credentials)
        self.http1 = http1.Http1(self.core, config, guard)
        self.socks5 = socks5.Socks5(self.core, config, guard, self.http1)

    @property
    def series(self) -> GatewaySeries:
        return self.core.series

    @property
    def tunnels(self) -> set[Tunnel]:
        return self.core.tunnels

    async def handle(self, reader: StreamReader, writer: StreamWriter) -> None:
        """One accepted connection: the guard's admission, then the HTTP/1.1 front-end until the connection ends."""
        await self._handle(reader, writer, http1.answer, self.http1.serve)

    async def handle_socks5(self, reader: StreamReader, writer: StreamWriter) -> None:
        """One connection accepted on the SOCKS5 listener: the same guard (its limits and eviction are shared with
        the HTTP listener's connections), then the SOCKS5 front-end."""
        await self._handle(reader, writer, socks5.answer, self.socks5.serve)

    async def _handle(self, reader: StreamReader, writer: StreamWriter, answer: Callable[[int, str, str], bytes],
                      serve: Callable[[Conn, StreamReader, StreamWriter], Awaitable[None]]) -> None:
        conn = Conn(self.guard, writer, answer)
        refused = self.guard.admit(conn)
        if refused is not None:
            conn.close(refused, 503, "too many connections from this address" if refused == httpguard.PER_CLIENT
                       else "the gateway holds too many connections; try again")
            return
        conn.counted = True
        try:
            await serve(conn, reader, writer)
        except (ConnectionError, EOFError, OSError):  # IncompleteReadError is an EOFError
            pass
        except CancelledError:  # the process is stopping: ended here, as Python 3.11's start_server callback
            pass                # would log a cancelled handler with a traceback
        except Exception:  # a bug must not end the server; the connection goes
            log.exception("the gateway failed on a connection")
        finally:
            conn.close("")
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def sweep(gw: Gateway) -> None:
    """Idle and too-long tunnels ended, renewals sent (the core's sweeper)."""
    await gw.core.sweep()
