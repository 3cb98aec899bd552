"""The Proxy controller played for the pool controller's tests and
benchmarks (fleet.pools.cluster against fleet.testing.kubeapi): `Kubelet`
gives each new member of a pool an instance (providerID, phase
Provisioning) and, `ready_after` seconds of a `Clock` later, Running and
Ready, as fleet.proxies would once the instance answers."""

from __future__ import annotations

import copy
from typing import Any

from fleet.durations import rfc3339
from fleet.proxies.model import LABEL_POOL
from fleet.testing.kubeapi import FakeKubeAPI

NS = "crawl"


class Clock:
    def __init__(self) -> None:
        self.t = 1_750_000_000.0

    def __call__(self) -> float:
        return self.t


def members(api: FakeKubeAPI, pool: str = "web") -> dict[str, dict[str, Any]]:
    """`pool`'s member Proxies in `api`, by namespace/name."""
    return {k: o for k, o in api.objects.items()
            if api.plurals.get(k) == "proxies" and (o["metadata"].get("labels") or {}).get(LABEL_POOL) == pool}


class Kubelet:
    """Plays fleet.proxies: a new member gets an instance now, Ready `ready_after` s later."""

    def __init__(self, api: FakeKubeAPI, clock: Clock, ready_after: float = 0.0) -> None:
        self.api, self.clock, self.ready_after = api, clock, ready_after
        self.born: dict[str, float] = {}

    def settle(self) -> None:
        now = self.clock()
        with self.api._lock:
            for k, o in list(members(self.api).items()):
                uid = o["metadata"]["uid"]
                if uid not in self.born:
                    self.born[uid] = now
                    new = copy.deepcopy(o)
                    new["metadata"]["creationTimestamp"] = rfc3339(now)  # the test's clock, not the wall's
                    new["status"] = {"phase": "Provisioning", "providerID": f"i-{uid[:8]}"}
                    self.api.add(new, plural="proxies")
                elif o.get("status", {}).get("phase") == "Provisioning" and now - self.born[uid] >= self.ready_after:
                    self.set(k, ready=True)

    def set(self, k: str, *, ready: bool = True, healthy: bool = True, since: float | None = None,
            provider_id: bool = True) -> None:
        o = copy.deepcopy(self.api.objects[k])
        when = rfc3339(self.clock() if since is None else since)
        o["status"] = {"phase": "Running", "ip": "10.0.0.1", "port": 3128,
                       "conditions": [
                           {"type": "Provisioned", "status": "True", "reason": "Running", "message": "",
                            "lastTransitionTime": when},
                           {"type": "Healthy", "status": "True" if healthy else "False",
                            "reason": "ProbeSucceeded" if healthy else "ProbeFailed", "message": "", "lastTransitionTime": when},
                           {"type": "Ready", "status": "True" if ready else "False",
                            "reason": "Running" if ready else "NotRunning", "message": "", "lastTransitionTime": when}]}
        if provider_id:
            o["status"]["providerID"] = f"i-{o['metadata']['uid'][:8]}"
        else:
            o["status"]["phase"] = "Pending"
        self.api.add(o, plural="proxies")

    def available(self) -> int:
        return sum(1 for o in members(self.api).values()
                   if any(c["type"] == "Ready" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions", ())))
