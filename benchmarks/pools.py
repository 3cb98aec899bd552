"""ProxyPools at scale (issue 22): a 1,000-member pool on the fake API
server (fleet/testing/kubeapi.py over loopback HTTP, the real `kubernetes`
client in between, the shipped CRDs' validation and defaulting), the pool
controller (`fleet.pools.cluster.PoolController.run_once`, one pass per
step of a fake clock) and an instant Proxy controller (fleet/testing/
pools.py's `Kubelet`: a new member is Running and Ready at the next
settle, written into the fake directly, not counted as the controller's).

Measured, each against a floor measured in the same run on the same fake:
- apply → all Ready: wall time, the controller thread's CPU per member
  (`time.thread_time`: the fake's handler threads are not in it), the
  controller's writes per member (POST/PATCH/DELETE it sent); floor: the
  same number of bare Proxy creates through the same `kube.Writer`;
- a full rotation (maxAge passed for every member) with maxUnavailable 10%
  and maxSurge 0: wall time, passes, the lowest availability sampled after
  every pass and every settle; floor: as many bare creates and deletes;
- scale 100 → 1,000 on demand (autoscale: lease demand asking for 1,000):
  wall time to 1,000 Ready; floor: 900 bare creates.

What the fake leaves out: a provider's latency (members are Ready at the next
settle), the Proxy controller's own work, and an API server's storage (etcd):
the ratios are fleet's pool work over the cheapest possible API writes.

    python benchmarks/pools.py              # 1,000 members
    python benchmarks/pools.py --members 200
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kubernetes import client

from fleet import kube
from fleet.pools.cluster import InCluster, PoolController
from fleet.pools.decide import Demand
from fleet.testing.kubeapi import FakeKubeAPI, Server
from fleet.testing.pools import NS, Clock, Kubelet, members
from providers.kubernetes.client import load_configuration


def pool_body(name: str, replicas: int, **spec: object) -> dict:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "providers": [{"provider": "squid-a", "weight": 3}, {"provider": "squid-b"}],
                     "template": {"port": 3130}, **spec}}


class Bench:
    def __init__(self, tmp: str) -> None:
        self.api = FakeKubeAPI()
        self.server = Server(self.api).__enter__()
        self.api.server = self.server
        path = self.server.kubeconfig(os.path.join(tmp, "kubeconfig"))
        self.writer = kube.Writer(client.ApiClient(load_configuration(path)), "bench")
        self.clock = Clock()
        self.demand: Demand | None = None
        self.ctl = PoolController(InCluster(self.writer), (NS,), clock=self.clock, rng=random.Random(1),
                                  demand=lambda pool, keys: self.demand)
        self.kubelet = Kubelet(self.api, self.clock)

    def close(self) -> None:
        self.server.__exit__(None, None, None)

    def ready(self, pool: str) -> int:
        return sum(1 for o in members(self.api, pool).values()
                   if any(c["type"] == "Ready" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions", ())))

    def run_until(self, pool: str, done, limit: int = 10_000) -> tuple[float, float, int, int, int]:
        """Passes (then settles) until `done()`: (wall s, controller CPU s, passes, writes, lowest Ready seen)."""
        writes0 = len(self.api.writes())
        t0, cpu, low = time.perf_counter(), 0.0, self.ready(pool)
        for passes in range(1, limit + 1):
            c0 = time.thread_time()
            self.ctl.run_once()
            cpu += time.thread_time() - c0
            low = min(low, self.ready(pool))
            self.kubelet.settle()
            low = min(low, self.ready(pool))
            self.clock.t += 1.0
            if done():
                return time.perf_counter() - t0, cpu, passes, len(self.api.writes()) - writes0, low
        raise SystemExit(f"not done after {limit} passes")

    def floor(self, creates: int, deletes: int = 0) -> float:
        """Bare Proxy creates (and deletes) through the same writer: the cheapest the fake can be written."""
        t0 = time.perf_counter()
        names = []
        for i in range(creates):
            name = f"floor-{i}"
            self.writer.create(kube.PROXY, NS, {"apiVersion": kube.PROXY.api_version, "kind": kube.PROXY.kind,
                                                "metadata": {"name": name, "namespace": NS},
                                                "spec": {"provider": "squid-a", "port": 3130}})
            names.append(name)
        for name in names[:deletes]:
            self.writer.call("delete", kube.PROXY, NS, name)
        wall = time.perf_counter() - t0
        for name in names[deletes:]:
            self.writer.call("delete", kube.PROXY, NS, name)
        return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=1000)
    n = p.parse_args().members
    small = n // 10
    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(tmp)
        try:
            floor_create = b.floor(n)
            # 1. apply -> all Ready
            b.api.add(pool_body("web", n, maxAgeSeconds=3600, strategy={"maxSurge": 0, "maxUnavailable": "10%"}),
                      plural="proxypools")
            wall, cpu, passes, writes, _ = b.run_until("web", lambda: b.ready("web") == n)
            print(f"apply -> {n} Ready: {wall:.2f} s wall in {passes} passes, controller CPU {1000 * cpu / n:.2f} ms/member, "
                  f"{writes / n:.2f} writes/member; floor ({n} bare creates) {floor_create:.2f} s: ratio {wall / floor_create:.1f}x")
            # 2. a full rotation, maxUnavailable 10%, maxSurge 0
            first = set(members(b.api, "web"))
            floor_rot = b.floor(n, n)
            b.clock.t += 3600
            wall, cpu, passes, writes, low = b.run_until(
                "web", lambda: not first & set(members(b.api, "web")) and b.ready("web") == n)
            print(f"rotation of {n} (maxUnavailable 10%, maxSurge 0): {wall:.2f} s wall in {passes} passes, lowest Ready "
                  f"{low} of {n} (bound {n - n // 10}), controller CPU {1000 * cpu / n:.2f} ms/member; floor ({n} creates + "
                  f"{n} deletes) {floor_rot:.2f} s: ratio {wall / floor_rot:.1f}x")
            b.api.delete(f"{NS}/web")
            b.ctl.run_once()  # its members go (no garbage collector in the fake: the controller deletes orphans)
            # 3. scale small -> n on demand (the same name: the Kubelet plays the members of "web")
            b.api.add(pool_body("web", small, autoscale={"min": small, "max": n, "targetUtilization": 100,
                                                            "scaleUpStabilizationSeconds": 0}), plural="proxypools")
            b.run_until("web", lambda: b.ready("web") == small)
            floor_scale = b.floor(n - small)
            b.demand = Demand(held=small, refused=n * 2, per_member=1)  # asks for more than max: clamped to it
            wall, cpu, passes, writes, _ = b.run_until("web", lambda: b.ready("web") == n)
            print(f"scale {small} -> {n} on demand: {wall:.2f} s wall in {passes} passes, controller CPU "
                  f"{1000 * cpu / (n - small):.2f} ms/new member; floor ({n - small} bare creates) {floor_scale:.2f} s: "
                  f"ratio {wall / floor_scale:.1f}x")
        finally:
            b.close()


if __name__ == "__main__":
    main()
