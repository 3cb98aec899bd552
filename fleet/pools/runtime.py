"""The ProxyPool loop on the controller (cluster and standalone mode), started by
`tasks.controller.controller_startup` after the Proxy reconciler.

One controller replica runs it: each pass first takes or extends the Redis
lock `fleet:pool:lock` (`fleet.store.pools.PoolLock`, beat's kind of lock:
owner id, TTL LOCK_TTL), and a replica that does not hold it only waits;
the holder's death frees it within LOCK_TTL, a stopping holder releases
it. Every replica of one installation shares the Proxy claims
(`fleet.proxies.claims`), so a pool is reconciled only in a namespace this
installation holds the claim of, and with `--proxy-namespaces '*'` only in
the namespaces it claimed (`Claims.allowed`).

What the pool decision reads from Redis, once per pass (`Inputs`): every
proxy's open leases and active cooldowns (`Leases.usage`, the scale-down
order) and, per pool, its demand (`Demand`: the open leases of its
members, the refused lease requests naming the pool over DEMAND_WINDOW,
`--max-leases-per-proxy`) and, for pools with uniqueEgressIP, each Running
member's egress address from the prober's verdicts (`fleet:probe:verdicts`,
the verdict on the member's current uid only). The refused counter is per pool *name*
(the lease API's `pool` filter is not namespaced): two pools of the same
name in two namespaces share it.

Standalone mode (`--proxies` manifests): the same loop, lock and inputs over
`fleet.pools.standalone.InRedis` (the manifests' ProxyPools, members and
status in Redis); a member created or retired is due at once for the Proxy
reconciler.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from fleet import runtime
from fleet.pools.cluster import InCluster, PoolController
from fleet.pools.decide import Demand
from fleet.pools.metrics import PoolSeries
from fleet.pools.model import Pool
from fleet.pools.standalone import InRedis
from fleet.proxies.reconciler import probe_of
from fleet.store import keys
from fleet.store.leases import Leases
from fleet.store.pools import PoolLock

log = logging.getLogger("fleet.pools")

INTERVAL = 2.0  # seconds between passes
LOCK_TTL = 15.0  # seconds the lock outlives its holder's last pass
DEMAND_WINDOW = 60.0  # seconds of refused lease requests counted as demand


class Inputs:
    """The pass's reads from Redis: usage by proxy key, demand by pool (refreshed once per pass), and the
    prober's verdicts for egress addresses (read at most once per pass, and only when a pool asks:
    uniqueEgressIP)."""

    def __init__(self, leases: Leases, per_member: int, clock: Callable[[], float] = time.time,
                 verdicts: Callable[[], Mapping[str, bytes | str]] = dict) -> None:
        self.leases, self.per_member, self.clock, self.verdicts = leases, per_member, clock, verdicts
        self.loads: dict[str, int] = {}
        self.cooling: dict[str, int] = {}
        self._verdicts: Mapping[str, bytes | str] | None = None

    def refresh(self) -> None:
        self.loads, self.cooling = self.leases.usage(self.clock())
        self._verdicts = None

    def egress(self, key: str, uid: str) -> str:
        """The prober's last egress address for this Proxy's uid ("" none, or a verdict on another uid)."""
        if self._verdicts is None:
            self._verdicts = self.verdicts()
        probe = probe_of(self._verdicts.get(key), uid)
        return probe.egress_ip if probe is not None else ""

    def usage(self, key: str) -> tuple[int, int]:
        return self.loads.get(key, 0), self.cooling.get(key, 0)

    def demand(self, pool: Pool, member_keys: Sequence[str]) -> Demand:
        held = sum(self.loads.get(k, 0) for k in member_keys)
        return Demand(held, self.leases.refused(pool.name, self.clock(), DEMAND_WINDOW), self.per_member)


class PoolLoop:
    """The controller's loop: a pass while this replica holds the lock."""

    def __init__(self, controller: PoolController, lock: PoolLock, inputs: Inputs, owner: str,
                 interval: float = INTERVAL, ttl: float = LOCK_TTL) -> None:
        self.controller, self.lock, self.inputs, self.owner = controller, lock, inputs, owner
        self.interval, self.ttl = interval, ttl
        self.holding = False

    def step(self) -> bool:
        """One pass if the lock is ours (taken or extended); whether it ran."""
        held = self.lock.hold(self.owner, self.ttl)
        if held != self.holding:
            log.info("pool loop: %s", "this replica runs it" if held else "another replica runs it",
                     extra={"fields": {"owner": self.owner}})
            self.holding = held
        if not held:
            self.controller.series.forget()  # the holder serves the pools' figures
            return False
        self.inputs.refresh()
        self.controller.run_once()
        return True

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception as exc:  # Redis or the API down: try again next pass
                log.warning("pool loop: %s: %s", type(exc).__name__, str(exc)[:300])
            stop.wait(self.interval)
        if self.holding:
            try:
                self.lock.release(self.owner)
            except Exception as exc:  # it lapses anyway
                log.debug("pool lock release failed: %s", exc)


SERIES = PoolSeries()  # the pools' part of this controller's /metrics (tasks.controller), fed by the loop


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def start(stop: threading.Event) -> list[threading.Thread]:
    """The pool loop as a daemon thread when the controller has Proxies (a cluster's, or standalone manifests)."""
    from fleet.proxies import runtime as proxies
    from fleet.proxies.cluster import Cluster
    from fleet.proxies.standalone import Standalone

    objects, _ = proxies.mode()
    s = runtime.settings()
    store = runtime.store()
    inputs = Inputs(store.leases, s.max_leases_per_proxy, verdicts=store.proxies.verdicts)
    if isinstance(objects, Cluster):
        claims = objects.claims
        ctl = PoolController(InCluster(objects.writer), namespaces=s.proxy_scope, demand=inputs.demand,
                             usage=inputs.usage, served=claims.allowed if claims is not None else (lambda ns: True),
                             series=SERIES, egress=inputs.egress)
    elif isinstance(objects, Standalone):
        rec = proxies.reconciler()

        def due(keys: Iterable[str]) -> None:
            if rec is None:
                return
            for key in keys:
                rec.store.schedule(key, rec.clock())
            rec.wake.set()

        where = InRedis(store.pools, objects, objects.path, s.installation_id, on_change=due, follow=True)
        ctl = PoolController(where, demand=inputs.demand, usage=inputs.usage, series=SERIES, egress=inputs.egress)
    else:
        log.info("ProxyPools: off (no --proxies manifests and no cluster)")
        return []
    loop = PoolLoop(ctl, store.pool_lock, inputs, owner_id())
    log.info("ProxyPools: one controller replica reconciles them (lock %s)", keys.POOL_LOCK)
    t = threading.Thread(target=loop.run, args=(stop,), name="fleet-pool-loop", daemon=True)
    t.start()
    return [t]
