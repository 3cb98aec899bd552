"""Pipeline overhead of a health-check round at scale.

200 providers × 50 targets, each checker a `fake` with a fixed latency,
through a real redis-server, a few real worker processes consuming all the
provider queues between them (not 200 processes on 2 cores), a real
controller writing ProviderHealth to the HTTP fake of the API, and a real
beat whose first and second ticks start two rounds.

Prints: overhead per provider (beat tick → result stored, minus the check's
own latency) p50/p99, the round's length and how long after its slowest
check it finished, status writes per provider per round, and the
controller's peak RSS. Numbers, not assertions: run `python benchmarks/round.py`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.celery import routing
from fleet.cli import commands
from fleet.health.stored import StoredResults
from fleet.store import Store
from fleet.testing.kubeapi import FakeKubeAPI, Server
from fleet.testing.procs import wait_for
from fleet.testing.redis import RedisServer
from fleet.testing.stack import Stack


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--providers", type=int, default=200)
    ap.add_argument("--targets", type=int, default=50)
    ap.add_argument("--latency-ms", type=int, default=50)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--controllers", type=int, default=1, help="controller replicas (they share Redis safely)")
    args = ap.parse_args()
    names = [f"p{i:03d}" for i in range(args.providers)]
    providers = [{"name": n, "type": "fake", "fake": {"targetCount": args.targets, "latencyMs": args.latency_ms}} for n in names]

    with tempfile.TemporaryDirectory() as tmp, Server(FakeKubeAPI()) as kube:
        tmp_path = Path(tmp)
        redis_srv = RedisServer(tmp_path)
        redis_srv.start()
        stack = Stack(tmp_path, redis_srv.url, providers, {"FLEET_KUBECONFIG": kube.kubeconfig(str(tmp_path / "kc")),
                                                           "FLEET_LOG_LEVEL": "warning"})
        try:
            store = StoredResults(Store(redis_srv.client()))
            groups = [names[i :: args.workers] for i in range(args.workers)]
            for i, group in enumerate(groups):
                queues = ",".join(routing.provider_queue(n) for n in group)
                argv = commands.worker_argv(group[0], args.concurrency)
                argv[argv.index("-Q") + 1] = queues
                argv[argv.index("-n") + 1] = f"bench{i}@%h"
                stack.start(f"worker:bench{i}", argv)
            ctls = []
            for i in range(args.controllers):
                argv = commands.controller_argv()
                argv[argv.index("-n") + 1] = f"controller{i}@%h"
                ctls.append(stack.start(f"controller{i}", argv))
            want = args.workers + args.controllers
            wait_for(lambda: len(stack.sender.control.ping(timeout=1)) >= want, 90, "workers to answer ping")
            stack.beat()
            rounds = []
            for rnd in (1, 2):
                floor = rounds[-1]["last_recorded"] if rounds else 0.0

                def done(floor=floor):
                    res = store.all()
                    fresh = [r for r in res.values() if r.recorded_at and r.scheduled_at and r.scheduled_at > floor]
                    return fresh if len(fresh) == len(names) else None

                results = wait_for(done, 120, f"round {rnd}", interval=0.2)
                lat = args.latency_ms / 1000
                overhead = [(r.recorded_at - r.scheduled_at - lat) * 1000 for r in results]
                to_worker = [(r.checked_at - r.scheduled_at - lat) * 1000 for r in results]
                to_store = [(r.recorded_at - r.checked_at) * 1000 for r in results]
                first_tick = min(r.scheduled_at for r in results)
                last_check = max(r.checked_at for r in results)
                last_recorded = max(r.recorded_at for r in results)
                rounds.append({"overhead": overhead, "round": last_recorded - first_tick,
                               "after_slowest": last_recorded - last_check, "last_recorded": last_recorded,
                               "to_worker": to_worker, "to_store": to_store})
            time.sleep(1)
            patches = [r for r in kube.api.requests if r.method == "PATCH"]
            creates = [r for r in kube.api.requests if r.method == "POST"]
            rss = max(peak_rss_mib(c.pid) for c in ctls)
        finally:
            stack.stop()
            redis_srv.stop()

    print(f"round benchmark: {args.providers} providers x {args.targets} targets, check latency {args.latency_ms} ms, "
          f"{args.workers} worker processes x {args.concurrency} threads, {args.controllers} controller(s)")
    for i, r in enumerate(rounds, 1):
        print(f"  round {i}: overhead per provider p50 {statistics.median(r['overhead']):.1f} ms, "
              f"p99 {pct(r['overhead'], 99):.1f} ms; round {r['round']:.2f} s; "
              f"done {r['after_slowest'] * 1000:.0f} ms after its slowest check")
        print(f"           tick → check done (minus latency) p50 {statistics.median(r['to_worker']):.1f} ms, "
              f"check done → stored p50 {statistics.median(r['to_store']):.1f} ms")
    print(f"  kubernetes writes: {len(creates)} creates (first round), {len(patches)} status patches over 2 rounds "
          f"= {len(patches) / (2 * args.providers):.2f} per provider per round")
    print(f"  controller peak RSS: {rss:.1f} MiB")


if __name__ == "__main__":
    main()
