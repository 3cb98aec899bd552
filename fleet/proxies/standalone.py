"""Standalone mode: Proxies declared as manifests (`--proxies PATH`), their
objects and status kept in Redis (`fleet.store.proxies`, `PX_OBJECTS`), so
every controller replica and `fleet get px` see the same thing.

The manifests are the spec; Redis adds what the API server would: a UID, a
generation that moves when the spec does, a creation time, finalizers, a
deletion mark and a `resourceVersion` for compare-and-set writes. The UID is
derived from the installation and the Proxy's key, so a Redis that lost its
data gives the same instance names back and the creates adopt what exists.

The CRD's rules hold here too: `spec.provider` is immutable (its CEL rule
`self == oldSelf`), so a manifest that changes it for an existing Proxy is
reported (file#document: spec.provider: why) and not applied -- the object
keeps its spec, so its instance stays managed by the provider that made it --
while every other Proxy still applies. To move a Proxy, remove it (its
instance is deleted) and declare it again.

No cloud-init text is stored in Redis (where every pod with the broker URL
could read it): inline text is kept as its SHA-256 and size with the
manifest file it is in (`model.InlineDigest`), and the text is taken from
the manifests when a create needs it -- as last read by `sync`, or read
again from that file if it changed since, never a text whose hash differs.
kubectl's last-applied annotation (the whole manifest) is stored redacted.
A `secretRef` is read from `--secrets-dir` at the same moment.

ProxyPools (`kind: ProxyPool` documents of the same files) are
`fleet.pools.standalone`'s: it adds their members here (`add`, annotated
`POOL_OWNER`) and retires them (`retire`); `sync` never retires a member and
refuses a manifest that names one or sets that annotation. A member's inline
cloud-init is its pool template's text, found the same way.

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
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleet.proxies.decide import rfc3339
from fleet.proxies.errors import CloudInitUnavailable, Conflict
from fleet.proxies.manifests import Declared, ManifestError, Other, fingerprint, load_all, parse_proxy
from fleet.proxies.model import INLINE_DIGEST, LAST_APPLIED, POOL_OWNER, CloudInit, InlineDigest, Proxy, ProxyStatus, to_object
from fleet.proxies.table import redacted
from fleet.store import Proxies as ProxyStore

log = logging.getLogger("fleet.proxies")

MAX_SECRET = 64 * 1024
CAS_RETRIES = 5
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)


class Standalone:
    def __init__(self, store: ProxyStore, path: str, installation: str, secrets_dir: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.path, self.installation, self.secrets_dir, self.clock = store, path, installation, secrets_dir, clock
        self.errors: list[ManifestError] = []  # the last sync's: the manifests' problems, then refused edits
        self._seen = ""
        self.again = False  # the last sync left a declared Proxy to declare again (its old one still deleting)
        self._texts: dict[str, str] = {}  # inline cloud-init by SHA-256, as the last sync read it
        self._decoded: dict[str, tuple[bytes | str, Proxy]] = {}  # key → (stored form, its Proxy): each parsed once
        # the last sync's read: (the files' fingerprint before it, the documents of other kinds, the problems),
        # so the ProxyPool loop parses a fleet's manifests only once per change (fleet.pools.standalone)
        self.parsed: tuple[str, list[Other], list[ManifestError]] | None = None

    # -- Objects --------------------------------------------------------------------

    in_store = True  # the reconciler reads an object with the rest of its step, and `decode`s it

    def ready(self) -> bool:
        return True  # the objects are in Redis: what it holds is what there is

    def get(self, key: str) -> Proxy | None:
        return self.decode(key, self.store.object(key))

    def decode(self, key: str, raw: bytes | str | None) -> Proxy | None:
        """A stored object (None when absent or unreadable). The last form read of each key is kept with its
        Proxy, so an object that did not change is not parsed again."""
        if raw is None:
            self._decoded.pop(key, None)
            return None
        hit = self._decoded.get(key)
        if hit is not None and hit[0] == raw:
            return hit[1]
        try:
            p = decode(raw, source=f"redis {key}")
        except (ValueError, ManifestError) as exc:  # a hand-edited or corrupt entry: say so, treat as absent
            log.warning("unreadable standalone Proxy in Redis", extra={"fields": {"proxy": key, "error": str(exc)[:300]}})
            return None
        text = p.spec.cloud_init.inline
        if text is not None:  # stored with its text by an older version: the next write (sync's first) stores the digest
            p = stored_form(p, "")
            self._texts.setdefault(InlineDigest.of(text).sha256, text)
        self._decoded[key] = (raw, p)
        return p

    def keys(self) -> list[str]:
        return sorted(self.store.object_keys())

    def all(self) -> list[Proxy]:
        return self._all(self.store.objects())

    def _all(self, stored: Mapping[str, bytes | str]) -> list[Proxy]:
        for gone in set(self._decoded) - set(stored):  # the memo is shared by the loop's and the tasks' threads
            self._decoded.pop(gone, None)
        return [p for k in sorted(stored) if (p := self.decode(k, stored[k])) is not None]

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
        if ci.digest is not None:
            return self._inline(p, ci.digest)
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

    def _inline(self, p: Proxy, digest: InlineDigest) -> str:
        """The inline text whose hash the object holds: as the last sync read
        it, else read again from its manifest file (another replica applied
        an edit this one has not read yet)."""
        text = self._texts.get(digest.sha256)
        if text is not None:
            return text
        where = f"inline cloud-init of {p.key}"
        if not self._inside(digest.file):
            raise CloudInitUnavailable(f"{where}: its manifest file {digest.file!r} is not under --proxies {self.path}")
        declared, others, errors = load_all(digest.file)
        for d in declared:
            ci = d.proxy.spec.cloud_init
            if d.proxy.key == p.key and ci.inline is not None and InlineDigest.of(ci.inline) == digest:
                self._texts[digest.sha256] = ci.inline
                return ci.inline
        for text in template_texts(o for o in others if _name_of(o) == (p.namespace, p.pool)):
            if InlineDigest.of(text, digest.file) == digest:  # a pool member's: its pool's template
                self._texts[digest.sha256] = text
                return text
        why = f"{len(errors)} problem(s) reading it" if errors else "it declares another text now (applied at the next sync)"
        raise CloudInitUnavailable(f"{where}: {digest.file} no longer holds the text applied ({why})")

    def _inside(self, file: str) -> bool:
        if not file:
            return False
        here = os.path.abspath(self.path)
        there = os.path.abspath(file)
        return there == here or os.path.dirname(there) == here

    def _put(self, p: Proxy, expected: str) -> Proxy:
        new = dataclasses.replace(p, resource_version=str(int(expected or "0") + 1))
        if not self.store.put_object(p.key, expected, encode(new)):
            raise Conflict(p.key)
        return new

    # -- the manifests ------------------------------------------------------------------

    def uid_of(self, key: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleet://{self.installation}/proxies/{key}"))

    def sync(self) -> list[str]:
        """Bring Redis in line with the manifests; the keys that changed."""
        fp = fingerprint(self.path)  # before the read: a file changed during it reads as changed next time
        declared, others, errors = load_all(self.path)
        self.parsed = (fp, others, errors)
        before = self._texts
        self._texts = {InlineDigest.of(t).sha256: t for d in declared if (t := d.proxy.spec.cloud_init.inline) is not None}
        self._texts.update({InlineDigest.of(t).sha256: t for t in template_texts(others)})  # the pools' members'
        refused: list[ManifestError] = []
        changed = []
        self.again = False
        wanted = {d.proxy.key: d for d in declared}
        stored = self.store.objects()  # one read of them all; a write that loses a race reads its object again
        current = {p.key: p for p in self._all(stored)}
        members = {k for k, p in current.items() if POOL_OWNER in p.annotations}
        for key, d in wanted.items():
            if POOL_OWNER in d.proxy.annotations:
                refused.append(d.error(f"metadata.annotations.{POOL_OWNER}", "is set by fleet on ProxyPool members only"))
            elif key in members:
                refused.append(d.error("metadata.name", f"{key} is a ProxyPool member's name; declare another"))
            elif self._merge(key, d, refused, before, current.get(key)):
                changed.append(key)
        for key in sorted(stored):  # a pool's member is the pool loop's to delete (fleet.pools.standalone)
            if key not in wanted and key not in members and not errors and self.retire(key):
                changed.append(key)
        self.errors = errors + refused
        for err in self.errors:
            log.warning("Proxy manifest not applied: %s", err)
        if errors:
            log.warning("Proxy manifests have errors: no Proxy is deleted until they are fixed")
        self.store.mark_synced(self.clock())  # every declared Proxy is in Redis now (GC's live set)
        return changed

    def _merge(self, key: str, d: Declared, refused: list[ManifestError], texts_before: Mapping[str, str],
               first: Proxy | None) -> bool:
        """`first`: the object as sync read it (its first try); a try that loses a race reads it again."""
        declared = stored_form(d.proxy, d.file)
        for attempt in range(CAS_RETRIES):
            cur = first if attempt == 0 else self.get(key)
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
                self.again = True  # finish deleting first; a sync while `again` declares it again
                return False
            if cur.spec.provider != declared.spec.provider:  # the CRD's CEL rule: refused, nothing of it applied
                refused.append(d.error("spec.provider", (
                    f"is immutable: {key} was created on provider {cur.spec.provider!r}, got {declared.spec.provider!r}; "
                    "the edit is not applied (to move it, remove the Proxy, which deletes its instance, then declare it again)")))
                kept = cur.spec.cloud_init.digest  # its applied text, though the manifest now holds another
                if kept is not None and kept.sha256 in texts_before:
                    self._texts[kept.sha256] = texts_before[kept.sha256]
                return False
            gen = cur.generation + 1 if cur.spec != declared.spec else cur.generation
            new = dataclasses.replace(cur, spec=declared.spec, annotations=dict(declared.annotations), pool=declared.pool,
                                      generation=gen)
            if encode(new) == encode(cur):
                return False
            try:
                self._put(new, cur.resource_version)
                return True
            except Conflict:
                continue
        return False

    def add(self, p: Proxy) -> bool:
        """A Proxy no manifest declares (a ProxyPool's member), as `sync` creates one: False when the key is taken."""
        new = dataclasses.replace(p, uid=self.uid_of(p.key), generation=1, status=ProxyStatus(), finalizers=(),
                                  created_at=rfc3339(self.clock()), resource_version="", deleting=False)
        try:
            self._put(new, "")
        except Conflict:
            return False
        return True

    def retire(self, key: str) -> bool:
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
        """Re-read the manifests only when they may read differently (their
        `fingerprint`: names, inodes, sizes, mtimes), when Redis lost the
        sync mark (its data), or while a declared Proxy waits for its old one
        to be deleted (every `full_every` s); otherwise only stamp the sync
        (GC's freshness, `PX_SYNCED`) every `full_every` s: one SET, no YAML
        parse and no read per Proxy. Changed keys go to `on_change`."""
        last_full = 0.0
        while not stop.is_set():
            try:
                fp = fingerprint(self.path)
                if self.due(fp, time.monotonic() - last_full >= full_every):
                    changed = self.sync()
                    self._seen, last_full = fp, time.monotonic()  # only once applied: a failed sync is tried again
                    if changed:
                        on_change(changed)
                elif time.monotonic() - last_full >= full_every:
                    self.store.mark_synced(self.clock())  # nothing changed: they still match
                    last_full = time.monotonic()
            except Exception as exc:  # Redis down: the next pass tries again
                log.warning("reading Proxy manifests failed: %s: %s", type(exc).__name__, exc)
            stop.wait(every)

    def due(self, fp: str, period_passed: bool) -> bool:
        """Whether `run` re-reads the manifests now (their fingerprint `fp`)."""
        if fp != self._seen:
            return True
        if period_passed and self.again:
            return True
        return period_passed and self.store.synced_at() is None  # Redis lost its data (or was never synced)


def template_texts(others: Iterable[Other]) -> list[str]:
    """The inline cloud-init texts of ProxyPool documents' templates (their members' cloud-init), read leniently:
    a pool that is not well formed creates no member (fleet.pools.standalone reports it)."""
    out = []
    for o in others:
        spec = o.obj.get("spec")
        template = spec.get("template") if isinstance(spec, Mapping) else None
        ci = template.get("cloudInit") if isinstance(template, Mapping) else None
        text = ci.get("inline") if isinstance(ci, Mapping) else None
        if isinstance(text, str):
            out.append(text)
    return out


def _name_of(o: Other) -> tuple[str, str]:
    meta = o.obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


# -- the stored form ---------------------------------------------------------------------


def stored_form(p: Proxy, file: str) -> Proxy:
    """`p` as standalone keeps it in Redis: inline cloud-init as its digest
    (read from `file`), kubectl's last-applied annotation redacted."""
    ci = p.spec.cloud_init
    if ci.inline is not None:
        p = dataclasses.replace(p, spec=dataclasses.replace(p.spec, cloud_init=CloudInit(digest=InlineDigest.of(ci.inline, file))))
    if LAST_APPLIED in p.annotations:
        p = dataclasses.replace(p, annotations={**p.annotations, LAST_APPLIED: redacted(p.annotations[LAST_APPLIED])})
    return p


def encode(p: Proxy) -> str:
    """The JSON stored in `PX_OBJECTS`; refuses a Proxy still holding cloud-init text."""
    if p.spec.cloud_init.inline is not None:
        raise ValueError(f"{p.key}: inline cloud-init text is never stored; store stored_form(p) instead")
    return json.dumps(to_object(p), separators=(",", ":"))


def decode(raw: bytes | str, source: str) -> Proxy:
    """A stored object back (`parse_proxy`, plus the digest form of inline cloud-init)."""
    obj = json.loads(raw)
    spec = obj.get("spec") if isinstance(obj, dict) else None
    ci = spec.get("cloudInit") if isinstance(spec, dict) else None
    if not (isinstance(spec, dict) and isinstance(ci, dict) and INLINE_DIGEST in ci):
        return parse_proxy(obj, source=source)
    del spec["cloudInit"]
    p = parse_proxy(obj, source=source)
    digest = _digest(ci, source)
    return dataclasses.replace(p, spec=dataclasses.replace(p.spec, cloud_init=CloudInit(digest=digest)))


def _digest(ci: Mapping[str, Any], source: str) -> InlineDigest:
    doc = ci.get(INLINE_DIGEST)
    at = f"spec.cloudInit.{INLINE_DIGEST}"
    if len(ci) != 1 or not isinstance(doc, dict) or set(doc) != {"sha256", "bytes", "file"}:
        raise ManifestError(at, "must be the only key, a mapping of sha256, bytes and file", source=source)
    sha, size, file = doc["sha256"], doc["bytes"], doc["file"]
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ManifestError(f"{at}.sha256", "must be 64 lowercase hex digits", source=source)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not isinstance(file, str):
        raise ManifestError(at, "bytes must be an integer of at least 0 and file a string", source=source)
    return InlineDigest(sha, size, file)
