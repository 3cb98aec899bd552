"""The lease API at load (issue 14): lease+release operations per second
through two `fleet api` processes sharing one real redis-server.

- N proxies written straight into Redis (`fleet:px:endpoints`, as the
  controller keeps them for Running Proxies), `--max-per-proxy` leases each;
- `--api-procs` API processes (`python -m fleet.cli api`, the command
  `fleet api` runs, with a bearer token);
- C concurrent clients in this process (uvloop, one keep-alive HTTP/1.1
  connection each, alternating between the API processes, a minimal HTTP
  client so the client's own CPU stays small): each loops lease → (hold
  `--hold` seconds) → release.

Reported: operations (one lease + its release) per second, requests per
second, latency p50/p99/max of each request and of each operation, the
answers by status, capacity violations and CPU (% of one core) of each API
process, Redis and the client.

A violation is counted when a client receives a lease on a proxy that
already holds `--max-per-proxy` leases by the clients' own account, each
lease counted from the moment its grant arrived to the moment its release is
sent: in that window it is certainly open in Redis, so every violation
counted is real. A sampler also reads the load set every 20 ms for a proxy
over the limit.

    python benchmarks/leases.py                       # 200 proxies, 16 clients, 20 s
    python benchmarks/leases.py -n 50 -c 200 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import redis  # noqa: E402

from benchmarks.procstats import cpu_s, free_port, stop  # noqa: E402
from fleet.store import keys  # noqa: E402
from fleet.store.leases import LOAD  # noqa: E402

TOKEN = "bench-token-0123456789abcdef0123456789"






def quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout}s")


class Tally:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.holders: Counter[str] = Counter()
        self.violations = 0
        self.statuses: Counter[str] = Counter()
        self.request_ms: list[float] = []
        self.op_ms: list[float] = []
        self.ops = 0
        self.measuring = False

    def reset(self) -> None:
        self.statuses.clear()
        self.request_ms.clear()
        self.op_ms.clear()
        self.ops = 0


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    at = head.find(b"content-length: ")
    length = int(head[at + 16:head.index(b"\r\n", at)]) if at >= 0 else 0
    return status, await reader.readexactly(length)


def request(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def client(port: int, tally: Tally, stop: asyncio.Event, hold: float, ttl: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lease_req = request("/v1/leases", orjson.dumps({"target": "example.com", "ttl": ttl}))
    clock = time.perf_counter
    try:
        while not stop.is_set():
            t0 = clock()
            writer.write(lease_req)
            status, body = await read_response(reader)
            t1 = clock()
            if tally.measuring:
                tally.request_ms.append((t1 - t0) * 1000)
                tally.statuses[f"lease {status}"] += 1
            if status != 200:
                await asyncio.sleep(0.005)
                continue
            doc = orjson.loads(body)
            proxy = doc["proxy"]
            if tally.holders[proxy] >= tally.limit:
                tally.violations += 1
            tally.holders[proxy] += 1
            if hold:
                await asyncio.sleep(hold)
            tally.holders[proxy] -= 1
            t2 = clock()
            writer.write(request(f"/v1/leases/{doc['lease']}/release", b""))
            status, _ = await read_response(reader)
            t3 = clock()
            if tally.measuring:
                tally.request_ms.append((t3 - t2) * 1000)
                tally.op_ms.append((t3 - t2 + t1 - t0) * 1000)
                tally.statuses[f"release {status}"] += 1
                tally.ops += 1
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def sampler(url: str, limit: int, stop: threading.Event, found: list[int]) -> None:
    r = redis.Redis.from_url(url)
    try:
        while not stop.is_set():
            over = r.zrangebyscore(LOAD, f"({limit}", "+inf")
            found[0] += len(over)
            found[1] += 1
            stop.wait(0.02)
    finally:
        r.close()


async def drive(ports: list[int], args: argparse.Namespace, tally: Tally, pids: dict[str, int]) -> dict[str, float]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(client(ports[i % len(ports)], tally, stop, args.hold, args.ttl))
             for i in range(args.clients)]
    await asyncio.sleep(args.warmup)
    tally.reset()
    cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
    own0 = sum(os.times()[:2])
    t0 = time.monotonic()
    tally.measuring = True
    await asyncio.sleep(args.seconds)
    tally.measuring = False
    elapsed = time.monotonic() - t0
    cpu = {name: 100 * (cpu_s(pid) - cpu0[name]) / elapsed for name, pid in pids.items()}
    cpu["client"] = 100 * (sum(os.times()[:2]) - own0) / elapsed
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    cpu["elapsed"] = elapsed
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--proxies", type=int, default=200)
    ap.add_argument("-c", "--clients", type=int, default=16)
    ap.add_argument("--api-procs", type=int, default=2)
    ap.add_argument("--max-per-proxy", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--hold", type=float, default=0.0, help="seconds a client holds each lease before releasing it")
    ap.add_argument("--ttl", type=int, default=60)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    args = ap.parse_args()

    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit("redis-server is not installed (make deps installs it)")
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-leases-"))
    rport = free_port()
    url = f"redis://127.0.0.1:{rport}/0"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        rs = subprocess.Popen([binary, "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(rs)
        r = redis.Redis.from_url(url)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if r.ping():
                    break
            time.sleep(0.05)
        r.hset(keys.PX_ENDPOINTS, mapping={
            f"bench/p{i:05d}": json.dumps({"uid": f"uid-{i}", "ip": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                                           "port": 3128, "provider": "lab", "region": "r1", "zone": f"z{i % 3}"})
            for i in range(args.proxies)})
        ports = [free_port() for _ in range(args.api_procs)]
        pids = {"redis": rs.pid}
        for i, port in enumerate(ports):
            env = {**os.environ, "FLEET_BROKER_URL": url, "FLEET_API_BIND_ADDRESS": f"127.0.0.1:{port}",
                   "FLEET_API_TOKEN": TOKEN, "FLEET_MAX_LEASES_PER_PROXY": str(args.max_per_proxy),
                   "FLEET_LOG_LEVEL": "warning"}
            log = open(tmp / f"api-{i}.log", "wb")  # noqa: SIM115  # closed with the process
            p = subprocess.Popen([sys.executable, "-m", "fleet.cli", "api"], env=env, stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            pids[f"api{i}"] = p.pid
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz")

        tally = Tally(args.max_per_proxy)
        found = [0, 0]
        stop_sampler = threading.Event()
        th = threading.Thread(target=sampler, args=(url, args.max_per_proxy, stop_sampler, found), daemon=True)
        th.start()
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        cpu = runner(drive(ports, args, tally, pids))
        stop_sampler.set()
        th.join(5)
        elapsed = cpu.pop("elapsed")
        over_now = r.zrangebyscore(LOAD, f"({args.max_per_proxy}", "+inf")
        r.close()
        figures = {
            "proxies": args.proxies, "clients": args.clients, "api_processes": args.api_procs,
            "max_per_proxy": args.max_per_proxy, "seconds": round(elapsed, 1),
            "ops_per_s": round(tally.ops / elapsed), "requests_per_s": round(len(tally.request_ms) / elapsed),
            "request_p50_ms": round(quantile(tally.request_ms, 0.5), 2),
            "request_p99_ms": round(quantile(tally.request_ms, 0.99), 2),
            "request_max_ms": round(max(tally.request_ms, default=0.0), 2),
            "op_p50_ms": round(quantile(tally.op_ms, 0.5), 2), "op_p99_ms": round(quantile(tally.op_ms, 0.99), 2),
            "violations": tally.violations, "load_over_limit_samples": found[0], "samples": found[1],
            "load_over_limit_at_end": len(over_now), "answers": dict(sorted(tally.statuses.items())),
            "cpu_percent": {k: round(v) for k, v in cpu.items()},
        }
        print(f"lease API: {args.proxies} proxies (max {args.max_per_proxy} lease each), {args.clients} clients, "
              f"{args.api_procs} API processes, one Redis, {elapsed:.1f} s measured")
        print(f"  lease+release operations/s  {figures['ops_per_s']:>8}   (requests/s {figures['requests_per_s']})")
        print(f"  request latency ms          p50 {figures['request_p50_ms']}  p99 {figures['request_p99_ms']}  "
              f"max {figures['request_max_ms']}")
        print(f"  operation latency ms        p50 {figures['op_p50_ms']}  p99 {figures['op_p99_ms']}")
        print(f"  capacity violations         {tally.violations} (client-side), {found[0]} in {found[1]} load samples, "
              f"{len(over_now)} at the end")
        print(f"  answers                     {figures['answers']}")
        print("  CPU % of one core           " + "  ".join(f"{k} {v}" for k, v in figures["cpu_percent"].items()))
        if args.json:
            print(json.dumps(figures))
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
