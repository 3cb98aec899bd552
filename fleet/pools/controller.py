"""Applying `fleet.pools.decide` to ProxyPools, in one place, wherever their
members live: `PoolController` over a `Where` (`fleet.pools.cluster.InCluster`:
the API server's ProxyPools and Proxies; `fleet.pools.standalone.InRedis`: the
`--proxies` manifests' ProxyPools, their members and status in Redis).

    run_once():  per namespace of the scope: list the pools and the Proxies →
                 per pool: its members (labelled crawl.example.com/pool=<pool>
                 and owned by it) → decide → create / delete member Proxies →
                 write spec.replicas when autoscaling moved it (the scale path)
                 → write the status

Level-triggered: every pass reads everything afresh, so nothing is lost
across restarts and no cache can go stale; the autoscaler's recommendations
are the only memory (in process, as an HPA's). Members are ordinary Proxies:
`<pool>-<5 random characters>`, the pool's labels, an ownerReference to the
pool (controller, blockOwnerDeletion), so the Proxy controller
(`fleet.proxies`) provisions them like any other. A member whose owning pool
is gone is deleted here (reason `orphan`) when the listing is complete (a
cluster's garbage collector may be first; standalone: a pool removed from
the manifests, never while a manifest fails to read).

A pool the controller cannot read is skipped, logged once.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleet import kube
from fleet.pools import decide as rules
from fleet.pools.decide import Decision, Demand
from fleet.pools.metrics import Figures, PoolSeries
from fleet.pools.model import API_VERSION, KIND, LABEL_HASH, Member, Pool, PoolError, member_of, parse_pool
from fleet.pools.schema import SUFFIX
from fleet.proxies.manifests import ManifestError
from fleet.proxies.model import LABEL_POOL
from fleet.settings import ALL_NAMESPACES

log = logging.getLogger("fleet.pools")

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes' generateName: no vowels, no 0/1/3
HISTORY = 3600.0  # seconds of autoscale recommendations kept (longer than any window)
NAME_ATTEMPTS = 5


class NameTaken(Exception):
    """A member's name is taken (`Where.create`): the controller tries another suffix."""


@dataclass(frozen=True)
class Listing:
    """One scope's pools and Proxies as objects (Kubernetes-shaped dicts); `complete`: every pool that exists
    is listed, so a member whose pool is not is an orphan (False while a standalone manifest fails to read)."""

    pools: list[dict[str, Any]]
    proxies: list[dict[str, Any]]
    complete: bool = True


class Where(Protocol):
    """Where pools and their members live: the only I/O of `PoolController`."""

    def list(self, namespace: str | None) -> Listing:
        """The pools and Proxies of `namespace` (None: every namespace)."""

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        """A member Proxy (`body` as the API takes it); NameTaken when its name is."""

    def delete(self, namespace: str, name: str) -> bool:
        """A member Proxy deleted (its finalizer deletes its instance); False when it was gone."""

    def scale(self, pool: Pool, replicas: int) -> str:
        """spec.replicas written through the scale path (the autoscaler); the pool's new resourceVersion."""

    def write_status(self, pool: Pool, resource_version: str, status: Mapping[str, Any]) -> None:
        """The pool's status."""

@dataclass
class Counters:
    """What the controller did, for tests and benchmarks (/metrics: `PoolController.series`)."""

    creates: int = 0
    deletes: dict[str, int] = field(default_factory=dict)  # by reason
    status_writes: int = 0
    scales: int = 0


