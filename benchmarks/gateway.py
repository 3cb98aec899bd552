"""`fleet gateway` against connecting to the same Squids directly, and against proxy.py chaining to them, side by
side in one run; with `--against DIR`, also the gateway of another checkout (an A/B between commits, the same
Squids and client in the same run).

Set-up: a real redis-server, `--squids` real Squid processes (the local provider) written into Redis as
Running proxies, one `fleet gateway` process, and an origin (an asyncio HTTP/1.1 server in its own process:
`/` answers 2 bytes, `/big` 1 MiB, keep-alive). The client is this process (uvloop).

Measured, each through the gateway and directly to a Squid:

- added latency per CONNECT: time from connecting to the tunnel's 200, p50/p99 over `--connects`
  rounds of one new tunnel per column (each then makes one GET), after a warm-up tunnel each;
- requests/s through `--tunnels` keep-alive tunnels for `--seconds` (GET / in a loop in each; every column's
  tunnels open at once, the columns taking 5 turns of `--seconds`/5 each);
- with `--socks` (the default), the same two through the gateway's SOCKS5 listener (a column `socks5`: greeting,
  username/password, CONNECT by name), against the gateway's HTTP CONNECT;
- with `--upstream` (the default), the same two for bought proxies as members: an authenticated Squid (the local
  provider's, with Basic auth: basic_ncsa_auth over an `openssl passwd -apr1` htpasswd) and an authenticated
  microsocks (`-u USER -P PASS`), written into Redis as the Proxy reconciler writes an upstream provider's members
  (`scheme`, `credentials`: a reference to `<secrets dir>/<provider>/{username,password}`), and beside them the
  first Squid as a member of its own. These three live in a Redis database of their own with a gateway of their
  own (FLEET_GATEWAY_UPSTREAM_SECRETS_DIR), so no other column leases them; its client picks one by `-provider-`.
  Each is measured directly (the bought ones with Proxy-Authorization, SOCKS5 username/password) and through that
  gateway (HTTP CONNECT), one proxy process behind one gateway each, and what the gateway adds to a bought member
  is printed beside what it adds to the Squid member (the goal: an upstream member adds no more than a Squid
  member does);
- plain HTTP requests/s (absolute URI, as a crawler's http_proxy sends them) on `--plain` keep-alive connections
  for `--seconds`: the gateway parses each head and opens a connection to a Squid per request;
- 1 MiB bodies through one tunnel, `--bodies` times: MB/s, and CPU seconds per MB of the gateway process
  (directly: of the Squid);
- the gateway's RSS with `--open` tunnels open at once.

With `--intercept` (the default; `--no-intercept` skips it) an HTTPS part: the origin also listens with TLS (a
self-signed certificate for 127.0.0.1, the same `/` and `/big`), the gateway runs with fleet's CA (made by
`fleet ca --gateway-ca-dir`, FLEET_GATEWAY_CA_DIR) and the origin's certificate as FLEET_GATEWAY_ORIGIN_CA_FILE,
and its clients file has a second client, `spy`, with `intercept: true`. Three columns: direct (a Squid's CONNECT,
TLS to the origin), the gateway's plain tunnel (client `bench`: CONNECT through the gateway, TLS end to end) and
intercepted (client `spy`: TLS to the gateway, fleet's CA trusted; the gateway leases a proxy per request and opens
its own tunnel and verified TLS to the origin through it). Measured:

- the first byte of a new connection: from the TCP connect to the first byte of the answer to one GET / (CONNECT,
  TLS handshake, request), p50/p99 over `--intercept-connects` rounds of one new connection per column (after a
  warm-up connection each: the leaf is cached), and what interception adds over the plain tunnel;
- 1 MiB bodies on one connection, `--intercept-bodies` times: MB/s, intercepted/plain-tunnel, and CPU seconds per
  MB of the gateway process (directly: of the Squid). Intercepted, the gateway keeps its upstream (the lease, the
  tunnel, the TLS to the origin) from one GET to the next on the connection, as it does for a browser.

The goal these are read against (issue: interception adds <= 5 ms to the first byte of a new connection with its
leaf cached, and keeps >= 0.7x a plain tunnel's throughput) is printed beside them, never asserted. With
`--against DIR`, a checkout that has interception is measured in the HTTPS part too (its own tunnel and intercepted
columns); an older one gets the clients file without `spy` and is left out of it. The load average before and
after the run is printed last.

With `--haproxy` (the default when the `haproxy` binary is installed: Debian's package, ci/apt-packages.txt) the
relay's floor: HAProxy in TCP mode (`nbthread 1`, beside the gateway's one process; roundrobin over the same Squids;
it relays bytes and parses nothing, the client's CONNECT answered by the Squid behind it), started as a child
(`-db`), measured against the gateway in `ROUNDS` alternating rounds (gateway, haproxy, [socks5,] direct; then
again), each round a share of `--connects`, `--seconds` and `--bodies`: CONNECT latency to the 200, keep-alive
requests/s through `--tunnels` tunnels, 1 MiB bodies MB/s, and the CPU of the relay's process tree per request.
Printed: gateway/haproxy ratios, each column's spread between rounds (min-max), and the load average.

With `--proxypy` (the default when proxy.py is installed: `pip install -e '.[bench]'`) a third column: proxy.py
in its own process (threadless, `--proxypy-acceptors`, its ProxyPoolPlugin over the same Squids, basic auth),
measured by the same client code; its CPU and RSS are summed over its processes. It does no leases, Redis,
retries or ban detection: the floor of a plugin-based proxy, not a like-for-like. The origin is addressed as
`localhost` (proxy.py sends private-IP targets past its pool).

    python benchmarks/gateway.py                          # 4 squids, 200 tunnels, 1000 open, the HTTPS part
    python benchmarks/gateway.py --tunnels 50 --open 300 --seconds 5
    python benchmarks/gateway.py --intercept-connects 500 --intercept-bodies 200   # more HTTPS samples
    python benchmarks/gateway.py --no-intercept --no-proxypy --plain 0 --seconds 3   # mostly the tunnel columns
    python benchmarks/gateway.py --no-intercept --no-proxypy --no-upstream --plain 0 --seconds 5   # + HAProxy
    git worktree add /tmp/old HEAD~10 && python benchmarks/gateway.py --against /tmp/old --no-proxypy
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import json
import os
import resource
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from benchmarks.procstats import cpu_s, free_port, rss_mib, stop  # noqa: E402
from fleet.store import keys  # noqa: E402
from fleet.testing import upstreams  # noqa: E402
from fleet.testing.tls import self_signed  # noqa: E402
from providers import base, registry  # noqa: E402
from providers.base import CreateRequest, Deadline  # noqa: E402
from providers.local.config import LocalConfig  # noqa: E402
from providers.local.provider import LocalProvider  # noqa: E402
from providers.upstream.config import UpstreamConfig  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
AUTH = "Basic " + base64.b64encode(f"bench:{TOKEN}".encode()).decode()
SPY_TOKEN = "spy-token-0123456789abcdef"  # the client with `intercept: true`
SPY_AUTH = "Basic " + base64.b64encode(f"spy:{SPY_TOKEN}".encode()).decode()
UPSTREAM_USER, UPSTREAM_PASSWORD = "buyer", "bench-upstream-pass"  # what the bought proxies (--upstream) ask for
UPSTREAM_PROVIDERS = {"http": "vendor-http", "socks5": "vendor-socks"}  # kind -> its provider's name (and credentials)

ORIGIN = r"""
import asyncio, ssl, sys
BIG = b"x" * (1024 * 1024)
SMALL = b"ok"
async def serve(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            body = BIG if b" /big " in head.split(b"\r\n", 1)[0] else SMALL
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    if len(sys.argv) > 2:  # the same answers over TLS: port, certificate, key
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(sys.argv[3], sys.argv[4])
        tls.set_alpn_protocols(["http/1.1"])
        await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[2]), backlog=4096, ssl=tls)
    await srv.serve_forever()
