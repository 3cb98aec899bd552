"""The lease API at load (issue 14), against its floor (issue 24):
lease+release operations per second through two `fleet api` processes
sharing one real redis-server, and the same load on two processes of a bare
ASGI app (benchmarks/leases_floor.py: uvicorn + uvloop + httptools with
fleet api's settings, one Lua call per request) in the same run.

- N proxies written straight into Redis (`fleet:px:endpoints`, as the
  controller keeps them for Running Proxies), `--max-per-proxy` leases each;
- `--api-procs` API processes (`python -m fleet.cli api`, the command
  `fleet api` runs, with a bearer token) and as many floor processes;
- for each client count C (`-c 16 64`): C concurrent clients in this process
  (uvloop, one keep-alive HTTP/1.1 connection each, alternating between the
  processes, a minimal HTTP client so the client's own CPU stays small) loop
  lease → (hold `--hold` seconds) → release, in `--rounds` windows on each
  side, alternating (fleet, floor, floor, fleet, …) so that neither always
  runs first on a machine whose load moves.

Reported per client count, fleet / floor / ratio: operations (one lease + its
release) per second, request latency p50/p99, API CPU per operation (all API
processes) and redis-server CPU per operation, Redis commands per operation
(INFO commandstats over the window, Lua's own calls included), the load
average; for fleet also the answers by status and capacity violations. Then
Redis commands per request of each kind (lease, report, renew, release: 200
sequential requests each, INFO commandstats deltas).

A violation is counted when a client receives a lease on a proxy that
already holds `--max-per-proxy` leases by the clients' own account, each
lease counted from the moment its grant arrived to the moment its release is
sent: in that window it is certainly open in Redis, so every violation
counted is real. A sampler also reads the load set every 20 ms for a proxy
over the limit.

    python benchmarks/leases.py                       # 200 proxies, 16 and 64 clients, 2 × 5 s each side
    python benchmarks/leases.py -n 50 -c 200 --seconds 10 --no-floor
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
from typing import Any

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
    def __init__(self, limit: int, check: bool = True) -> None:
        self.limit = limit
        self.check = check  # count capacity violations (fleet; the floor has no capacity)
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
            if tally.check and tally.holders[proxy] >= tally.limit:
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


def sampler(url: str, limit: int, stop: threading.Event, on: threading.Event, found: list[int]) -> None:
    """Read the load set every 20 ms while `on` (fleet's windows): samples of a proxy over the limit."""
    r = redis.Redis.from_url(url)
    try:
        while not stop.is_set():
            if on.is_set():
                over = r.zrangebyscore(LOAD, f"({limit}", "+inf")
                found[0] += len(over)
                found[1] += 1
            stop.wait(0.02)
    finally:
        r.close()


def commandstats(r: redis.Redis) -> Counter[str]:
    """Calls by command since the last CONFIG RESETSTAT (Lua's own calls included), without the
    benchmark's INFO and CONFIG."""
    got: Counter[str] = Counter()
    for name, stats in r.info("commandstats").items():
        cmd = name.removeprefix("cmdstat_")
        if cmd not in ("info", "config|resetstat", "config"):
            got[cmd] = int(stats["calls"])
    return got


class Side:
    """One side (fleet or the floor) at one client count, summed over its measured windows."""

    def __init__(self, ports: list[int], pids: dict[str, int], tally: Tally, profile: Path | None = None) -> None:
        self.ports, self.pids, self.tally = ports, pids, tally
        self.first_pid = next(pid for name, pid in pids.items() if name != "redis")
        self.profile, self.profiled, self.profile_ops = profile, False, 0  # py-spy of first_pid in the first window
        self.elapsed = 0.0
        self.cpu: Counter[str] = Counter()
        self.commands: Counter[str] = Counter()
        self.loads: list[float] = []
        self.over_limit = 0

    def figures(self, clients: int) -> dict[str, Any]:
        t, elapsed, ops = self.tally, self.elapsed, max(1, self.tally.ops)
        api = sum(v for k, v in self.cpu.items() if k not in ("redis", "client"))
        return {
            "clients": clients, "seconds": round(elapsed, 1), "ops_per_s": round(t.ops / elapsed),
            "requests_per_s": round(len(t.request_ms) / elapsed),
            "request_p50_ms": round(quantile(t.request_ms, 0.5), 2),
            "request_p99_ms": round(quantile(t.request_ms, 0.99), 2),
            "request_max_ms": round(max(t.request_ms, default=0.0), 2),
            "op_p50_ms": round(quantile(t.op_ms, 0.5), 2), "op_p99_ms": round(quantile(t.op_ms, 0.99), 2),
            "api_cpu_ms_per_op": round(1000 * api / ops, 3),
            "redis_cpu_ms_per_op": round(1000 * self.cpu["redis"] / ops, 3),
            "redis_commands_per_op": round(sum(self.commands.values()) / ops, 2),
            "commands": {k: round(v / ops, 2) for k, v in sorted(self.commands.items()) if v},
            "cpu_percent": {k: round(100 * v / elapsed) for k, v in self.cpu.items()},
            "answers": dict(sorted(t.statuses.items())), "violations": t.violations,
            "load_over_limit_samples": self.over_limit, "load_average": [round(x, 2) for x in self.loads],
            **({"profile": layers(self.profile, self.profile_ops / len(self.ports))} if self.profile else {}),
        }


async def drive(side: Side, clients: int, args: argparse.Namespace, r: redis.Redis, sampling: threading.Event,
                found: list[int]) -> None:
    """One measured window of `clients` clients on `side`, added to its sums."""
    tally = side.tally
    stop = asyncio.Event()
    tasks = [asyncio.create_task(client(side.ports[i % len(side.ports)], tally, stop, args.hold, args.ttl))
             for i in range(clients)]
    await asyncio.sleep(args.warmup)
    side.loads.append(os.getloadavg()[0])
    cpu0 = {name: cpu_s(pid) for name, pid in side.pids.items()}
    own0 = sum(os.times()[:2])
    spy = None
    if side.profile is not None and not side.profiled:  # the first window: its first process, sampled
        side.profiled = True
        spy = subprocess.Popen([PY_SPY, "record", "--pid", str(side.first_pid), "--rate", str(SPY_RATE),
                                "--duration", str(int(args.seconds)), "--nonblocking", "--gil", "--format", "raw",
                                "--output", str(side.profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(0.5)  # attached
    r.config_resetstat()
    samples0, over0 = found[1], found[0]
    t0 = time.monotonic()
    ops0 = tally.ops
    tally.measuring = True
    if tally.check:
        sampling.set()
    await asyncio.sleep(args.seconds)
    tally.measuring = False
    sampling.clear()
    side.elapsed += time.monotonic() - t0
    for name, pid in side.pids.items():
        side.cpu[name] += cpu_s(pid) - cpu0[name]
    side.cpu["client"] += sum(os.times()[:2]) - own0
    commands = commandstats(r)
    commands["zrangebyscore"] -= found[1] - samples0  # the sampler's own reads
    side.commands.update(commands)
    side.over_limit += found[0] - over0
    side.loads.append(os.getloadavg()[0])
    if spy is not None:
        side.profile_ops = tally.ops - ops0
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    if spy is not None:
        spy.wait(30)


async def per_request(port: int, r: redis.Redis, n: int, floor: bool) -> dict[str, dict[str, float]]:
    """Redis commands per request of each kind: n sequential requests on one connection, INFO commandstats
    deltas (the API's own background checks, a script every 2 s, may add a hundredth)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def call(path: str, body: bytes) -> bytes:
        writer.write(request(path, body))
        status, got = await read_response(reader)
        if status != 200:
            raise SystemExit(f"{path}: {status} {got[:200]!r}")
        return got

    out: dict[str, dict[str, float]] = {}

    async def kind(name: str, reqs: list[tuple[str, bytes]]) -> list[bytes]:
        r.config_resetstat()
        answers = [await call(path, body) for path, body in reqs]
        got = commandstats(r)
        out[name] = {"total": round(sum(got.values()) / n, 2), **{k: round(v / n, 2) for k, v in sorted(got.items())}}
        return answers

    lease = orjson.dumps({"target": "example.com", "ttl": 60})
    ids = [orjson.loads(a)["lease"] for a in await kind("lease", [("/v1/leases", lease)] * n)]
    if not floor:
        await kind("report", [("/v1/reports", orjson.dumps({"lease": i, "outcome": "ok"})) for i in ids])
        await kind("renew", [(f"/v1/leases/{i}/renew", b"") for i in ids])
    await kind("release", [(f"/v1/leases/{i}/release", b"") for i in ids])
    writer.close()
    return out


PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
SPY_RATE = 250
# (layer, what the innermost frame's file contains), first match wins
LAYERS = (("fleet.httpguard", "fleet/httpguard.py"), ("fleet.leases (app, decide, requests)", "fleet/leases/"),
          ("fleet.store.leases", "fleet/store/"), ("other fleet", "fleet/"), ("the floor's app", "leases_floor.py"),
          ("uvicorn", "uvicorn/"), ("redis-py", "redis/"), ("asyncio (Python)", "asyncio/"),
          ("the loop's C code (uvloop, httptools, sockets)", "asyncio/runners.py"), ("uuid", "uuid.py"),
          ("opentelemetry", "opentelemetry"), ("contextlib", "contextlib.py"))


def layers(path: Path | None, ops: float) -> dict[str, float]:
    """µs per operation of one process by layer, from py-spy's collapsed stacks (self time of the
    innermost frame; the loop's own C code shows as Runner.run, the frame that calls it)."""
    if path is None or not path.exists() or ops <= 0:
        return {}
    got: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        inner = stack.rsplit(";", 1)[-1]
        where = inner[inner.rfind("(") + 1:] if "(" in inner else inner
        if "asyncio/runners.py" in where:
            layer = LAYERS[8][0]
        else:
            layer = next((name for name, part in LAYERS if part in where and part != "asyncio/runners.py"), "other")
        got[layer] += int(count)
    return {k: round(v / SPY_RATE / ops * 1e6, 1) for k, v in got.most_common()}


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--proxies", type=int, default=200)
    ap.add_argument("-c", "--clients", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--api-procs", type=int, default=2)
    ap.add_argument("--max-per-proxy", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds of each measured window")
    ap.add_argument("--rounds", type=int, default=2, help="windows of each side per client count, alternating")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--hold", type=float, default=0.0, help="seconds a client holds each lease before releasing it")
    ap.add_argument("--ttl", type=int, default=60)
    ap.add_argument("--no-floor", action="store_true", help="fleet alone")
    ap.add_argument("--per-request", type=int, default=200, help="requests of each kind for commands per request (0: none)")
    ap.add_argument("--profile", metavar="DIR", help="py-spy the first process of each side in its first window (collapsed "
                    "stacks into DIR, and µs per operation by layer in the report); pip install py-spy")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    args = ap.parse_args()
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)

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
        fleet_ports = [free_port() for _ in range(args.api_procs)]
        floor_ports = [] if args.no_floor else [free_port() for _ in range(args.api_procs)]
        fleet_pids, floor_pids = {"redis": rs.pid}, {"redis": rs.pid}
        for i, port in enumerate(fleet_ports):
            env = {**os.environ, "FLEET_BROKER_URL": url, "FLEET_API_BIND_ADDRESS": f"127.0.0.1:{port}",
                   "FLEET_API_TOKEN": TOKEN, "FLEET_MAX_LEASES_PER_PROXY": str(args.max_per_proxy),
                   "FLEET_LOG_LEVEL": "warning"}
            log = open(tmp / f"api-{i}.log", "wb")  # noqa: SIM115  # closed with the process
            p = subprocess.Popen([sys.executable, "-m", "fleet.cli", "api"], env=env, stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            fleet_pids[f"api{i}"] = p.pid
        for i, port in enumerate(floor_ports):
            log = open(tmp / f"floor-{i}.log", "wb")  # noqa: SIM115  # closed with the process
            p = subprocess.Popen([sys.executable, "-m", "benchmarks.leases_floor", url, str(port), str(args.proxies)],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            floor_pids[f"floor{i}"] = p.pid
        for port in fleet_ports + floor_ports:
            wait_http(f"http://127.0.0.1:{port}/healthz")

        found = [0, 0]
        stop_sampler, sampling = threading.Event(), threading.Event()
        th = threading.Thread(target=sampler, args=(url, args.max_per_proxy, stop_sampler, sampling, found), daemon=True)
        th.start()
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        runs: list[dict[str, Any]] = []
        for clients in args.clients:
            prof = Path(args.profile) if args.profile else None
            fleet = Side(fleet_ports, fleet_pids, Tally(args.max_per_proxy), prof and prof / f"fleet-{clients}.txt")
            floor = (Side(floor_ports, floor_pids, Tally(args.max_per_proxy, check=False), prof and prof / f"floor-{clients}.txt")
                     if floor_ports else None)
            for i in range(args.rounds):
                # fleet, floor, floor, fleet, ...: neither side always runs first
                for side in ((fleet, floor) if i % 2 == 0 else (floor, fleet)):
                    if side is not None:
                        runner(drive(side, clients, args, r, sampling, found))
            run: dict[str, Any] = {"clients": clients, "fleet": fleet.figures(clients)}
            if floor is not None:
                run["floor"] = floor.figures(clients)
            runs.append(run)
        stop_sampler.set()
        th.join(5)
        per: dict[str, Any] = {}
        if args.per_request:
            n = min(args.per_request, args.proxies * args.max_per_proxy)  # leases held at once: all must be granted
            per["fleet"] = runner(per_request(fleet_ports[0], r, n, floor=False))
            if floor_ports:
                per["floor"] = runner(per_request(floor_ports[0], r, n, floor=True))
        over_now = r.zrangebyscore(LOAD, f"({args.max_per_proxy}", "+inf")
        r.close()
        report(args, runs, per, len(over_now))
        if args.json:
            print(json.dumps({"proxies": args.proxies, "api_processes": args.api_procs,
                              "max_per_proxy": args.max_per_proxy, "runs": runs, "per_request": per,
                              "load_over_limit_at_end": len(over_now)}))
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


ROWS = (("lease+release ops/s", "ops_per_s"), ("request p50 ms", "request_p50_ms"),
        ("request p99 ms", "request_p99_ms"), ("operation p50 ms", "op_p50_ms"), ("operation p99 ms", "op_p99_ms"),
        ("API CPU ms / op", "api_cpu_ms_per_op"), ("Redis CPU ms / op", "redis_cpu_ms_per_op"),
        ("Redis commands / op", "redis_commands_per_op"))


def report(args: argparse.Namespace, runs: list[dict[str, Any]], per: dict[str, Any], over_now: int) -> None:
    print(f"lease API: {args.proxies} proxies (max {args.max_per_proxy} lease each), {args.api_procs} processes, "
          f"one Redis, {args.rounds} windows of {args.seconds:g} s each side, alternating; floor: benchmarks/leases_floor.py")
    for run in runs:
        f, b = run["fleet"], run.get("floor")
        loads = f["load_average"] + (b["load_average"] if b else [])
        print(f"\n{run['clients']} clients ({f['seconds']:g} s measured each; load average {min(loads)}–{max(loads)})")
        print(f"  {'':24}{'fleet':>10}" + (f"{'floor':>10}{'fleet/floor':>13}" if b else ""))
        for label, key in ROWS:
            print(f"  {label:24}{f[key]:>10}" + (f"{b[key]:>10}{ratio(f[key], b[key]):>13}" if b else ""))
        print(f"  fleet answers {f['answers']}; violations {f['violations']} (client-side), "
              f"{f['load_over_limit_samples']} load samples over the limit")
        print("  CPU % of one core: fleet " + "  ".join(f"{k} {v}" for k, v in f["cpu_percent"].items())
              + ("; floor " + "  ".join(f"{k} {v}" for k, v in b["cpu_percent"].items()) if b else ""))
        print(f"  fleet commands / op {f['commands']}")
        if "profile" in f:
            names = list(dict.fromkeys([*f["profile"], *(b["profile"] if b else {})]))
            print("  py-spy, µs per operation in one process (self time by layer):  fleet" + ("  floor" if b else ""))
            for name in names:
                print(f"    {name:50}{f['profile'].get(name, 0):>8}" + (f"{b['profile'].get(name, 0):>8}" if b else ""))
    print(f"\nload over the limit at the end: {over_now}")
    for who, kinds in per.items():
        for name, got in kinds.items():
            print(f"{who} Redis commands per {name}: {got['total']}  "
                  + " ".join(f"{k} {v}" for k, v in got.items() if k != "total"))


if __name__ == "__main__":
    main()
