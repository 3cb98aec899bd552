"""Leases that survive a master change (issue 21, item 6), measured on real
processes: a redis-server master, its replica and three sentinels on
loopback (fleet/testing/sentinel.py) and `fleet api` processes on the
Sentinel URL.

1. Grant throughput with and without the replica WAIT, side by side in one
   run: two API processes on the same Redis pair, one with
   --lease-replica-wait 100ms, one with 0; C client threads (keep-alive
   HTTP/1.1) loop lease → release against one, then the other; reported:
   lease+release operations per second and the lease request's p50/p99.
2. Failover: a client leases (and releases) every 10 ms; the master is
   SIGKILLed; the time from the kill to the first successful grant, over
   `--failovers` fresh sets (median).

    python benchmarks/leases_durable.py                 # 8 clients, 10 s each, 5 failovers
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from fleet.store import keys  # noqa: E402
from fleet.testing.api import TOKEN, ApiProc  # noqa: E402
from fleet.testing.sentinel import DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SentinelSet  # noqa: E402

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def endpoints(port: int, n: int) -> None:
    r = redis.Redis(port=port)
    r.hset(keys.PX_ENDPOINTS, mapping={f"bench/p{i:04d}": json.dumps({"uid": f"u{i}", "ip": "127.0.0.1", "port": 3128,
                                                                      "provider": "lab", "instance": f"lab/i-{i}"})
                                       for i in range(n)})
    r.close()


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, dict]:
    conn.request("POST", path, body, HEADERS)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, json.loads(data) if data else {}


def load(api: ApiProc, clients: int, seconds: float) -> dict:
    stop = time.monotonic() + seconds
    lat: list[float] = []
    ops = [0]
    errors = [0]
    lock = threading.Lock()

    def run() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        mine: list[float] = []
        done = bad = 0
        while time.monotonic() < stop:
            t = time.perf_counter()
            status, doc = post(conn, "/v1/leases", b'{"target": "example.com", "ttl": 60}')
            mine.append(time.perf_counter() - t)
            if status != 200:
                bad += 1
                continue
            post(conn, f"/v1/leases/{doc['lease']}/release", b"")
            done += 1
        conn.close()
        with lock:
            lat.extend(mine)
            ops[0] += done
            errors[0] += bad

    threads = [threading.Thread(target=run) for _ in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    lat.sort()
    return {"ops_per_s": ops[0] / took, "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[int(len(lat) * 0.99)], "refused": errors[0]}


def throughput(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s = SentinelSet(Path(tmp)).start()
        apis = []
        try:
            wait_online(s)
            endpoints(s.ports["a"], args.proxies)
            apis = [ApiProc(Path(tmp), s.url, f"api-{w}", FLEET_LEASE_REPLICA_WAIT=w, FLEET_MAX_LEASES_PER_PROXY="100")
                    .start() for w in ("100ms", "0")]
            time.sleep(3)  # each has counted the replica
            load(apis[0], args.clients, 2)  # warm-up
            for api, name in zip(apis, ("WAIT 1 (100 ms bound)", "no WAIT"), strict=True):
                got = load(api, args.clients, args.seconds)
                print(f"{name:>22}: {got['ops_per_s']:7.0f} lease+release/s, lease p50 {got['p50_ms']:.2f} ms, "
                      f"p99 {got['p99_ms']:.2f} ms, refused {got['refused']}")
            text = urlopen_text(apis[0].url + "/metrics")
            unrep = [ln for ln in text.splitlines() if ln.startswith("proxy_operator_lease_unreplicated_total ")]
            print(f"{'':>22}  {unrep[0] if unrep else ''}")
        finally:
            for api in apis:
                api.stop()
            s.stop()


def urlopen_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def wait_online(s: SentinelSet) -> None:
    r = redis.Redis(port=s.ports["a"])
    deadline = time.monotonic() + 30
    while r.info("replication").get("slave0", {}).get("state") != "online":
        if time.monotonic() > deadline:
            raise SystemExit("the replica did not come online")
        time.sleep(0.1)
    r.close()


def failover(args: argparse.Namespace) -> list[float]:
    out = []
    for run in range(args.failovers):
        with tempfile.TemporaryDirectory() as tmp:
            s = SentinelSet(Path(tmp)).start()
            api = None
            try:
                wait_online(s)
                endpoints(s.ports["a"], 10)
                api = ApiProc(Path(tmp), s.url, "api").start()
                conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
                post(conn, "/v1/leases", b'{"target": "example.com", "ttl": 1}')
                killed = time.monotonic()
                s.kill_master()
                first = None
                while time.monotonic() - killed < 60:
                    try:
                        status = post(conn, "/v1/leases", b'{"target": "example.com", "ttl": 1}')[0]
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
                        status = 0
                    if status == 200:
                        first = time.monotonic() - killed
                        break
                    time.sleep(0.01)
                conn.close()
                print(f"failover {run + 1}: SIGKILL of the master → first grant {first:.2f} s" if first is not None
                      else f"failover {run + 1}: no grant within 60 s")
                if first is not None:
                    out.append(first)
            finally:
                if api is not None:
                    api.stop()
                s.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--clients", type=int, default=8)
    ap.add_argument("-n", "--proxies", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--failovers", type=int, default=5)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    throughput(args)
    times = failover(args)
    if times:
        print(f"failover to the first grant: median {statistics.median(times):.2f} s over {len(times)} "
              f"(sentinel down-after {DOWN_AFTER_MS} ms, failover-timeout {FAILOVER_TIMEOUT_MS} ms)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