try:
    import uvloop; uvloop.install()
except ImportError:
    pass
asyncio.run(main())
"""


async def get(r: asyncio.StreamReader, w: asyncio.StreamWriter, host: str, path: str = "/") -> int:
    w.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await r.readuntil(b"\r\n\r\n")
    n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    await r.readexactly(n)
    return n


async def tunnel(proxy: tuple[str, int], target: str, auth: bool | str, header: str = AUTH,
                 socks_user: tuple[str, str] = ("bench", TOKEN),
                 via: str = "") -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float]:
    """A tunnel by CONNECT (`auth`: with the Proxy-Authorization `header`; `via`: the gateway's 200 must name this
    proxy in X-Fleet-Proxy), or by SOCKS5 (`auth` "socks5": username and password `socks_user`, the target's name
    sent for the proxy to resolve)."""
    t0 = time.perf_counter()
    r, w = await asyncio.open_connection(*proxy, limit=1 << 20)
    if auth == "socks5":
        host, _, port = target.rpartition(":")
        user, token = socks_user[0].encode(), socks_user[1].encode()
        w.write(b"\x05\x01\x02")
        if await r.readexactly(2) != b"\x05\x02":
            raise RuntimeError("SOCKS5: username/password refused")
        w.write(b"\x01" + bytes([len(user)]) + user + bytes([len(token)]) + token)
        if await r.readexactly(2) != b"\x01\x00":
            raise RuntimeError("SOCKS5: authentication failed")
        w.write(b"\x05\x01\x00\x03" + bytes([len(host)]) + host.encode() + int(port).to_bytes(2, "big"))
        answer = await r.readexactly(10)
        if answer[1] != 0:
            w.close()
            raise RuntimeError(f"SOCKS5 CONNECT answered {answer[1]:#04x}")
        return r, w, time.perf_counter() - t0
    w.write((f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n" + (f"Proxy-Authorization: {header}\r\n" if auth else "")
             + "\r\n").encode())
    head = await r.readuntil(b"\r\n\r\n")
    if head[9:12] != b"200":
        w.close()
        raise RuntimeError(f"CONNECT answered {head[9:12].decode(errors='replace')}")
    if via and f"\r\nx-fleet-proxy: {via}\r\n".encode() not in head.lower():
        w.close()
        raise RuntimeError(f"the tunnel is not through {via}: {head[:300]!r}")
    return r, w, time.perf_counter() - t0


Opener = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]]]
ROUNDS = 5  # turns of the keep-alive requests/s, each column --seconds/ROUNDS a turn


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def tree_pids(pid: int) -> list[int]:
    """A process and its descendants (proxy.py runs its acceptors as child processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
    return out


def tree_cpu_s(pid: int) -> float:
    return sum(cpu_s(p) for p in tree_pids(pid))


def tree_rss_mib(pid: int) -> float:
    return sum(rss_mib(p)[0] for p in tree_pids(pid))


async def run(args: argparse.Namespace, proxies: dict[str, tuple[str, int] | None], squids: list[tuple[str, int]],
              target: str, pids: dict[str, int], socks: tuple[str, int] | None = None,
              extra: dict[str, Opener] | None = None) -> dict:
    """`proxies`: the relays measured besides "direct" (name -> address); `pids`: whose CPU and RSS count
    for each column (direct: the first Squid); `socks`: the gateway's SOCKS5 listener, a column of its own in the
    CONNECT latency and keep-alive requests/s; `extra`: more columns of those two (the upstream members, directly
    and through the gateway), each opening its own i-th tunnel."""
    out: dict = {}
    host = target.split(":")[0]
    cols: list[tuple[str, Callable[[int], tuple[str, int]], bool | str]] = [
        ("direct", lambda i: squids[i % len(squids)], False)]
    cols += [(name, lambda i, a=addr: a, True) for name, addr in proxies.items()]
    tunnel_cols: list[tuple[str, Opener]] = [
        (name, lambda i, pick=pick, auth=auth: tunnel(pick(i), target, auth)) for name, pick, auth in cols]
    if socks:
        tunnel_cols.append(("socks5", lambda i: tunnel(socks, target, "socks5")))
    tunnel_cols += list((extra or {}).items())
    # 1. CONNECT latency: a warm-up tunnel per column (an authenticating Squid starts its helper on first use), then
    # `--connects` rounds of one tunnel per column (a drift in the machine's load falls on every column alike)
    lat: dict[str, list[float]] = {name: [] for name, _ in tunnel_cols}
    for i in range(args.connects + 1):
        for name, opener in tunnel_cols:
            r, w, dt = await opener(i)
            if i:
                lat[name].append(dt * 1000)
            await get(r, w, host)
            w.close()
    for name, xs in lat.items():
        out[f"connect_{name}"] = (statistics.median(xs), pct(xs, 0.99))
    await asyncio.sleep(0.5)  # the gateway's releases
    # 2. requests/s through `--tunnels` keep-alive tunnels per column, all open at once, in ROUNDS turns of
    # --seconds/ROUNDS per column (as above: a drift in the machine's load falls on every column alike)
    held = {name: [await opener(i) for i in range(args.tunnels)] for name, opener in tunnel_cols}
    done = dict.fromkeys(held, 0)
    spent = dict.fromkeys(held, 0.0)
    for _ in range(ROUNDS):
        for name, conns in held.items():
            end = time.perf_counter() + args.seconds / ROUNDS

            async def loop(r: asyncio.StreamReader, w: asyncio.StreamWriter, end: float = end, name: str = name) -> None:
                while time.perf_counter() < end:
                    await get(r, w, host)
                    done[name] += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(loop(r, w) for r, w, _ in conns))
            spent[name] += time.perf_counter() - t0
    for name, conns in held.items():
        out[f"rps_{name}"] = done[name] / spent[name]
        for _, w, _ in conns:
            w.close()
    await asyncio.sleep(0.5)
    # 2b. plain HTTP (absolute URI) requests/s through `--plain` keep-alive connections: the gateway parses each
    # request head and opens a connection to a Squid per request (Connection: close upstream)
    if args.plain:
        for name, pick, auth in cols:
            conns = [await asyncio.open_connection(*pick(i), limit=1 << 20) for i in range(args.plain)]
            count = 0
            end = time.perf_counter() + args.seconds
            line = (f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nUser-Agent: bench\r\nAccept: */*\r\n"
                    + (f"Proxy-Authorization: {AUTH}\r\n" if auth else "") + "\r\n").encode()

            async def plain_loop(r: asyncio.StreamReader, w: asyncio.StreamWriter, end: float = end,
                                 line: bytes = line) -> None:
                nonlocal count
                while time.perf_counter() < end:
                    w.write(line)
                    head = await r.readuntil(b"\r\n\r\n")
                    n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    await r.readexactly(n)
                    count += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(plain_loop(r, w) for r, w in conns))
            out[f"plain_{name}"] = count / (time.perf_counter() - t0)
            for _, w in conns:
                w.close()
            await asyncio.sleep(0.5)
    # 3. 1 MiB bodies
    for name, pick, auth in cols:
        pid = pids[name]
        r, w, _ = await tunnel(squids[0] if name == "direct" else pick(0), target, auth)
        c0, t0 = tree_cpu_s(pid), time.perf_counter()
        total = 0
        for _ in range(args.bodies):
            total += await get(r, w, host, "/big")
        dt = time.perf_counter() - t0
        mb = total / 1e6
        out[f"body_{name}"] = (mb / dt, (tree_cpu_s(pid) - c0) / mb)
        w.close()
        await asyncio.sleep(0.5)
    # 4. RSS with many tunnels open
    for name, addr in proxies.items():
        assert addr is not None
        pid = pids[name]
        base_rss = tree_rss_mib(pid)
        conns: list = []
        sem = asyncio.Semaphore(100)

        async def opened(_: int, addr: tuple[str, int] = addr, conns: list = conns,
                         sem: asyncio.Semaphore = sem) -> None:
            async with sem:
                conns.append(await tunnel(addr, target, True))

        await asyncio.gather(*(opened(i) for i in range(args.open)))
        await asyncio.sleep(1)
        out[f"rss_{name}"] = (base_rss, tree_rss_mib(pid), len(conns))
        for _, w, _ in conns:
            w.close()
        await asyncio.sleep(2)
    return out


async def run_floor(args: argparse.Namespace, cols: dict[str, tuple[Opener, int | None]], host: str) -> dict:
    """The relay against its floor: `cols` (name -> its opener and the pid whose process tree's CPU counts, None for
    direct) in ROUNDS rounds, each column in turn within a round (gateway, haproxy, ...: a drift of the machine's load
    falls on both), each turn: `--connects`/ROUNDS new tunnels (each then one GET), `--seconds`/ROUNDS of GET / in a
    loop through `--tunnels` keep-alive tunnels (opened once, before the first round) with the CPU seconds over
    them, and `--bodies`/ROUNDS 1 MiB bodies through a new tunnel (MB/s; the CPU seconds and MB summed over the
    rounds). Per column, every round's figures: `floor_NAME`."""
    out = {name: {"connect": [], "connect_p50": [], "rps": [], "cpu_us": [], "mbps": [], "body_cpu_s": 0.0,
                  "body_mb": 0.0} for name in cols}
    for opener, _ in cols.values():  # a warm-up tunnel each
        r, w, _ = await opener(0)
        await get(r, w, host)
        w.close()
    held = {name: [await opener(i) for i in range(args.tunnels)] for name, (opener, _) in cols.items()}
    per_round = max(1, args.connects // ROUNDS)
    for _ in range(ROUNDS):
        for name, (opener, pid) in cols.items():
            fig = out[name]
            lat = []
            for i in range(per_round):
                r, w, dt = await opener(i)
                lat.append(dt * 1000)
                await get(r, w, host)
                w.close()
            fig["connect"] += lat
            fig["connect_p50"].append(statistics.median(lat))
            await asyncio.sleep(0.2)  # the gateway's releases
            count = 0
            end = time.perf_counter() + args.seconds / ROUNDS

            async def loop(r: asyncio.StreamReader, w: asyncio.StreamWriter, end: float = end) -> None:
                nonlocal count
                while time.perf_counter() < end:
                    await get(r, w, host)
                    count += 1

            c0, t0 = tree_cpu_s(pid) if pid else 0.0, time.perf_counter()
            await asyncio.gather(*(loop(r, w) for r, w, _ in held[name]))
            dt = time.perf_counter() - t0
            fig["rps"].append(count / dt)
            if pid:
                fig["cpu_us"].append((tree_cpu_s(pid) - c0) / count * 1e6)
            r, w, _ = await opener(0)
            total, c0, t0 = 0, tree_cpu_s(pid) if pid else 0.0, time.perf_counter()
            for _ in range(max(1, args.bodies // ROUNDS)):
                total += await get(r, w, host, "/big")
            fig["mbps"].append(total / 1e6 / (time.perf_counter() - t0))
            if pid:  # summed over the rounds: a round's bodies take a few of /proc's 10 ms ticks
                fig["body_cpu_s"] += tree_cpu_s(pid) - c0
                fig["body_mb"] += total / 1e6
            w.close()
    for conns in held.values():
        for _, w, _ in conns:
            w.close()
    return {f"floor_{name}": fig for name, fig in out.items()}


def print_floor(res: dict, names: list[str], load: tuple[tuple[float, ...], tuple[float, ...]], squids: int,
                tunnels: int) -> None:
    """The gateway (and its SOCKS5 listener) against HAProxy: the ratio of the figures over all rounds, and each
    column's spread between rounds (min-max of the per-round figures)."""
    fl = {n: res[f"floor_{n}"] for n in names}

    def total(n: str, key: str) -> float:  # the rounds are of equal length (time, or bodies)
        return statistics.mean(fl[n][key])

    def spread(key: str, fmt: Callable[[float], str], cols: list[str]) -> str:
        return ", ".join(f"{n} {fmt(min(fl[n][key]))}–{fmt(max(fl[n][key]))}" for n in cols if fl[n][key])

    def cpu_mb(n: str) -> float:
        return fl[n]["body_cpu_s"] * 1000 / max(fl[n]["body_mb"], 1e-9)

    relays = [n for n in names if n != "direct"]
    print(f"HAProxy {haproxy_version()} as the relay's floor: mode tcp, nbthread 1 (beside the gateway's one process), "
          f"roundrobin over {squids} Squids; {ROUNDS} rounds alternating {', '.join(names)}; load average before "
          f"{load[0][0]:.2f}, after {load[1][0]:.2f} (1 min), {os.cpu_count()} cores")
    print("vs haproxy, CONNECT ms  " + " | ".join(
        f"{n} p50 {statistics.median(fl[n]['connect']):.2f} p99 {pct(fl[n]['connect'], 0.99):.2f}" for n in names))
    h50, h99 = statistics.median(fl["haproxy"]["connect"]), pct(fl["haproxy"]["connect"], 0.99)
    for n in relays:
        if n == "haproxy":
            continue
        g50, g99 = statistics.median(fl[n]["connect"]), pct(fl[n]["connect"], 0.99)
        print(f"CONNECT to the 200: {n}/haproxy p50 {g50 / h50:.2f}× ({g50 - h50:+.2f} ms), p99 {g99 / h99:.2f}× "
              f"({g99 - h99:+.2f} ms) (rounds' p50 {spread('connect_p50', lambda x: f'{x:.2f}', [n, 'haproxy'])} ms)")
        print(f"keep-alive req/s, {tunnels} tunnels: {n}/haproxy {total(n, 'rps') / total('haproxy', 'rps'):.2f}× "
              f"(rounds {spread('rps', lambda x: f'{x / 1000:.1f}k', [n, 'haproxy', 'direct'])})")
        print(f"1 MiB bodies MB/s: {n}/haproxy {total(n, 'mbps') / total('haproxy', 'mbps'):.2f}× "
              f"(rounds {spread('mbps', lambda x: f'{x:.0f}', [n, 'haproxy', 'direct'])}); CPU ms per MB {n} "
              f"{cpu_mb(n):.2f}, haproxy {cpu_mb('haproxy'):.2f} (all rounds)")
        print(f"CPU µs per relayed request (the relay's process tree; the Squids' not counted): {n}/haproxy "
              f"{total(n, 'cpu_us') / total('haproxy', 'cpu_us'):.2f}× "
              f"(rounds {spread('cpu_us', lambda x: f'{x:.0f}', [n, 'haproxy'])})")


def haproxy_config(port: int, squids: list[tuple[str, int]], maxconn: int) -> str:
    """HAProxy as the relay's floor: TCP mode (bytes relayed, nothing parsed: the client's CONNECT is answered by the
    Squid behind it), one thread (beside the gateway's one process), roundrobin over the same Squids, `maxconn` within
    the file-descriptor limit, timeouts longer than any run, no logs."""
    servers = "".join(f"    server squid{i} {host}:{sport}\n" for i, (host, sport) in enumerate(squids))
    return (f"global\n    nbthread 1\n    maxconn {maxconn}\n\n"
            f"defaults\n    mode tcp\n    maxconn {maxconn}\n    timeout connect 10s\n    timeout client 600s\n"
            "    timeout server 600s\n\n"
            f"frontend relay\n    bind 127.0.0.1:{port}\n    default_backend squids\n\n"
            f"backend squids\n    balance roundrobin\n{servers}")


def haproxy_maxconn() -> int:
    """Two descriptors a relayed connection (client and server side), less a margin for listeners and the like."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(100, min(100000, soft // 2 - 200))


def haproxy_binary() -> str | None:
    """Debian's package puts it in /usr/sbin, not on a user's PATH."""
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)


def haproxy_version() -> str:
    out = subprocess.run([haproxy_binary() or "haproxy", "-v"], capture_output=True, text=True, timeout=10).stdout.split()
    return out[2] if len(out) > 2 else "?"


def start_haproxy(port: int, squids: list[tuple[str, int]], work: Path) -> subprocess.Popen[bytes]:
    cfg = work / "haproxy.cfg"
    cfg.write_text(haproxy_config(port, squids, haproxy_maxconn()))
    with open(work / "haproxy.log", "ab") as log:
        return subprocess.Popen([haproxy_binary() or "haproxy", "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT, cwd=work)


async def https(proxy: tuple[str, int], target: str, header: str | None,
                trust: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float]:
    """A new connection: CONNECT `target` through `proxy` (`header`: its Proxy-Authorization, None for a Squid),
    TLS inside (verified against `trust`, the name checked), one GET /. The seconds from the TCP connect to the
    response's first byte, and the connection, ready for the next request."""
    host = target.rsplit(":", 1)[0]
    t0 = time.perf_counter()
    r, w, _ = await tunnel(proxy, target, header is not None, header or "")
    await w.start_tls(trust, server_hostname=host)
    w.write(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    first = await r.readexactly(1)
    dt = time.perf_counter() - t0
    head = first + await r.readuntil(b"\r\n\r\n")
    if head[9:12] != b"200":
        w.close()
        raise RuntimeError(f"GET / inside the tunnel answered {head[:200]!r}")
    await r.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
    return r, w, dt


async def run_intercept(args: argparse.Namespace, gateways: dict[str, tuple[str, int]], squid: tuple[str, int],
                        target: str, pids: dict[str, int], origin_trust: ssl.SSLContext,
                        ca_trust: ssl.SSLContext) -> dict:
    """The HTTPS part: an origin speaking TLS (`target`), each gateway in `gateways` as a plain tunnel (client
    `bench`: TLS end to end) and intercepted (client `spy`: TLS to the gateway, trusting fleet's CA), and `squid`
    directly. The columns: "direct", then "NAME tunnel" and "NAME intercepted" per gateway."""
    out: dict = {}
    host = target.rsplit(":", 1)[0]
    cols: list[tuple[str, tuple[str, int], str | None, ssl.SSLContext, int]] = [
        ("direct", squid, None, origin_trust, pids["direct"])]
    for name, addr in gateways.items():
        cols += [(f"{name} tunnel", addr, AUTH, origin_trust, pids[name]),
                 (f"{name} intercepted", addr, SPY_AUTH, ca_trust, pids[name])]
    # a. first byte of a new connection: a warm-up connection per column first (the leaf is cached after it), then
    # `--intercept-connects` rounds, each column once per round (their difference is what counts: a drift in the
    # machine's load is shared, not charged to whichever column ran during it)
    lat: dict[str, list[float]] = {c[0]: [] for c in cols}
    for i in range(args.intercept_connects + 1):
        for name, addr, header, trust, _ in cols:
            _, w, dt = await https(addr, target, header, trust)
            if i:
                lat[name].append(dt * 1000)
            else:  # what the client negotiated (with the origin, or intercepted with the gateway)
                tls = w.get_extra_info("ssl_object")
                out[f"tls_{name}"] = f"{tls.version()} {tls.cipher()[0]}"
            w.close()
    for name, xs in lat.items():
        out[f"ttfb_{name}"] = (statistics.median(xs), pct(xs, 0.99))
    await asyncio.sleep(0.5)  # the gateway's releases
    # b, c. 1 MiB bodies on one connection per column, `--intercept-bodies` rounds of one body each, the columns
    # interleaved (as above: a drift of the machine's load falls on every column alike): MB/s, and the CPU of the
    # gateway (directly: of the Squid) per MB. Intercepted, the gateway's upstream is kept from one GET to the next.
    conns = [await https(addr, target, header, trust) for _, addr, header, trust, _ in cols]
    spent = [0.0] * len(cols)
    cpu = [0.0] * len(cols)
    total = [0] * len(cols)
    for _ in range(args.intercept_bodies):
        for i, (_, _, _, _, pid) in enumerate(cols):
            r, w, _ = conns[i]
            c0, t0 = tree_cpu_s(pid), time.perf_counter()
            total[i] += await get(r, w, host, "/big")
            spent[i] += time.perf_counter() - t0
            cpu[i] += tree_cpu_s(pid) - c0
    for i, (name, *_) in enumerate(cols):
        mb = total[i] / 1e6
        out[f"tls_body_{name}"] = (mb / spent[i], cpu[i] / mb)
        conns[i][1].close()
    await asyncio.sleep(0.5)
    return out


def start_proxypy(port: int, squids: list[tuple[str, int]], work: Path, acceptors: int) -> subprocess.Popen[bytes]:
    """proxy.py in its threadless mode (one event loop per acceptor process, no thread per connection: the
    mode its docs recommend and the one comparable to an asyncio relay), `acceptors` processes (default 1, like
    the one-process gateway; CPU and RSS are summed over them), its ProxyPoolPlugin chaining each connection
    to a random Squid, basic auth checked like the gateway's token. No leases, no Redis, no retries, no ban
    detection: the floor of what a plugin-based proxy costs, not a like-for-like."""
    cmd = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(port), "--threadless",
           "--num-acceptors", str(acceptors), "--backlog", "4096", "--timeout", "300", "--log-level", "WARNING",
           "--basic-auth", f"bench:{TOKEN}", "--plugins", "proxy.plugin.ProxyPoolPlugin"]
    for host, sport in squids:
        cmd += ["--proxy-pool", f"{host}:{sport}"]
    with open(work / "proxypy.log", "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def start_upstream(work: Path, *, env: dict[str, str], bought: contextlib.ExitStack,
                   procs: list[subprocess.Popen[bytes]], rport: int, ports: tuple[int, int], target: str,
                   squid: tuple[str, dict]) -> dict[str, Opener]:
    """The bought proxies (--upstream) on `ports`: an authenticated Squid (the local provider's, Basic auth added)
    and an authenticated microsocks, written as members of two upstream providers into Redis database 1 beside
    `squid` (one of ours: its key and endpoint), with a gateway of their own on that database (so the other columns
    never lease them, nor they those), which reads the bought ones' credentials from its secrets dir; its client
    picks the member by `-provider-`. The columns, to `target`: each member directly (with its credentials), and
    through that gateway (HTTP CONNECT)."""
    squid_port, socks_port = ports
    bought.enter_context(upstreams.auth_squid(str(work / "vendor-squid"), squid_port, UPSTREAM_USER, UPSTREAM_PASSWORD))
    bought.enter_context(upstreams.microsocks(socks_port, UPSTREAM_USER, UPSTREAM_PASSWORD))
    members = redis.Redis(port=rport, db=1)
    key, doc = squid
    member = {"squid": (key, doc["provider"])}
    members.hset(keys.PX_ENDPOINTS, key, json.dumps(doc))
    for kind, port in (("http", squid_port), ("socks5", socks_port)):
        member[kind] = (f"bought/{kind}", UPSTREAM_PROVIDERS[kind])
        bought_doc = upstream_endpoint(UPSTREAM_PROVIDERS[kind], f"{kind}://127.0.0.1:{port}", work / "secrets")
        members.hset(keys.PX_ENDPOINTS, member[kind][0], json.dumps(bought_doc))
    port = free_port()
    genv = {**env, "PYTHONPATH": str(ROOT), "FLEET_BROKER_URL": f"redis://127.0.0.1:{rport}/1",
            "FLEET_GATEWAY_BIND_ADDRESS": f"127.0.0.1:{port}",
            "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
            "FLEET_GATEWAY_UPSTREAM_SECRETS_DIR": str(work / "secrets")}
    with open(work / "upstream-gateway.log", "ab") as log:
        procs.append(subprocess.Popen([sys.executable, "-m", "fleet.cli", "gateway"], env=genv, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT))
    wait_port(port, "fleet gateway (upstream members)", work / "upstream-gateway.log")

    def through(kind: str) -> Opener:  # the gateway's 200 names the member, or the column stops
        key, provider = member[kind]
        header = basic(f"bench-provider-{provider}", TOKEN)
        return lambda i: tunnel(("127.0.0.1", port), target, True, header, via=key)

    creds = basic(UPSTREAM_USER, UPSTREAM_PASSWORD)
    return {"member-squid direct": lambda i: tunnel((doc["ip"], doc["port"]), target, False),
            "member-squid": through("squid"),
            "member-http direct": lambda i: tunnel(("127.0.0.1", squid_port), target, True, creds),
            "member-http": through("http"),
            "member-socks5 direct": lambda i: tunnel(("127.0.0.1", socks_port), target, "socks5",
                                                     socks_user=(UPSTREAM_USER, UPSTREAM_PASSWORD)),
            "member-socks5": through("socks5")}


def print_upstream(res: dict, tunnels: int) -> None:
    """Each member of the upstream columns' gateway through it against directly, and what the gateway adds to a
    bought member beside what it adds to the Squid member (the goal: no more)."""
    kinds = ["squid", *UPSTREAM_PROVIDERS]
    print("one member, CONNECT ms  " + " | ".join(
        f"{k} direct p50 {res[f'connect_member-{k} direct'][0]:.2f} p99 {res[f'connect_member-{k} direct'][1]:.2f}"
        f", gateway p50 {res[f'connect_member-{k}'][0]:.2f} p99 {res[f'connect_member-{k}'][1]:.2f}" for k in kinds))
    print("one member, req/s       " + " | ".join(
        f"{k} direct {res[f'rps_member-{k} direct']:.0f}, gateway {res[f'rps_member-{k}']:.0f}" for k in kinds)
          + f"  ({tunnels} tunnels each)")

    def added(k: str) -> str:
        (d50, d99), (g50, g99) = res[f"connect_member-{k} direct"], res[f"connect_member-{k}"]
        return (f"adds {g50 - d50:+.2f} ms p50, {g99 - d99:+.2f} ms p99, keeps "
                f"{res[f'rps_member-{k}'] / res[f'rps_member-{k} direct']:.2f}x req/s")

    for k in UPSTREAM_PROVIDERS:
        print(f"an upstream {k} member {added(k)}; the Squid member {added('squid')} (goal: no more than the Squid member)")


def upstream_endpoint(name: str, url: str, secrets: Path) -> dict:
    """A bought proxy's endpoint as the Proxy reconciler writes it for a member of the upstream provider `name`
    (list mode, `url`): the registry's dial hook adds its kind and the credentials reference (the provider's name);
    the credentials themselves go to `secrets/<name>/{username,password}`, where the gateway reads them."""
    (secrets / name).mkdir(parents=True)
    for f, value in (("username", UPSTREAM_USER), ("password", UPSTREAM_PASSWORD)):
        (secrets / name / f).write_text(value + "\n")
    cfg = UpstreamConfig(mode="list", proxies=[url], usernameFile=str(secrets / name / "username"),
                         passwordFile=str(secrets / name / "password"))
    doc = {"uid": str(uuid.uuid4()), "provider": name, "region": "r", "zone": "z", "instance": url}
    return doc | (registry.dial_facts("upstream", name, cfg, url) or {})


def wait_port(port: int, what: str, log: Path) -> None:
    for _ in range(400):
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port}; see {log}:\n{log.read_text()[-2000:]}")


def squid_ports(n: int) -> int:
    """The first of 50 loopback ports below the ephemeral range (32768 up, where this run's own client sockets
    land), the first `n` free now."""
    for lo in range(20000 + (os.getpid() % 200) * 50, 32000, 50):
        free = True
        for port in range(lo, lo + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            return lo
    raise SystemExit("no 50 free loopback ports from 20000 to 32000")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squids", type=int, default=4)
    p.add_argument("--connects", type=int, default=300)
    p.add_argument("--tunnels", type=int, default=200)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--bodies", type=int, default=100)
    p.add_argument("--open", type=int, default=1000)
    p.add_argument("--plain", type=int, default=20, help="keep-alive connections sending plain (absolute-URI) "
                                                           "requests for --seconds (0: not measured)")
    p.add_argument("--proxypy", action=argparse.BooleanOptionalAction,
                   default=importlib.util.find_spec("proxy") is not None,
                   help="a third column: proxy.py chaining to the same Squids (default: when it is installed, "
                        "pip install -e '.[bench]')")
    p.add_argument("--proxypy-acceptors", type=int, default=1, help="proxy.py's --num-acceptors (its default: cores)")
    p.add_argument("--haproxy", action=argparse.BooleanOptionalAction, default=None,
                   help="the relay's floor: HAProxy (mode tcp, nbthread 1) in front of the same Squids, in rounds "
                        "alternating with the gateway (default: when the haproxy binary is installed)")
    p.add_argument("--socks", action=argparse.BooleanOptionalAction, default=True,
                   help="a SOCKS5 column (the gateway's --gateway-socks-bind-address) in the CONNECT latency and "
                        "keep-alive requests/s")
    p.add_argument("--upstream", action=argparse.BooleanOptionalAction, default=True,
                   help="bought proxies as members: an authenticated Squid and an authenticated microsocks, each "
                        "directly and through a gateway of their own, in the CONNECT latency and keep-alive requests/s")
    p.add_argument("--intercept", action=argparse.BooleanOptionalAction, default=True,
                   help="the HTTPS part: an origin speaking TLS, directly, through the gateway as a plain tunnel, and "
                        "intercepted (a client with intercept: true, fleet's CA trusted)")
    p.add_argument("--intercept-connects", type=int, default=200,
                   help="new HTTPS connections per column (CONNECT, TLS, GET /), for the first byte's p50/p99")
    p.add_argument("--intercept-bodies", type=int, default=100,
                   help="1 MiB bodies over one HTTPS connection per column, for MB/s and CPU per MB")
    p.add_argument("--against", type=Path, help="a checkout of another commit (git worktree add DIR REV): its "
                                                 "`fleet gateway` measured too, as a column of the same run")
    args = p.parse_args()
    if args.haproxy is None:
        args.haproxy = haproxy_binary() is not None
        if not args.haproxy:
            print("haproxy is not installed: the HAProxy column is left out (apt-get install haproxy; "
                  "ci/apt-packages.txt)", file=sys.stderr)
    elif args.haproxy and not haproxy_binary():
        raise SystemExit("--haproxy: haproxy is not installed (apt-get install haproxy; ci/apt-packages.txt)")
    load0 = os.getloadavg()
    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit("redis-server is not installed (make deps installs it)")
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-gw-"))
    os.chmod(work, 0o755)
    procs: list[subprocess.Popen[bytes]] = []
    bought = contextlib.ExitStack()  # the authenticated Squid and microsocks (--upstream)
    provider = None
    made: list[str] = []
    try:
        rport, oport, gport, mport, pport = free_port(), free_port(), free_port(), free_port(), free_port()
        sport = free_port()
        tport = free_port()  # the origin's TLS listener (--intercept)
        procs.append(subprocess.Popen([binary, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no"], stdout=subprocess.DEVNULL))
        origin_args = [str(oport)]
        if args.intercept:
            # fleet's CA as a user makes it (`fleet ca` prints its certificate), and the origin's own self-signed
            # certificate for 127.0.0.1, which the gateway trusts through --gateway-origin-ca-file
            made_ca = subprocess.run([sys.executable, "-m", "fleet.cli", "ca", "--gateway-ca-dir", str(work / "ca")],
                                     capture_output=True, text=True, timeout=120, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
            if made_ca.returncode != 0:
                raise SystemExit(f"fleet ca failed: {made_ca.stderr[-2000:]}")
            (work / "origin").mkdir()
            origin_cert, origin_key = self_signed(work / "origin", "127.0.0.1")
            origin_args += [str(tport), str(origin_cert), str(origin_key)]
        with open(work / "origin.log", "ab") as log:
            procs.append(subprocess.Popen([sys.executable, "-c", ORIGIN, *origin_args], stdout=log,
                                          stderr=subprocess.STDOUT))
        r = redis.Redis(port=rport)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if r.ping():
                    break
            time.sleep(0.05)
        lo = squid_ports(args.squids + (2 if args.upstream else 0))
        provider = LocalProvider("bench", LocalConfig.model_validate({"stateDir": str(work / "squid"),
                                                                       "portRange": f"{lo}-{lo + 49}"}))
        squids = []
        endpoints: dict[str, dict] = {}
        for i in range(args.squids):
            uid = str(uuid.uuid4())
            pid_id = provider.create(CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="bench",
                                                   proxy_name=f"p{i}", port=lo + i), Deadline.after(30))
            made.append(pid_id)
            squids.append(("127.0.0.1", lo + i))
            endpoints[f"bench/p{i}"] = {"uid": uid, "ip": "127.0.0.1", "port": lo + i, "provider": "bench",
                                        "region": "r", "zone": "z", "instance": pid_id}
            r.hset(keys.PX_ENDPOINTS, f"bench/p{i}", json.dumps(endpoints[f"bench/p{i}"]))
        deadline = time.monotonic() + 30
        for s in squids:
            while True:
                try:
                    socket.create_connection(s, 0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"squid on {s} did not start") from None
                    time.sleep(0.1)
        squid_pids = []
        for pid_id in made:
            name = pid_id.split("/", 1)[1]
            squid_pids.append(json.loads((work / "squid" / f"{name}.json").read_text())["pid"])
        clients = work / "clients.yaml"
        bench_client = {"token": TOKEN, "ports": "*", "maxTunnels": 100000}
        clients.write_text(json.dumps({"clients": {"bench": bench_client}}))
        # the gateways that intercept: a second client asking for it, fleet's CA, the origin's certificate trusted
        # (an --against checkout from before interception gets the clients file it can read, and no HTTPS part)
        spy_clients = work / "clients-intercept.yaml"
        spy_clients.write_text(json.dumps({"clients": {"bench": bench_client, "spy": {
            "token": SPY_TOKEN, "ports": "*", "maxTunnels": 100000, "intercept": True}}}))
        intercepting: dict[str, tuple[str, int]] = {}
        env = {**os.environ, "FLEET_BROKER_URL": f"redis://127.0.0.1:{rport}/0",
               "FLEET_GATEWAY_BIND_ADDRESS": f"127.0.0.1:{gport}", "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{mport}",
               "FLEET_GATEWAY_CLIENTS_FILE": str(clients), "FLEET_MAX_LEASES_PER_PROXY": "10000",
               "FLEET_GATEWAY_MAX_CONNECTIONS_PER_CLIENT": "100000", "FLEET_LOG_LEVEL": "warning"}
        proxies: dict[str, tuple[str, int] | None] = {}
        pids = {"direct": squid_pids[0]}
        for name, code in (("gateway", ROOT), ("against", args.against)):
            if code is None:
                continue
            port = gport if name == "gateway" else free_port()
            genv = {**env, "PYTHONPATH": str(code.resolve()), "FLEET_GATEWAY_BIND_ADDRESS": f"127.0.0.1:{port}",
                    "FLEET_GATEWAY_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port() if name == 'against' else mport}"}
            if name == "gateway" and args.socks:
                genv["FLEET_GATEWAY_SOCKS_BIND_ADDRESS"] = f"127.0.0.1:{sport}"
            intercepts = args.intercept and (code / "fleet" / "gateway" / "intercept.py").exists()
            if intercepts:
                genv |= {"FLEET_GATEWAY_CLIENTS_FILE": str(spy_clients), "FLEET_GATEWAY_CA_DIR": str(work / "ca"),
                         "FLEET_GATEWAY_ORIGIN_CA_FILE": str(origin_cert)}
            with open(work / f"{name}.log", "ab") as log:
                gw = subprocess.Popen([sys.executable, "-m", "fleet.cli", "gateway"], env=genv, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True, cwd=code)
            procs.append(gw)
            wait_port(port, f"fleet gateway ({code})", work / f"{name}.log")
            proxies[name] = ("127.0.0.1", port)
            pids[name] = gw.pid
            if intercepts:
                intercepting[name] = ("127.0.0.1", port)
        extra: dict[str, Opener] = {}
        if args.upstream:
            extra = start_upstream(work, env=env, bought=bought, procs=procs, rport=rport,
                                   ports=(lo + args.squids, lo + args.squids + 1), target=f"127.0.0.1:{oport}",
                                   squid=("bench/p0", endpoints["bench/p0"]))
        if args.proxypy:
            pp = start_proxypy(pport, squids, work, args.proxypy_acceptors)
            procs.append(pp)
            wait_port(pport, "proxy.py", work / "proxypy.log")
            proxies["proxy.py"] = ("127.0.0.1", pport)
            pids["proxy.py"] = pp.pid
        hport = free_port()
        if args.haproxy:
            haproxy = start_haproxy(hport, squids, work)
            procs.append(haproxy)
            wait_port(hport, "haproxy", work / "haproxy.log")
            pids["haproxy"] = haproxy.pid
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        # The origin by name, not 127.0.0.1: proxy.py's pool plugin sends a private-IP target straight to it
        # and not through the pool (before_upstream_connection), which would measure no Squid at all.
        res = asyncio.run(run(args, proxies, squids, f"localhost:{oport}", pids,
                              ("127.0.0.1", sport) if args.socks else None, extra))
        if args.haproxy:
            target = f"localhost:{oport}"
            floor: dict[str, tuple[Opener, int | None]] = {
                "gateway": (lambda i: tunnel(("127.0.0.1", gport), target, True), pids["gateway"]),
                "haproxy": (lambda i: tunnel(("127.0.0.1", hport), target, False), pids["haproxy"])}
            if args.socks:
                floor["socks5"] = (lambda i: tunnel(("127.0.0.1", sport), target, "socks5"), pids["gateway"])
            floor["direct"] = (lambda i: tunnel(squids[i % len(squids)], target, False), None)
            floor_load0 = os.getloadavg()
            res |= asyncio.run(run_floor(args, floor, "localhost"))
            floor_load = (floor_load0, os.getloadavg())
        if intercepting:
            wait_port(tport, "the origin's TLS listener", work / "origin.log")
            # the certificates name 127.0.0.1 (the origin's, and the leaf the gateway makes for the CONNECT's host)
            res |= asyncio.run(run_intercept(args, intercepting, squids[0], f"127.0.0.1:{tport}", pids,
                                             ssl.create_default_context(cafile=str(origin_cert)),
                                             ssl.create_default_context(cafile=str(work / "ca" / "ca.crt"))))
        load1 = os.getloadavg()
    finally:
        stop(procs)
        bought.close()
        if provider is not None:
            for pid_id in made:
                with contextlib.suppress(Exception):
                    provider.delete(pid_id, Deadline.after(10))
        shutil.rmtree(work, ignore_errors=True)
    names = ["direct", *proxies]
    tunnel_names = names + (["socks5"] if args.socks else [])
    d50, d99 = res["connect_direct"]
    print("CONNECT latency ms      " + " | ".join(
        f"{n} p50 {res[f'connect_{n}'][0]:.2f} p99 {res[f'connect_{n}'][1]:.2f}"
        + ("" if n == "direct" else f" (added {res[f'connect_{n}'][0] - d50:+.2f} / {res[f'connect_{n}'][1] - d99:+.2f})")
        for n in tunnel_names))
    print(f"req/s, {args.tunnels} tunnels     " + " | ".join(
        f"{n} {res[f'rps_{n}']:.0f}" + ("" if n == "direct" else f" ({res[f'rps_{n}'] / res['rps_direct']:.2f}x)")
        for n in tunnel_names))
    if args.socks:
        (s50, s99), (g50, g99) = res["connect_socks5"], res["connect_gateway"]
        print(f"socks5 vs the gateway's HTTP CONNECT: handshake to tunnel {s50 - g50:+.2f} ms p50, {s99 - g99:+.2f} ms "
              f"p99; keep-alive req/s {res['rps_socks5'] / res['rps_gateway']:.2f}x")
    if args.plain:
        print(f"plain req/s, {args.plain} conns  " + " | ".join(
            f"{n} {res[f'plain_{n}']:.0f}" + ("" if n == "direct" else f" ({res[f'plain_{n}'] / res['plain_direct']:.2f}x)")
            for n in names))
    dm = res["body_direct"][0]
    print("1 MiB bodies MB/s       " + " | ".join(
        f"{n} {res[f'body_{n}'][0]:.0f}" + ("" if n == "direct" else f" ({res[f'body_{n}'][0] / dm:.2f}x)")
        for n in names))
    print("CPU ms per MB           " + " | ".join(
        f"{'squid' if n == 'direct' else n} {res[f'body_{n}'][1] * 1000:.2f}" for n in names))
    for n in proxies:
        b, rss, k = res[f"rss_{n}"]
        print(f"{n + ' RSS':<24}{b:.0f} MiB idle, {rss:.0f} MiB with {k} tunnels open "
              f"({(rss - b) * 1024 / max(k, 1):.1f} KiB each)")
    if intercepting:
        cols = ["direct", *(f"{g} {kind}" for g in intercepting for kind in ("tunnel", "intercepted"))]
        print("HTTPS origin (ECDSA P-256 certificates): direct = a Squid's CONNECT; tunnel = client bench's CONNECT "
              "through the gateway, TLS end to end; intercepted = client spy (intercept: true), TLS to the gateway "
              "and the gateway's own to the origin; the client's TLS: "
              + ", ".join(f"{c} {res[f'tls_{c}']}" for c in cols))
        print("first byte, new conn ms " + " | ".join(
            f"{c} p50 {res[f'ttfb_{c}'][0]:.2f} p99 {res[f'ttfb_{c}'][1]:.2f}" for c in cols)
              + f"  ({args.intercept_connects} each, leaf cached)")
        for g in intercepting:
            (t50, t99), (i50, i99) = res[f"ttfb_{g} tunnel"], res[f"ttfb_{g} intercepted"]
            print(f"{g}: interception adds {i50 - t50:+.2f} ms p50, {i99 - t99:+.2f} ms p99 to the first byte "
                  f"over the plain tunnel (goal: <= 5 ms)")
        dm = res["tls_body_direct"][0]
        print("HTTPS 1 MiB bodies MB/s " + " | ".join(
            f"{c} {res[f'tls_body_{c}'][0]:.0f}" + ("" if c == "direct" else f" ({res[f'tls_body_{c}'][0] / dm:.2f}x)")
            for c in cols) + f"  ({args.intercept_bodies} on one connection; intercepted: the gateway's upstream "
                             f"kept between them)")
        for g in intercepting:
            ratio = res[f"tls_body_{g} intercepted"][0] / res[f"tls_body_{g} tunnel"][0]
            print(f"{g}: intercepted/tunnel {ratio:.2f}x the plain tunnel's throughput (goal: >= 0.7x)")
        print("HTTPS CPU ms per MB     " + " | ".join(
            f"{'squid' if c == 'direct' else c} {res[f'tls_body_{c}'][1] * 1000:.2f}" for c in cols)
              + "  (the gateway process; directly: the Squid)")
    if args.upstream:
        print_upstream(res, args.tunnels)
    if args.haproxy:
        print_floor(res, [n for n in ("gateway", "haproxy", "socks5", "direct") if f"floor_{n}" in res], floor_load,
                    len(squids), args.tunnels)
    print(f"load average             before {' '.join(f'{x:.2f}' for x in load0)}, after "
          f"{' '.join(f'{x:.2f}' for x in load1)} (1, 5, 15 min), {os.cpu_count()} cores")
    if "proxy.py" in proxies:
        print(f"proxy.py: threadless, {args.proxypy_acceptors} acceptor(s), ProxyPoolPlugin (a random Squid per connection) + "
              "basic auth; no leases, Redis, retries or ban detection: the floor of a plugin-based proxy, not a like-for-like")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
