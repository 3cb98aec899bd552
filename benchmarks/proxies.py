"""Proxies at scale (issue 12): N Proxies on a provider with instant
operations (the fake), from apply to all Running, with real processes: a
redis-server, one fake provider worker and one controller (`fleet worker`,
`fleet controller` command lines), standalone mode (`--proxies`: one
manifest file holding a List of N Proxies).

Reported:
- wall time from writing the manifest file to the moment the benchmark,
  reading Redis, sees every Proxy Running (polled every 50 ms, so ≤ 50 ms late);
- provider calls made (create + get), and the time the poll interval alone
  accounts for (a Proxy is created, then polled once `--proxy-poll-interval`
  later: the wall time cannot be below one poll);
- controller CPU ms per Proxy (utime+stime of its process over the run) and
  the provider worker's and redis-server's;
- status writes per Proxy to reach Running: the standalone object's
  resourceVersion counts every write (its creation from the manifest is 1);
- writes per minute once all are Running and nothing changes, over
  `--quiet` seconds (the Running Proxies' resync Gets happen; writes must not);
- RSS of every process.

What the fake leaves out: a real backend's latency (create and get answer in
microseconds; only the queues, Redis and the controller are measured) and an
API server (standalone writes go to Redis; in cluster mode each write is one
PATCH, see docs/architecture.md).

    python benchmarks/proxies.py                     # 500 Proxies, defaults (3 calls in flight, 10 s poll)
    python benchmarks/proxies.py --max-calls 20 --poll 2s
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import yaml  # noqa: E402

from benchmarks.procstats import cpu_s, free_port, rss_mib, stop  # noqa: E402
from fleet.cli import commands  # noqa: E402
from fleet.durations import parse_duration  # noqa: E402
from fleet.store import keys  # noqa: E402


def manifest(n: int) -> str:
    items = [{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
              "metadata": {"name": f"px-{i:04d}", "namespace": "bench"},
              "spec": {"provider": "edge", "port": 3128, "cloudInit": {"inline": f"#cloud-config {i}"}}} for i in range(n)]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def objects(r: redis.Redis) -> list[dict]:
    return [json.loads(v) for v in r.hvals(keys.PX_OBJECTS)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="Proxies (default 500)")
    ap.add_argument("--max-calls", type=int, default=3, help="--max-provider-calls (default 3, fleet's default)")
    ap.add_argument("--poll", default="10s", help="--proxy-poll-interval (default 10s, fleet's default)")
    ap.add_argument("--quiet", type=float, default=65.0, help="seconds to count writes once all are Running (default 65)")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    poll = parse_duration(args.poll)

    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-proxies-"))
    procs: dict[str, subprocess.Popen] = {}
    try:
        port = free_port()
        procs["redis"] = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        (tmp / "providers.yaml").write_text(yaml.safe_dump({"providers": [{"name": "edge", "type": "fake"}]}))
        manifests = tmp / "proxies"
        manifests.mkdir()
        env = {**os.environ, "FLEET_PROVIDERS_CONFIG": str(tmp / "providers.yaml"), "FLEET_BROKER_URL": url,
               "FLEET_PROVIDER_CHECK_INTERVAL": "0", "FLEET_METRICS_BIND_ADDRESS": "0", "FLEET_LOG_LEVEL": "info",
               "FLEET_PROXIES": str(manifests), "FLEET_PROXY_POLL_INTERVAL": args.poll,
               "FLEET_MAX_PROVIDER_CALLS": str(args.max_calls)}
        for role, argv in (("worker", commands.worker_argv("edge")), ("controller", commands.controller_argv())):
            with open(tmp / f"{role}.log", "wb") as log:
                procs[role] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while not all("ready." in (tmp / f"{role}.log").read_text(errors="replace") for role in ("worker", "controller")):
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start:\n" + (tmp / "controller.log").read_text()[-2000:])
            time.sleep(0.1)
        time.sleep(1.0)
        pids = {k: p.pid for k, p in procs.items()}
        cpu0 = {k: cpu_s(pid) for k, pid in pids.items()}

        t0 = time.monotonic()
        (manifests / "proxies.yaml").write_text(manifest(args.n))
        first_seen = None
        while True:
            objs = objects(r)
            if objs and first_seen is None:
                first_seen = time.monotonic() - t0
            running = sum(1 for o in objs if (o.get("status") or {}).get("phase") == "Running")
            if running == args.n:
                break
            if time.monotonic() - t0 > args.timeout:
                raise SystemExit(f"timed out: {running}/{args.n} Running")
            time.sleep(0.05)
        wall = time.monotonic() - t0
        cpu1 = {k: cpu_s(pid) for k, pid in pids.items()}
        versions = [int(o["metadata"]["resourceVersion"]) for o in objs]
        writes = [v - 1 for v in versions]  # the object's creation from the manifest is version 1

        before = sum(versions)
        time.sleep(args.quiet)
        after = sum(int(o["metadata"]["resourceVersion"]) for o in objects(r))
        rss = {k: rss_mib(pid) for k, pid in pids.items()}

        n = args.n
        print(f"fleet proxies benchmark: {n} Proxies on the fake provider (instant operations), standalone mode")
        print(f"  settings: --max-provider-calls {args.max_calls}, --proxy-poll-interval {args.poll}")
        print(f"  apply → all Running:   {wall:.1f} s  (first object in Redis after {first_seen:.2f} s;"
              f" one poll alone is {poll:.0f} s)")
        print(f"  provider calls:        {2 * n} at least (create + get per Proxy), ≤ {args.max_calls} in flight"
              f" → {2 * n / wall:.0f} calls/s")
        print(f"  status writes/Proxy:   max {max(writes)}, mean {sum(writes) / n:.2f} (goal ≤ 3 to reach Running)")
        print(f"  writes/min once Running, nothing changing: {(after - before) * 60 / args.quiet:.1f}"
              f" (over {args.quiet:.0f} s)")
        for role in ("controller", "worker", "redis"):
            print(f"  {role:11s} CPU {1000 * (cpu1[role] - cpu0[role]) / n:6.2f} ms/Proxy   "
                  f"RSS {rss[role][0]:.0f} MiB (peak {rss[role][1]:.0f})")
    finally:
        stop(procs.values(), grace=15)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
