"""The live Proxy UIDs, read fresh from the source of truth at decision time.

- standalone (`--proxies`): the Proxy objects in Redis (`fleet:px:objects`,
  JSON, `metadata.uid`), every one of them, deleting ones included (their
  instance is the reconciler's to delete);
- cluster: a paged LIST of proxies.crawl.example.com in each namespace of
  `--proxy-namespaces` (across all of them for `*`; `fleet.kube.list_page`),
  never a watch cache that may not have synced; `scope` says which
  namespaces that covers, for the namespace guard (`fleet.gc.decide`, rule 4);
- neither: there is nothing to vouch for the set with (`NoSource`).

Anything that keeps the set from being complete (Redis or the API server
failing, an object whose UID cannot be read, a list that expired between
pages) raises `Unavailable`: an instance is collected only when we know no
Proxy has its UID, so an incomplete set stops the decision rather than
shrinking it. Infrastructure only: no import of the proxies feature.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleet import kube
from fleet.settings import ALL_NAMESPACES, Settings
from fleet.store import Store, StoreError

PAGE = 500
MAX_PAGES = 10_000  # 5,000,000 Proxies: past that the list is not one we can vouch for


class Unavailable(Exception):
    """The live set cannot be vouched for now; the message says why."""


class NoSource(Exception):
    """No Proxies source is configured (no --proxies manifests, no cluster)."""


LiveUids = Callable[[], frozenset[str]]


def uid_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str) or not uid:
        raise Unavailable("a Proxy object without a readable metadata.uid")
    return uid


def from_documents(docs: Iterable[bytes | str]) -> frozenset[str]:
    """UIDs of the standalone objects as stored (pure). One unreadable object
    makes the set unavailable: its UID could be an instance's."""
    out = set()
    for raw in docs:
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise Unavailable(f"a Proxy object in Redis is not JSON: {exc}") from None
        out.add(uid_of(obj))
    return frozenset(out)


MAX_SYNC_AGE = 60.0  # seconds: the standalone source re-reads its manifests every 10 s


def standalone(objects: Callable[[], Mapping[str, bytes | str]], synced_at: Callable[[], float | None] = lambda: None,
               now: Callable[[], float] = time.time) -> frozenset[str]:
    """The standalone objects' UIDs, only while the controller has matched
    them to the manifests within MAX_SYNC_AGE: a Redis that lost its data
    holds too few objects until the next sync, and GC must not take that for
    the fleet."""
    try:
        stamp = synced_at()
        docs = objects()
    except StoreError as exc:
        raise Unavailable(f"Redis: {exc}") from None
    if stamp is None or now() - stamp > MAX_SYNC_AGE:
        raise Unavailable(f"the standalone Proxies were not matched to their manifests in the last {MAX_SYNC_AGE:.0f} s "
                          "(is the controller running?)")
    return from_documents(docs.values())


def cluster(api: Any, page: int = PAGE, namespaces: tuple[str, ...] = (ALL_NAMESPACES,)) -> frozenset[str]:
    """The UIDs of every Proxy in `namespaces` (`*`: in all), through one
    paged LIST per namespace (each a consistent snapshot: continue tokens;
    an expired one is an error, not a restart)."""
    out: set[str] = set()
    for ns in (None,) if ALL_NAMESPACES in namespaces else namespaces:
        out.update(_listed(api, page, ns))
    return frozenset(out)


def _listed(api: Any, page: int, namespace: str | None) -> set[str]:
    out: set[str] = set()
    token = ""
    where = f" in {namespace}" if namespace else ""
    for _ in range(MAX_PAGES):
        try:
            got = kube.list_page(api, kube.PROXY, limit=page, continue_token=token, namespace=namespace)
        except kube.KubeError as exc:
            raise Unavailable(f"listing Proxies{where}: {exc}") from None
        items = got.get("items")
        if not isinstance(items, list):
            raise Unavailable(f"listing Proxies{where}: the answer has no items")
        out.update(uid_of(item) for item in items)
        meta = got.get("metadata")
        nxt = meta.get("continue") if isinstance(meta, dict) else None
        if not nxt:
            return out
        if not isinstance(nxt, str):
            raise Unavailable(f"listing Proxies{where}: a malformed continue token")
        token = nxt
    raise Unavailable(f"listing Proxies{where}: more than {MAX_PAGES} pages")


def scope(settings: Settings) -> tuple[str, ...]:
    """The namespaces the live set covers: every one standalone (the
    manifests are the whole fleet), else --proxy-namespaces."""
    return (ALL_NAMESPACES,) if settings.proxies else settings.proxy_scope


def source(settings: Settings, store: Store) -> tuple[LiveUids, str]:
    """The function that reads the live UIDs in this process's mode, and the
    mode in words. Raises NoSource without one."""
    if settings.proxies:
        return (lambda: standalone(store.proxies.objects, store.proxies.synced_at)), "standalone Proxies in Redis"
    api, _ = kube.api_client(settings)
    if api is None:
        raise NoSource("no Proxies source: neither --proxies manifests nor a cluster is configured")
    namespaces = settings.proxy_scope
    where = "every namespace" if namespaces == (ALL_NAMESPACES,) else ", ".join(namespaces)
    return (lambda: cluster(api, namespaces=namespaces)), f"Proxies listed from the cluster ({where})"
