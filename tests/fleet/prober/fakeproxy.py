"""A tiny CONNECT-answering proxy on 127.0.0.1 for the prober's tests, run
on the test's own event loop. `mode` says how it answers the next
connections: ok (200, then a GET in the tunnel answered with `body`),
forbidden (403), hang (never answers), close (closes without answering), garbage (a
non-HTTP line), huge (a head over 16 KiB), get_fail (200, then 502 to the GET),
echo (200, then the peer's address as the body)."""

from __future__ import annotations

import asyncio
import contextlib


class FakeProxy:
    def __init__(self, mode: str = "ok", body: bytes = b"hello\n", port: int = 0) -> None:
        self.mode = mode
        self.body = body
        self.server: asyncio.Server | None = None
        self.port = port
        self.requests: list[bytes] = []
        self.connections = 0
        self._open: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> FakeProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for w in list(self._open):
                w.transport.abort()
            await self.server.wait_closed()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head)
        if mode == "close":  # an orderly close (FIN), without an answer
            writer.close()
            await writer.wait_closed()
            return
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "forbidden":
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        if mode == "garbage":
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            await writer.drain()
            return
        if mode == "huge":
            writer.write(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(3600)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError):
            get = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(get)
            if mode == "get_fail":
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            else:
                body = self.body
                if mode == "echo":
                    body = writer.get_extra_info("peername")[0].encode() + b"\n"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
