"""Standalone mode: ProxyPools declared in the `--proxies` manifests (`kind:
ProxyPool` documents beside the Proxies), their members and status in Redis
(`InRedis`, the `Where` of `fleet.pools.controller.PoolController`: the same
controller and decision as a cluster's).

- **The pools** are the manifests' ProxyPool documents (namespace "default"
  when unset), each read by `parse_pool` as the API server's copy would be;
  Redis keeps what the API server would add (`fleet.store.pools`, `POOL_OBJECTS`):
  a uid (derived from the installation and the pool's key, as standalone
  Proxies'), a generation that moves when the effective spec does, the
  creation time and the status the loop writes.
- **The members** are standalone Proxies (`fleet.proxies.standalone`,
  `PX_OBJECTS`) created with `Standalone.add`, annotated with their pool's
  uid (`POOL_OWNER`) and template hash, labelled with the pool; the Proxy
  reconciler provisions them like any other, `fleet get px -l pool=NAME`
  shows them. A deleted member is retired (`Standalone.retire`): its
  finalizer deletes its instance.
- **A pool removed from the manifests** leaves orphans, which the controller
  deletes (reason `orphan`), and its record goes once no member is left;
  never while any manifest fails to read (`Listing.complete` False), as
  standalone Proxies are never retired then: one bad edit must not delete a
  fleet. A ProxyPool document fleet cannot use is reported (and so counts as
  a failed read).
- **Scale** (`fleet scale pool NAME --replicas N`, and the autoscaler's
  `scale_to`) writes an override `{"replicas": N, "manifest": M}` (`POOL_SCALE`),
  M the manifest's `spec.replicas` at that moment. The override holds while
  the manifest still says M, across any number of re-reads; once the
  manifest's replicas changes, the manifest wins and the override is dropped.
  That is `kubectl scale` then `kubectl apply`: apply changes replicas only
  when the applied file's value changed (its three-way merge against
  last-applied), so a scale survives re-applying an unchanged file.

Only the pool loop's holder writes records (`write=True`); `fleet get pools`
reads the same view without writing.
"""

from __future__ import annotations

import builtins
import copy
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.durations import rfc3339
from fleet.pools.controller import Listing, NameTaken
from fleet.pools.model import API_VERSION, KIND, LABEL_HASH, Pool, PoolError, parse_pool
from fleet.proxies.manifests import DEFAULT_NAMESPACE, ManifestError, Other, fingerprint, load_all, parse_proxy
from fleet.proxies.model import LABEL_POOL, POOL_OWNER, Proxy, to_object
from fleet.proxies.reconciler import json_object
from fleet.proxies.standalone import Standalone, stored_form
from fleet.store.pools import PoolRecords

log = logging.getLogger("fleet.pools")


@dataclass(frozen=True)
class Declared:
    """One ProxyPool document: the object (namespace defaulted), where it was read."""

    obj: dict[str, Any]
    source: str

    @property
    def key(self) -> str:
        return f"{self.obj['metadata']['namespace']}/{self.obj['metadata']['name']}"

    @property
    def file(self) -> str:
        return self.source.rpartition("#")[0] or self.source

    @property
    def replicas(self) -> Any:
        """spec.replicas as the manifest has it (None: unset)."""
        return self.obj["spec"].get("replicas")


@dataclass
class Manifests:
    pools: list[Declared] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the pools' problems (each names its document and field)
    complete: bool = True  # every manifest read and every pool usable


def declared_pools(path: str) -> Manifests:
    """The ProxyPools of `path` (`fleet.proxies.manifests.load_all`), each checked by `parse_pool`."""
    _, others, errors = load_all(path)
    return pools_of(others, errors)


def pools_of(others: Iterable[Other], errors: Sequence[object]) -> Manifests:
    """The ProxyPools among the documents `load_all` read besides Proxies (`errors`: its problems)."""
    out = Manifests(complete=not errors)
    seen: dict[str, str] = {}
    for o in others:
        try:
            d = _declared(o)
        except (PoolError, ManifestError) as exc:
            out.errors.append(f"{o.source}{' ' + o.prefix if o.prefix else ''}: {exc}")
            out.complete = False
            continue
        if d.key in seen:
            out.errors.append(f"{o.source}: metadata.name: duplicate of proxypool {d.key} in {seen[d.key]}")
            out.complete = False
            continue
        seen[d.key] = o.source
        out.pools.append(d)
    return out


