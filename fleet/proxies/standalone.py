"""Standalone mode: Proxies declared as manifests (`--proxies PATH`), their
objects and status kept in Redis (`fleet.store.proxies`, `PX_OBJECTS`), so
every controller replica and `fleet get px` see the same thing.

The manifests are the spec; Redis adds what the API server would: a UID, a
generation that moves when the spec does, a creation time, finalizers, a
deletion mark and a `resourceVersion` for compare-and-set writes. The UID is
derived from the installation and the Proxy's key, so a Redis that lost its
data gives the same instance names back and the creates adopt what exists.

A Proxy whose manifest is removed is marked deleting and goes through the
finalizer's rules like a deleted Kubernetes object. While any manifest fails
to parse (or the path cannot be read), nothing is marked deleting: the
Proxies a broken file declared would look removed, and one bad edit must not
delete a fleet. Everything else is still applied. A declared Proxy that is
still being deleted is created again once its old instance is gone.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from fleet.proxies.decide import rfc3339
from fleet.proxies.manifests import ManifestError, fingerprint, load_manifests, parse_proxy
from fleet.proxies.model import Proxy, ProxyStatus, to_object
from fleet.proxies.reconciler import CloudInitUnavailable, Conflict
from fleet.store import Proxies as ProxyStore

log = logging.getLogger("fleet.proxies")

MAX_SECRET = 64 * 1024
CAS_RETRIES = 5


class Standalone:
    def __init__(self, store: ProxyStore, path: str, installation: str, secrets_dir: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.path, self.installation, self.secrets_dir, self.clock = store, path, installation, secrets_dir, clock
        self.errors: list[ManifestError] = []
        self._seen = ""

    # -- Objects --------------------------------------------------------------------

    def ready(self) -> bool:
        return True  # the objects are in Redis: what it holds is what there is

    def get(self, key: str) -> Proxy | None:
        raw = self.store.object(key)
        if raw is None:
            return None
        try:
            return parse_proxy(json.loads(raw), source=f"redis {key}")
        except (ValueError, ManifestError) as exc:  # a hand-edited or corrupt entry: say so, treat as absent
            log.warning("unreadable standalone Proxy in Redis", extra={"fields": {"proxy": key, "error": str(exc)[:300]}})
            return None

    def keys(self) -> list[str]:
        return sorted(self.store.objects())

    def all(self) -> list[Proxy]:
        return [p for k in self.keys() if (p := self.get(k)) is not None]

    def write_status(self, p: Proxy, status: ProxyStatus) -> Proxy:
        return self._put(dataclasses.replace(p, status=status), p.resource_version)

    def set_finalizers(self, p: Proxy, finalizers: tuple[str, ...]) -> Proxy | None:
        if p.deleting and not finalizers:
            if not self.store.put_object(p.key, p.resource_version, ""):
                raise Conflict(p.key)
            return None
        return self._put(dataclasses.replace(p, finalizers=finalizers), p.resource_version)

    def cloud_init(self, p: Proxy) -> str:
        ci = p.spec.cloud_init
        if ci.secret is None:
            return ci.inline or ""
        where = f"secret {p.namespace}/{ci.secret.name} key {ci.secret.key!r}"
        if not self.secrets_dir:
            raise CloudInitUnavailable(f"{where}: standalone mode reads secrets from --secrets-dir, which is not set")
        path = os.path.join(self.secrets_dir, p.namespace, ci.secret.name, ci.secret.key)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_SECRET + 1)
        except OSError as exc:
            raise CloudInitUnavailable(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_SECRET:
            raise CloudInitUnavailable(f"{where}: larger than {MAX_SECRET} bytes")
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise CloudInitUnavailable(f"{where}: not UTF-8 text") from None

    def _put(self, p: Proxy, expected: str) -> Proxy:
        new = dataclasses.replace(p, resource_version=str(int(expected or "0") + 1))
        if not self.store.put_object(p.key, expected, json.dumps(to_object(new), separators=(",", ":"))):
            raise Conflict(p.key)
        return new

    # -- the manifests ------------------------------------------------------------------

    def uid_of(self, key: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleet://{self.installation}/proxies/{key}"))

    def sync(self) -> list[str]:
        """Bring Redis in line with the manifests; the keys that changed."""
        declared, errors = load_manifests(self.path)
        self.errors = errors
        for err in errors:
            log.warning("Proxy manifest not applied: %s", err)
        if errors:
            log.warning("Proxy manifests have errors: no Proxy is deleted until they are fixed")
        changed = []
        wanted = {p.key: p for p in declared}
        for key, p in wanted.items():
            if self._merge(key, p):
                changed.append(key)
        for key in self.keys():
            if key not in wanted and not errors and self._retire(key):
                changed.append(key)
        self.store.mark_synced(self.clock())  # every declared Proxy is in Redis now (GC's live set)
        return changed

    def _merge(self, key: str, declared: Proxy) -> bool:
        for _ in range(CAS_RETRIES):
            cur = self.get(key)
            if cur is None:
                new = dataclasses.replace(declared, uid=self.uid_of(key), generation=1, status=ProxyStatus(),
                                          finalizers=(),
                                          created_at=rfc3339(self.clock()), resource_version="", deleting=False)
                try:
                    self._put(new, "")
                    return True
                except Conflict:
                    continue
            if cur.deleting:
                return False  # finish deleting first; the next sync declares it again
            annotations = dict(declared.annotations)
            if cur.spec == declared.spec and dict(cur.annotations) == annotations:
                return False
            gen = cur.generation + 1 if cur.spec != declared.spec else cur.generation
            try:
                self._put(dataclasses.replace(cur, spec=declared.spec, annotations=annotations, generation=gen),
                          cur.resource_version)
                return True
            except Conflict:
                continue
        return False

    def _retire(self, key: str) -> bool:
        """A Proxy no longer declared: mark it deleting (removed at once without a finalizer)."""
        for _ in range(CAS_RETRIES):
            cur = self.get(key)
            if cur is None or cur.deleting:
                return False
            try:
                if not cur.finalizers:
                    if self.store.put_object(key, cur.resource_version, ""):
                        return True
                    continue
                self._put(dataclasses.replace(cur, deleting=True, deletion_timestamp=rfc3339(self.clock())),
                          cur.resource_version)
                return True
            except Conflict:
                continue
        return False

    def run(self, stop: threading.Event, on_change: Callable[[Iterable[str]], None], every: float = 1.0,
            full_every: float = 10.0) -> None:
        """Re-read the manifests when they change (and every `full_every` s
        regardless), handing changed keys to `on_change`."""
        last_full = 0.0
        while not stop.is_set():
            try:
                fp = fingerprint(self.path)
                if fp != self._seen or time.monotonic() - last_full >= full_every:
                    self._seen, last_full = fp, time.monotonic()
                    changed = self.sync()
                    if changed:
                        on_change(changed)
            except Exception as exc:  # Redis down: the next pass tries again
                log.warning("reading Proxy manifests failed: %s: %s", type(exc).__name__, exc)
            stop.wait(every)
