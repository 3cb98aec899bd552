"""Cluster mode: the Proxy objects of the API server, read from a watch cache
(`fleet.kube.Watcher`: list+watch, bookmarks, relist on 410) and written through
`fleet.kube.Writer` (status and finalizers, each with the resourceVersion
read, so two replicas can't interleave).

It watches only the namespaces of `--proxy-namespaces` (one namespaced
list+watch each; a cluster-wide one only for `*`), and serves a Proxy only
while this installation holds its namespace's claim (`fleet.proxies.claims`):
a Proxy of a namespace another installation serves is invisible here (`get`
answers None, `keys` leaves it out), so nothing is ever written to it.

Every replica watches and keeps its own cache; which replica reconciles a
Proxy is settled in Redis (the reconciler's claim). A watch event makes a
Proxy due only when something the reconciler reads changed: it is new, or
its generation, deletion mark, finalizers or annotations moved. The echo of
our own status write is not a reason to reconcile again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from fleet import kube
from fleet.proxies.claims import Claims
from fleet.proxies.errors import CloudInitUnavailable, Conflict
from fleet.proxies.manifests import ManifestError, parse_proxy
from fleet.proxies.model import Proxy, ProxyStatus
from fleet.settings import ALL_NAMESPACES, Settings

log = logging.getLogger("fleet.proxies")

SECRET_TTL = 10.0  # seconds a Secret's key is reused before it is read again


def _rv(p: Proxy) -> int:
    return int(p.resource_version) if p.resource_version.isdigit() else -1


def _relevant(old: Proxy | None, new: Proxy) -> bool:
    return old is None or (old.generation, old.deleting, old.finalizers, dict(old.annotations)) != (
        new.generation, new.deleting, new.finalizers, dict(new.annotations))


class Cluster:
    def __init__(self, writer: kube.Writer, clock: Callable[[], float] = time.monotonic,
                 namespaces: tuple[str, ...] = (ALL_NAMESPACES,), claims: Claims | None = None) -> None:
        self.writer = writer
        self.clock = clock
        self.namespaces = namespaces
        self.claims = claims  # None: every Proxy watched is served (tests of one installation)
        self._synced_namespaces: set[str] = set()
        self._cache: dict[str, Proxy] = {}
        self._secrets: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._reported: set[str] = set()

    @classmethod
    def connect(cls, settings: Settings) -> Cluster:
        writer, _ = kube.connect(settings)
        if writer is None:
            raise RuntimeError("no cluster configured")
        scope = settings.proxy_scope
        claims = Claims(writer, settings.installation_id, scope)
        return cls(writer, namespaces=scope, claims=claims)

    def claim(self) -> None:
        """At start: claim this installation's namespaces (ScopeConflict when another serves one)."""
        if self.claims is not None:
            self.claims.acquire()

    def _served(self, namespace: str) -> bool:
        return self.claims is None or self.claims.allowed(namespace)

    # -- Objects --------------------------------------------------------------------

    in_store = False  # the watch cache holds them: `get`

    def ready(self) -> bool:
        return self._synced.is_set()

    def decode(self, key: str, raw: bytes | str | None) -> Proxy | None:
        return self.get(key)

    def get(self, key: str) -> Proxy | None:
        with self._lock:
            p = self._cache.get(key)
        return p if p is not None and self._served(p.namespace) else None

    def keys(self) -> list[str]:
        with self._lock:
            keys = sorted(self._cache)
        served: dict[str, bool] = {}
        out = []
        for k in keys:
            ns = k.split("/", 1)[0]
            if ns not in served:
                served[ns] = self._served(ns)
            if served[ns]:
                out.append(k)
        return out

    def write_status(self, p: Proxy, status: ProxyStatus) -> Proxy:
        return self._write(p, lambda: self.writer.patch_status(kube.PROXY, p.namespace, p.name, p.resource_version,
                                                               status.to_dict()))

    def set_finalizers(self, p: Proxy, finalizers: tuple[str, ...]) -> Proxy | None:
        try:
            return self._write(p, lambda: self.writer.patch_finalizers(kube.PROXY, p.namespace, p.name, p.resource_version,
                                                                       list(finalizers)))
        except kube.NotFound:
            self._forget(p.key)
            return None

    def cloud_init(self, p: Proxy) -> str:
        ci = p.spec.cloud_init
        if ci.secret is None:
            return ci.inline or ""
        where = (p.namespace, ci.secret.name, ci.secret.key)
        now = self.clock()
        with self._lock:
            hit = self._secrets.get(where)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            text = self.writer.read_secret_key(*where)
        except kube.KubeError as exc:  # the message names the Secret and key, never the value
            raise CloudInitUnavailable(str(exc)) from None
        with self._lock:
            if len(self._secrets) > 10_000:
                self._secrets.clear()
            self._secrets[where] = (now + SECRET_TTL, text)
        return text

    def _write(self, p: Proxy, request: Callable[[], dict[str, Any]]) -> Proxy:
        try:
            obj = request()
        except kube.Conflict:
            raise Conflict(p.key) from None
        except kube.NotFound:
            self._forget(p.key)
            raise Conflict(p.key) from None
        new = self._parse(obj)
        if new is None:
            raise Conflict(p.key)
        self._keep(new)
        return new

    # -- the watch ----------------------------------------------------------------------

    def run(self, stop: threading.Event, on_change: Callable[[Iterable[str]], None]) -> None:
        """One list+watch per namespace of the scope (one across all for `*`),
        and the claims' renewal, until `stop`."""
        if self.claims is not None:
            def gained(ns: str) -> None:
                with self._lock:
                    keys = [k for k in self._cache if k.startswith(ns + "/")]
                if keys:
                    on_change(keys)

            self.claims.on_gained = gained
        watched = [None] if self.namespaces == (ALL_NAMESPACES,) else list(self.namespaces)
        threads = [threading.Thread(target=self._watch, args=(stop, on_change, ns, len(watched)), daemon=True,
                                    name=f"fleet-proxy-watch-{ns or 'all'}") for ns in watched]
        if self.claims is not None:
            threads.append(threading.Thread(target=self.claims.run, args=(stop,), daemon=True, name="fleet-proxy-claims"))
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _watch(self, stop: threading.Event, on_change: Callable[[Iterable[str]], None], namespace: str | None,
               watchers: int) -> None:
        def on_event(kind: str, obj: dict[str, Any]) -> None:
            p = self._parse(obj)
            if p is None:
                return
            if kind == kube.DELETED:
                self._forget(p.key)
                on_change([p.key])
                return
            with self._lock:
                old = self._cache.get(p.key)
            if self._keep(p) and _relevant(old, p):
                on_change([p.key])

        def on_synced(objs: list[dict[str, Any]]) -> None:
            present = {f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}" for o in objs}
            with self._lock:
                gone = [k for k in self._cache if k not in present and (namespace is None or k.startswith(namespace + "/"))]
                for k in gone:
                    del self._cache[k]
                self._synced_namespaces.add(namespace or ALL_NAMESPACES)
                synced = len(self._synced_namespaces) >= watchers
            if synced:
                self._synced.set()
            if gone:
                on_change(gone)

        kube.Watcher(self.writer.api_client, kube.PROXY, on_event, on_synced=on_synced, namespace=namespace).run(stop)

    def _parse(self, obj: dict[str, Any]) -> Proxy | None:
        try:
            return parse_proxy(obj, source="the API server")
        except ManifestError as exc:  # the CRD validates; this is an object the CRD let through (an older schema)
            meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if key not in self._reported and len(self._reported) < 1000:
                self._reported.add(key)
                log.warning("ignoring a Proxy object fleet cannot read", extra={"fields": {"proxy": key, "error": str(exc)[:300]}})
            return None

    def _keep(self, p: Proxy) -> bool:
        """Cache `p` unless a newer version is cached already; whether it was kept."""
        with self._lock:
            cur = self._cache.get(p.key)
            if cur is not None and _rv(cur) > _rv(p) >= 0:
                return False
            self._cache[p.key] = p
            return True

    def _forget(self, key: str) -> None:
        with self._lock:
            self._cache.pop(key, None)
