"""Redis memory after an hour's worth of rounds (issue 9, item 2).

200 providers × 50 targets at a 10 s interval is 360 rounds an hour. This
drives that many rounds through the real pipeline as fast as it drains (not
an hour of wall time): a real redis-server, real provider worker processes
consuming the 200 queues between them, and a real controller in standalone
mode (Redis only: the Kubernetes writes do not touch Redis). Rounds are sent
back to back with a few in flight; nothing expires meanwhile, so the keys
left at the end are what an hour at 10 s leaves (task results expired after
`result_expires` = 1 h before the fix, so an hour is their steady state).

Prints Redis `used_memory` before and after, the key count by prefix, and
the growth per round. Numbers, not assertions:
`python benchmarks/redis_memory.py [--rounds 360] [--providers 200] [--targets 50]`.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.celery import routing
from fleet.cli import commands
from fleet.health.dispatch import send_check
from fleet.testing.procs import wait_for
from fleet.testing.redis import RedisServer
from fleet.testing.stack import Stack


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def key_counts(r) -> dict[str, int]:
    """Keys by kind: fleet:<kind>:, celery-task-meta-*, kombu's bindings, the rest by name."""
    counts: collections.Counter[str] = collections.Counter()
    for key in r.scan_iter(count=5000):
        k = key.decode(errors="replace")
        if k.startswith("celery-task-meta-"):
            k = "celery-task-meta-*"
        elif k.startswith("_kombu.binding"):
            k = "_kombu.binding*"
        elif k.startswith("fleet:"):
            k = ":".join(k.split(":")[:2]) + ":*"
        counts[k] += 1
    return dict(counts.most_common())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=360, help="rounds to drive (360 = one hour at a 10 s interval)")
    ap.add_argument("--providers", type=int, default=200)
    ap.add_argument("--targets", type=int, default=50)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--in-flight", type=int, default=4, help="rounds sent ahead of the last one recorded")
    args = ap.parse_args()
    names = [f"p{i:03d}" for i in range(args.providers)]
    providers = [{"name": n, "type": "fake", "fake": {"targetCount": args.targets}} for n in names]

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        redis_srv = RedisServer(tmp_path)
        redis_srv.start()
        env = {"FLEET_LOG_LEVEL": "warning", "HOME": tmp, "KUBECONFIG": str(tmp_path / "none")}  # standalone
        stack = Stack(tmp_path, redis_srv.url, providers, env)
        os.environ.pop("KUBERNETES_SERVICE_HOST", None)
        r = redis_srv.client()
        try:
            groups = [names[i :: args.workers] for i in range(args.workers)]
            for i, group in enumerate(groups):
                argv = commands.worker_argv(group[0], args.concurrency)
                argv[argv.index("-Q") + 1] = ",".join(routing.provider_queue(n) for n in group)
                argv[argv.index("-n") + 1] = f"bench{i}@%h"
                stack.start(f"worker:bench{i}", argv)
            stack.controller()
            wait_for(lambda: len(stack.sender.control.ping(timeout=1)) >= args.workers + 1, 90, "workers to answer ping")
            before = r.info("memory")["used_memory"]
            start = time.monotonic()
            done = 0

            def backlog() -> int:
                with r.pipeline() as p:
                    for n in names:
                        p.llen(routing.provider_queue(n))
                    p.llen(routing.CONTROLLER_QUEUE)
                    return sum(p.execute())

            sent = 0
            samples = []
            while sent < args.rounds:
                tick = time.time()
                for n in names:
                    send_check(stack.sender, n, 5.0, 3600.0, tick)  # expires: an hour, so no round is skipped
                sent += 1
                if sent % args.in_flight == 0 or sent == args.rounds:
                    wait_for(lambda: backlog() == 0, 600, f"round {sent} to drain", interval=0.2)
                if sent % 60 == 0 or sent == args.rounds:
                    samples.append((sent, r.info("memory")["used_memory"], time.monotonic() - start))
                    print(f"  after {sent} rounds: used_memory {mib(samples[-1][1])} ({samples[-1][2]:.0f} s)", flush=True)
            time.sleep(2)  # the last records in flight
            done = sent
            after = r.info("memory")
            keys = key_counts(r)
        finally:
            stack.stop()
            redis_srv.stop()

    print(f"redis memory benchmark: {args.providers} providers x {args.targets} targets, {done} rounds "
          f"(an hour's worth at 10 s, compressed into {samples[-1][2]:.0f} s)")
    print(f"  used_memory before {mib(before)}, after {mib(after['used_memory'])} "
          f"(peak {mib(after['used_memory_peak'])}), growth {mib(after['used_memory'] - before)} "
          f"= {(after['used_memory'] - before) / max(done, 1) / 1024:.1f} KiB per round")
    print(f"  keys: {sum(keys.values())} {keys}")


if __name__ == "__main__":
    main()