class PoolController:
    def __init__(self, where: Where, namespaces: tuple[str, ...] = (ALL_NAMESPACES,),
                 clock: Callable[[], float] = time.time,
                 demand: Callable[[Pool, Sequence[str]], Demand | None] = lambda pool, keys: None,
                 usage: Callable[[str], tuple[int, int]] = lambda key: (0, 0),
                 rng: random.Random | None = None, served: Callable[[str], bool] = lambda ns: True,
                 series: PoolSeries | None = None,
                 egress: Callable[[str, str], str] = lambda key, uid: "") -> None:
        self.where, self.namespaces, self.clock = where, namespaces, clock
        self.demand = demand  # the lease API's demand for a pool, given its members' keys (None: unknown)
        self.served = served  # whether this installation serves a namespace now (its claim: fleet.proxies.claims)
        self.usage = usage  # `namespace/name` of a Proxy -> (leases held, active cooldowns)
        self.egress = egress  # (`namespace/name`, uid) of a Proxy -> the prober's egress address ("" unknown)
        self.rng = rng or random.Random()
        self.history: dict[str, list[tuple[float, int]]] = {}
        self.counters = Counters()
        self.series = series if series is not None else PoolSeries()  # fleet.pools.metrics: the controller's /metrics
        self._reported: set[str] = set()
        # key -> (resourceVersion, the member as read without usage): a pass reads again only members that changed
        self._read: dict[str, tuple[str, Member]] = {}
        self._seen: set[str] = set()

    # -- one pass -------------------------------------------------------------------------

    def run_once(self) -> dict[str, str]:
        """Reconcile every pool of the scope once; what happened to each, by `namespace/name`."""
        out: dict[str, str] = {}
        self._seen = set()
        scopes: list[str | None] = [None] if self.namespaces == (ALL_NAMESPACES,) else list(self.namespaces)
        for ns in scopes:
            if ns is not None and not self.served(ns):
                continue
            listing = self.where.list(ns)
            pools, proxies = listing.pools, listing.proxies
            if ns is None:  # every namespace: only those this installation holds the claim of
                ok: dict[str, bool] = {}
                pools = [o for o in pools if ok.setdefault(_ns(o), self.served(_ns(o)))]
                proxies = [o for o in proxies if ok.setdefault(_ns(o), self.served(_ns(o)))]
            out.update(self._namespace(pools, proxies, listing.complete))
        self.series.retain((k.split("/", 1)[0], k.split("/", 1)[1]) for k, what in out.items()
                           if what not in ("unreadable", "deleting"))
        self._read = {k: v for k, v in self._read.items() if k in self._seen}
        return out

    def _member(self, key: str, o: dict[str, Any]) -> Member:
        """`member_of(o)` with this pass's usage; read again only when its resourceVersion moved
        (a 1,000-member pool's pass had been two thirds re-reading unchanged members)."""
        self._seen.add(key)
        rv = str(_meta(o).get("resourceVersion") or "")
        hit = self._read.get(key)
        if hit is None or not rv or hit[0] != rv:
            hit = (rv, member_of(o))
            if rv:
                self._read[key] = hit
        leases, cooldowns = self.usage(key)
        return dataclasses.replace(hit[1], leases=leases, cooldowns=cooldowns) if leases or cooldowns else hit[1]

    def _namespace(self, pools: list[dict[str, Any]], proxies: list[dict[str, Any]], complete: bool = True) -> dict[str, str]:
        out: dict[str, str] = {}
        owners = {(_meta(o).get("namespace"), _meta(o).get("uid")) for o in pools}
        members: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in proxies:
            owner = _owner(p)
            if owner is None:
                continue
            ns = str(_meta(p).get("namespace") or "")
            if (ns, owner[1]) not in owners:
                if complete:
                        self._delete(ns, "", str(_meta(p).get("name")), "orphan")  # its pool is gone (no garbage collector)
                continue
            members.setdefault((ns, owner[1]), []).append(p)
        for obj in pools:
            meta = _meta(obj)
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            try:
                pool = parse_pool(obj)
            except PoolError as exc:
                if key not in self._reported:
                    self._reported.add(key)
                    log.warning("ignoring a ProxyPool fleet cannot read", extra={"fields": {"pool": key, "error": str(exc)[:300]}})
                out[key] = "unreadable"
                continue
            try:
                out[key] = self.reconcile(pool, obj, members.get((pool.namespace, pool.uid), []))
            except kube.KubeError as exc:  # one pool's failure must not stop the others
                log.warning("pool reconcile failed", extra={"fields": {"pool": key, "error": f"{type(exc).__name__}: {exc}"}})
                out[key] = "error"
        return out

    def reconcile(self, pool: Pool, obj: dict[str, Any], member_objs: Iterable[dict[str, Any]]) -> str:
        now = self.clock()
        members: list[Member] = []
        member_keys: list[str] = []
        for o in member_objs:
            meta = _meta(o)
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            try:
                m = self._member(key, o)
            except ManifestError:
                continue  # not a Proxy fleet can read: the Proxy controller reports it
            if pool.spec.unique_egress and m.running:  # read only when the rule is on
                m = dataclasses.replace(m, egress_ip=self.egress(key, m.uid))
            members.append(m)
            member_keys.append(key)
        history = [(t, n) for t, n in self.history.get(pool.key, []) if t >= now - HISTORY]
        d = rules.decide(pool, members, self.demand(pool, member_keys), now, history)
        if d.recommendation is not None:
            self.history[pool.key] = [*history, d.recommendation]
        if pool.deleting:
            return "deleting"
        st = d.status
        self.series.observe(pool.namespace, pool.name, Figures(
            d.desired, int(st["readyReplicas"]), int(st["availableReplicas"]), int(st["updatedReplicas"]),
            d.max_unavailable, d.remediation_blocked, pool.spec.autoscale.max if pool.spec.autoscale else None))
        self._apply(pool, obj, d)
        return f"{len(d.creates)} created, {len(d.deletes)} deleted"

    def _apply(self, pool: Pool, obj: dict[str, Any], d: Decision) -> None:
        for c in d.creates:
            self._create(pool, c.provider, c.template_hash)
        for x in d.deletes:
            self._delete(pool.namespace, pool.name, x.name, x.reason)
        rv = pool.resource_version
        if d.scale_to is not None:  # spec.replicas: what the scale subresource reads and `kubectl scale` writes
            rv = self.where.scale(pool, d.scale_to) or rv
            self.counters.scales += 1
        raw = obj.get("status")
        current: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if any(current.get(k) != v for k, v in d.status.items()):
            self.where.write_status(pool, rv, d.status)
            self.counters.status_writes += 1

    def _create(self, pool: Pool, provider: str, template_hash: str) -> None:
        share = next(s for s in pool.spec.providers if s.provider == provider)
        t = pool.spec.template
        pl = share.placement if share.placement is not None else t.placement
        placement = {k: v for k, v in (("region", pl.region), ("zone", pl.zone), ("machineType", pl.machine_type),
                                       ("image", pl.image)) if v}
        spec: dict[str, Any] = {"provider": provider, "port": t.port}
        if placement:
            spec["placement"] = placement
        if t.raw.get("cloudInit") is not None:
            spec["cloudInit"] = t.raw["cloudInit"]
        for _ in range(NAME_ATTEMPTS):
            name = f"{pool.name}-{''.join(self.rng.choice(SUFFIX_ALPHABET) for _ in range(SUFFIX))}"
            body = {"apiVersion": kube.PROXY.api_version, "kind": kube.PROXY.kind,
                    "metadata": {"name": name, "namespace": pool.namespace,
                                 "labels": {LABEL_POOL: pool.name, LABEL_HASH: template_hash},
                                 "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": pool.name,
                                                      "uid": pool.uid, "controller": True, "blockOwnerDeletion": True}]},
                    "spec": spec}
            try:
                self.where.create(pool.namespace, body)
            except NameTaken:
                continue  # another suffix
            self.counters.creates += 1
            log.info("pool member created", extra={"fields": {"pool": pool.key, "proxy": name, "provider": provider}})
            return
        raise kube.ApiUnavailable(f"no free member name for pool {pool.key} after {NAME_ATTEMPTS} attempts")

    def _delete(self, namespace: str, pool: str, name: str, reason: str) -> None:
        if not self.where.delete(namespace, name):
            return
        self.counters.deletes[reason] = self.counters.deletes.get(reason, 0) + 1
        self.series.replaced(namespace, pool, reason)
        log.info("pool member deleted", extra={"fields": {"proxy": f"{namespace}/{name}", "reason": reason}})

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event, interval: float = 2.0) -> None:
        """A pass every `interval` seconds until `stop`."""
        while not stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the API down: try again next pass
                log.warning("pool loop: %s: %s", type(exc).__name__, exc)
            stop.wait(interval)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _ns(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("namespace") or "")


def _owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(pool name, pool uid) when a ProxyPool controls this Proxy and its label says so."""
    meta = _meta(obj)
    raw = meta.get("labels")
    labels: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for ref in meta.get("ownerReferences") or ():
        if (isinstance(ref, dict) and ref.get("kind") == KIND and ref.get("controller") is True
                and str(ref.get("apiVersion", "")).startswith("crawl.example.com/") and labels.get(LABEL_POOL) == ref.get("name")):
            return str(ref.get("name")), str(ref.get("uid"))
    return None