def _declared(o: Other) -> Declared:
    obj = copy.deepcopy(dict(o.obj))
    if obj.get("apiVersion") != API_VERSION:
        raise PoolError(f"apiVersion: must be {API_VERSION!r}")
    unknown = sorted(set(obj) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        raise PoolError(f"{unknown[0]}: unknown key")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise PoolError("metadata: is required and must be a mapping")
    meta.setdefault("namespace", DEFAULT_NAMESPACE)
    if meta["namespace"] is None:
        meta["namespace"] = DEFAULT_NAMESPACE
    obj.pop("status", None)  # the status is the loop's (Redis), never a manifest's
    parse_pool(obj)  # PoolError names the field
    if not isinstance(obj.get("spec"), dict):
        obj["spec"] = {}
    return Declared(obj, o.source)


def effective(d: Declared, record: Mapping[str, Any] | None, override: Mapping[str, Any] | None,
              uid: str, now: float) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(the pool object, its record, whether the override holds) from its manifest, its record in Redis and
    a scale's override (pure): replicas is the override's while the manifest still says what it said when
    the override was written; the generation moves when the effective spec does."""
    holds = override is not None and override.get("manifest") == d.replicas and isinstance(override.get("replicas"), int)
    spec = dict(d.obj["spec"])
    if holds:
        assert override is not None
        spec["replicas"] = override["replicas"]
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]
    rec: dict[str, Any] = dict(record) if record else {"uid": uid, "created": rfc3339(now), "generation": 0, "specHash": ""}
    if rec.get("specHash") != digest:
        rec["generation"] = int(rec.get("generation") or 0) + 1
        rec["specHash"] = digest
    meta = {**d.obj["metadata"], "uid": rec["uid"], "generation": rec["generation"], "creationTimestamp": rec["created"],
            "resourceVersion": str(rec["generation"])}
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
    if isinstance(rec.get("status"), dict):
        obj["status"] = rec["status"]
    return obj, rec, holds


def member_object(p: Proxy) -> dict[str, Any]:
    """A standalone Proxy as the controller reads members: its pool annotations as the label and the
    ownerReference a cluster member has (cloud-init redacted: the decision never reads it)."""
    obj = to_object(p, redact=True)
    owner = p.annotations.get(POOL_OWNER)
    if owner and p.pool:
        meta = obj["metadata"]
        meta["labels"] = {**meta.get("labels", {}), LABEL_HASH: p.annotations.get(LABEL_HASH, "")}
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": KIND, "name": p.pool, "uid": owner,
                                    "controller": True, "blockOwnerDeletion": True}]
    return obj


FOLLOW_WAIT = 10.0  # seconds the pool loop waits for the Proxies' sync to read changed manifests before it does


class InRedis:
    """The standalone `Where`: pools from the manifests, records and overrides in Redis, members as standalone
    Proxies. `on_change(keys)`: Proxy keys created or retired (the reconciler takes them at once)."""

    def __init__(self, records: PoolRecords, proxies: Standalone, path: str, installation: str,
                 clock: Callable[[], float] = time.time, on_change: Callable[[Iterable[str]], None] = lambda keys: None,
                 write: bool = True, follow: bool = False) -> None:
        self.records, self.proxies, self.path, self.installation = records, proxies, path, installation
        self.clock, self.on_change, self.write = clock, on_change, write
        # the controller's: `proxies` runs (its sync reads the files within a second of a change), so a pass
        # that sees them moved keeps what it had until that read is there, FOLLOW_WAIT at most
        self.follow = follow
        self._behind_since: float | None = None
        self.errors: list[str] = []
        self._reported: set[str] = set()
        self._current: dict[str, dict[str, Any]] = {}  # pool key -> its record, as the last list left it
        self._declared: dict[str, Declared] = {}
        self._manifests: tuple[str, Manifests] | None = None  # (the files' fingerprint, what they declared)
        self._records = True  # the last pass found pool records in Redis (members may exist)
        self._built: dict[str, tuple[Proxy, dict[str, Any]]] = {}  # key -> (the Proxy, its member object)

    def uid_of(self, key: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleet://{self.installation}/proxypools/{key}"))

    def pools(self) -> tuple[list[dict[str, Any]], Manifests]:
        """The declared pools as objects (records written when `write`)."""
        m = self._declared_pools()
        self.errors = m.errors
        for e in m.errors:
            if e not in self._reported:
                self._reported.add(e)
                log.warning("ProxyPool manifest not applied: %s", e)
        records, scales = self.records.records(), self.records.scales()
        self._records = bool(records)
        now = self.clock()
        out = []
        self._declared = {d.key: d for d in m.pools}
        for d in m.pools:
            old = json_object(records.get(d.key))
            override = json_object(scales.get(d.key))
            obj, rec, holds = effective(d, old, override, self.uid_of(d.key), now)
            if self.write:
                if rec != old:
                    self.records.put_record(d.key, json.dumps(rec, sort_keys=True))
                if override is not None and not holds:  # the manifest's replicas changed: it wins
                    self.records.drop_scale(d.key)
                    log.info("ProxyPool scale override dropped: the manifest's replicas changed",
                             extra={"fields": {"pool": d.key, "replicas": d.replicas}})
            self._current[d.key] = rec
            out.append(obj)
        return out, m

    def _declared_pools(self) -> Manifests:
        """`declared_pools`, parsed again only when the files' `fingerprint` moved (a pass every 2 s must not
        parse a fleet's manifests: issue 24)."""
        fp = fingerprint(self.path)
        if self._manifests is not None and self._manifests[0] == fp:
            return self._manifests[1]
        parsed = self.proxies.parsed  # what the Proxies' sync read, if the files did not move since
        now = time.monotonic()
        if self._behind_since is None:
            self._behind_since = now
        if parsed is not None and parsed[0] == fp:
            self._manifests, self._behind_since = (fp, pools_of(parsed[1], parsed[2])), None
        elif self.follow and self._manifests is not None and now - self._behind_since < FOLLOW_WAIT:
            return self._manifests[1]  # the sync reads them within a second or two: one parse, not two
        else:
            self._manifests, self._behind_since = (fp, declared_pools(self.path)), None
        return self._manifests[1]

    # -- Where ----------------------------------------------------------------------------

    def list(self, namespace: str | None) -> Listing:
        pools, m = self.pools()
        # no pool declared and none recorded: no member can exist (a member's pool keeps its record until the
        # member is gone), so the Proxies are not read
        proxies = self._member_objects() if pools or self._records else []
        if namespace is not None:
            pools = [o for o in pools if o["metadata"]["namespace"] == namespace]
            proxies = [o for o in proxies if o["metadata"]["namespace"] == namespace]
        if self.write and m.complete:  # a removed pool's record goes with its last member
            owned = {(o["metadata"]["namespace"], o["metadata"].get("labels", {}).get(LABEL_POOL))
                     for o in proxies if o["metadata"].get("ownerReferences")}
            for key in set(self.records.records()) - set(self._declared):
                ns, _, name = key.partition("/")
                if (namespace is None or ns == namespace) and (ns, name) not in owned:
                    self.records.drop_record(key)
                    self.records.drop_scale(key)
                    self._current.pop(key, None)
        return Listing(pools, proxies, complete=m.complete)

    def _member_objects(self) -> builtins.list[dict[str, Any]]:
        """`member_object` of every standalone Proxy, built again only for a Proxy that changed (the
        Proxies' memo hands back the same decoded Proxy while its stored form is the same)."""
        built = {}
        for p in self.proxies.all():
            hit = self._built.get(p.key)
            built[p.key] = hit if hit is not None and hit[0] is p else (p, member_object(p))
        self._built = built
        return [obj for _, obj in built.values()]

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        owner = meta["ownerReferences"][0]
        p = parse_proxy(body, source=f"proxypool {namespace}/{owner['name']}")
        pool = self._declared.get(f"{namespace}/{owner['name']}")
        p = stored_form(p, pool.file if pool is not None else "")
        p = dataclasses.replace(p, annotations={**p.annotations, POOL_OWNER: owner["uid"],
                                                LABEL_HASH: meta["labels"].get(LABEL_HASH, "")})
        if not self.proxies.add(p):
            raise NameTaken(p.key)
        self.on_change([p.key])

    def delete(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        done = self.proxies.retire(key)
        if done:
            self.on_change([key])
        return done

    def scale(self, pool: Pool, replicas: int) -> str:
        d = self._declared.get(pool.key)
        self.records.put_scale(pool.key, json.dumps({"replicas": replicas, "manifest": d.replicas if d else None}))
        return pool.resource_version

    def write_status(self, pool: Pool, resource_version: str, status: Mapping[str, Any]) -> None:
        rec = self._current.get(pool.key)
        if rec is None:
            return
        rec = {**rec, "status": dict(status)}
        self._current[pool.key] = rec
        self.records.put_record(pool.key, json.dumps(rec, sort_keys=True))


def set_replicas(records: PoolRecords, path: str, namespace: str, name: str, replicas: int) -> Declared | None:
    """`fleet scale pool` in standalone mode: the override (see the module's rule); None when no manifest
    declares the pool."""
    m = declared_pools(path)
    d = next((d for d in m.pools if d.key == f"{namespace}/{name}"), None)
    if d is None:
        return None
    records.put_scale(d.key, json.dumps({"replicas": replicas, "manifest": d.replicas}))
    return d
