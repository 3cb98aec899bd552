"""List and watch every object of one custom resource kind, in one namespace
or across all of them, and hand the changes to a consumer: the informer loop, without
a cache (the consumer keeps what it needs).

`Watcher.run(stop)` loops until `stop` is set:

1. **list** (paged: `limit`/`continue`; a continue token that expires
   mid-list restarts the list), then deliver the result: each object as
   `on_event("SYNC", obj)`, then `on_synced(objects)` with all of them, the
   complete current set, so a consumer can drop what vanished while it was
   not watching (deleted during a disconnection, or before a 410). `synced`
   is set after the first complete list.
2. **watch** from the list's resourceVersion: `on_event("ADDED" | "MODIFIED"
   | "DELETED", obj)` in the API server's order; each event and each
   BOOKMARK advances the resourceVersion. When the server ends the watch
   (`timeout_seconds`), watch again from there at once.
3. **410 Gone** (the resourceVersion is too old): list again (1).
   A refused or broken connection, a read timeout, a 5xx, RBAC or a missing
   CRD: log, back off (`Backoff`: exponential, bounded, jittered), and watch
   again from the last resourceVersion (or list, if none yet); the backoff
   resets after a request that worked.

Objects are validated at the boundary: a listed item or an event object that
is not a dict with a string metadata.name is logged (never its content: a
spec may carry cloud-init) and skipped. A consumer callback that raises is
logged and the loop goes on: the event is not retried, so consumers should
be idempotent and rely on the next relist or resync to repair.

`stop` ends `run` promptly: the open watch connection is shut from a small
helper thread, and every wait (backoff) is on `stop`; a list request in
flight is bounded by `fleet.kube.connection.REQUEST_TIMEOUT`.

`list_page` and `WatchStream` are the two requests the loop makes (also
used alone: `fleet.gc.live`, `fleet.proxies.claims`); both go through
`fleet.kube.connection`, so every failure is one of the tree's errors
(`fleet.kube`). Knows no feature; the client comes from
`fleet.kube.api_client` or a `Writer`'s `api_client`.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from fleet.kube.connection import CONNECTION_ERRORS, REQUEST_TIMEOUT, ApiClient, an_object, request
from fleet.kube.errors import ApiUnavailable, ClusterAccessError, Expired, KubeError, access_error, describe
from fleet.kube.resources import Resource

log = logging.getLogger("fleet.kube.watch")

SYNC, ADDED, MODIFIED, DELETED, BOOKMARK = "SYNC", "ADDED", "MODIFIED", "DELETED", "BOOKMARK"
CHANGES = (ADDED, MODIFIED, DELETED)
PAGE_SIZE = 500

OnEvent = Callable[[str, dict[str, Any]], None]
OnSynced = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Backoff:
    """Delays between failed attempts: initial * factor**attempt, at most
    `maximum`, each multiplied by a random factor in [1 - jitter, 1 + jitter]."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return max(0.0, base * random.uniform(1 - self.jitter, 1 + self.jitter))


def object_name(obj: Any) -> str | None:
    """`namespace/name` of a well-formed object (name alone when cluster-scoped), else None."""
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return None
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else meta["name"]


def _resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) and rv else None


# --- the two requests: list, watch -----------------------------------------------------


def list_page(api: client.ApiClient, resource: Resource, limit: int = 0, continue_token: str = "",
              namespace: str | None = None, field_selector: str = "") -> dict[str, Any]:
    """One page of the objects of `resource` in `namespace` (None: across all
    namespaces): the list as answered, with metadata.resourceVersion and
    .continue. Raises Expired when the continue token is too old (list again
    from the start)."""
    kw: dict[str, Any] = {}
    if limit:
        kw["limit"] = limit
    if continue_token:
        kw["_continue"] = continue_token
    if field_selector:
        kw["field_selector"] = field_selector
    out = request(client.CustomObjectsApi(api), "list", resource, namespace, **kw)
    return an_object(out, "list", resource, None, namespace)


class WatchStream:
    """One watch request of `resource` in `namespace` (None: across all namespaces), from
    `resource_version`: iterate for (type, object) pairs, as the API server
    sent them (the caller validates the objects). Lines that are not a JSON
    object with a string `type` are logged (not their content) and skipped;
    an ERROR event raises (410: Expired). The iteration ends when the server
    ends the response (timeout_seconds) or when `close()` is called, from
    any thread; a connection cut or a read timeout raises ApiUnavailable."""

    def __init__(self, api: client.ApiClient, resource: Resource, resource_version: str, *, timeout_seconds: int,
                 bookmarks: bool = True, read_timeout: float | None = None, namespace: str | None = None) -> None:
        self.api, self.resource, self.resource_version, self.namespace = api, resource, resource_version, namespace
        self.timeout_seconds, self.bookmarks = timeout_seconds, bookmarks
        self.read_timeout = read_timeout if read_timeout is not None else timeout_seconds + 30.0
        self._lock = threading.Lock()
        self._resp: Any = None
        self._closed = False

    def close(self) -> None:
        """End the iteration now: shut the connection's socket, so a blocked read returns."""
        with self._lock:
            self._closed = True
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # best effort: the read timeout bounds the read anyway
                log.debug("closing a watch connection failed", exc_info=True)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        r = self.resource
        resp: Any  # with _preload_content=False: the urllib3 response
        resp = request(
            client.CustomObjectsApi(self.api), "watch", r, self.namespace, watch=True,
            resource_version=self.resource_version or None, allow_watch_bookmarks=self.bookmarks,
            timeout_seconds=self.timeout_seconds, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT, self.read_timeout),
        )
        with self._lock:
            self._resp, closed = resp, self._closed
        try:
            if closed:
                return
            for line in _lines(resp):
                event = _event(line, r)
                if event is not None:
                    yield event
        except CONNECTION_ERRORS as exc:
            if not self._closed:
                raise ApiUnavailable(f"watch {describe(r, None, self.namespace)}: {exc}") from exc
        finally:
            with self._lock:
                self._resp = None
            resp.close()
            resp.release_conn()


MAX_WATCH_LINE = 8 * 1024 * 1024  # bytes; an API server object is at most ~1.5 MiB


def _lines(resp: Any) -> Iterator[bytes]:
    """The newline-separated lines of a streamed response, as they arrive."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from lines
        if len(buffer) > MAX_WATCH_LINE:
            raise ApiUnavailable(f"a watch event longer than {MAX_WATCH_LINE} bytes")
    if buffer.strip():
        yield buffer


def _event(line: bytes, resource: Resource) -> tuple[str, Any] | None:
    """(type, object) of one watch line, None to skip it; raises on an ERROR event."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError:
        log.warning("watch: a line that is not JSON, skipped", extra={"fields": {"kind": resource.kind, "bytes": len(line)}})
        return None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        log.warning("watch: an event without a type, skipped", extra={"fields": {"kind": resource.kind}})
        return None
    if event["type"] == "ERROR":
        obj: dict[str, Any] = event["object"] if isinstance(event.get("object"), dict) else {}
        code, message = obj.get("code"), str(obj.get("message") or obj.get("reason") or "")
        if code == 410:
            raise Expired(f"watch {resource.kind}: {message or 'resourceVersion too old'} (410)")
        err = access_error(code, "watch", resource, None, message) if isinstance(code, int) else None
        raise err or ApiUnavailable(f"watch {resource.kind}: error event {code}: {message}")
    return event["type"], event.get("object")


# --- the loop of both -------------------------------------------------------------------


class Watcher:
    """List+watch of `resource` in `namespace` (None: across all namespaces);
    see the module docstring.

    `api`: an `ApiClient`, or a function building one (called at the start
    and again after the credentials were rejected, 401)."""

    def __init__(
        self,
        api: ApiClient | Callable[[], ApiClient],
        resource: Resource,
        on_event: OnEvent,
        *,
        on_synced: OnSynced | None = None,
        bookmark: bool = True,
        timeout_seconds: int = 300,
        backoff: Backoff = Backoff(),
        page_size: int = PAGE_SIZE,
        read_timeout: float | None = None,
        namespace: str | None = None,
    ) -> None:
        self.namespace = namespace
        self._api, self._client = api, api if isinstance(api, ApiClient) else None
        self.resource, self.on_event, self.on_synced = resource, on_event, on_synced
        self.bookmark, self.timeout_seconds, self.backoff = bookmark, timeout_seconds, backoff
        self.page_size = page_size
        self.read_timeout = read_timeout  # None: timeout_seconds + 30 (WatchStream)
        self.synced = threading.Event()  # set after the first complete list
        self.resource_version = ""  # where the next watch starts; "" until listed
        self.lists = 0  # complete lists delivered (relists after the first), for tests and metrics
        self._stream: WatchStream | None = None
        self._lock = threading.Lock()

    # --- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List, then watch, until `stop` is set (see the module docstring)."""
        closer = threading.Thread(target=self._close_on, args=(stop,),
                                  name=f"watch-{self.resource.plural}-{self.namespace or 'all'}-stop",
                                  daemon=True)
        closer.start()
        attempt = 0
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self._list(stop)
                    attempt = 0
                    if stop.is_set():
                        break
                if self._watch(stop):
                    attempt = 0
            except Expired as exc:
                log.info("watch expired, listing again", extra={"fields": {"kind": self.resource.kind, "reason": str(exc)}})
                self.resource_version = ""
            except KubeError as exc:
                if stop.is_set():
                    break
                delay = self.backoff.delay(attempt)
                attempt += 1
                if isinstance(exc, ClusterAccessError) and exc.status == 401 and not isinstance(self._api, ApiClient):
                    self._client = None  # credentials rejected: build the client again
                level = logging.ERROR if isinstance(exc, ClusterAccessError) else logging.WARNING
                log.log(level, "list/watch failed, retrying", extra={"fields": {
                    "kind": self.resource.kind, "namespace": self.namespace or "*", "error": str(exc),
                    "retry_in": round(delay, 2), "attempt": attempt}})
                stop.wait(delay)
        log.debug("watcher stopped", extra={"fields": {"kind": self.resource.kind}})

    def _close_on(self, stop: threading.Event) -> None:
        stop.wait()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def _api_client(self) -> ApiClient:
        if self._client is None:
            assert not isinstance(self._api, ApiClient)
            self._client = self._api()
        return self._client

    # --- list -------------------------------------------------------------------------

    def _list(self, stop: threading.Event) -> None:
        """A complete list, delivered; sets resource_version. An expired
        continue token restarts it (up to 3 times, then Expired)."""
        for _ in range(3):
            items: list[dict[str, Any]] = []
            token, rv = "", ""
            try:
                while True:
                    page = list_page(self._api_client(), self.resource, self.page_size, token, namespace=self.namespace)
                    found = page.get("metadata")
                    meta: dict[str, Any] = found if isinstance(found, dict) else {}
                    rv = rv or str(meta.get("resourceVersion") or "")
                    raw = page.get("items")
                    for item in raw if isinstance(raw, list) else ():
                        if object_name(item) is None:
                            log.warning("list: an item without metadata.name, skipped", extra={"fields": {
                                "kind": self.resource.kind, "type": type(item).__name__}})
                        else:
                            items.append(item)
                    token = str(meta.get("continue") or "")
                    if not token or stop.is_set():
                        break
            except Expired:
                log.info("list: continue token expired, listing from the start", extra={"fields": {"kind": self.resource.kind}})
                continue
            if stop.is_set():
                return
            if not rv:
                raise ApiUnavailable(f"list {self.resource.kind}: the answer has no metadata.resourceVersion")
            self._deliver_list(items)
            self.resource_version = rv
            self.lists += 1
            self.synced.set()
            return
        raise Expired(f"list {self.resource.kind}: the continue token kept expiring")

    def _deliver_list(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._call(self.on_event, SYNC, item)
        if self.on_synced is not None:
            try:
                self.on_synced(items)
            except Exception:
                log.exception("on_synced failed", extra={"fields": {"kind": self.resource.kind, "objects": len(items)}})
        log.debug("listed", extra={"fields": {"kind": self.resource.kind, "objects": len(items)}})

    # --- watch --------------------------------------------------------------------------

    def _watch(self, stop: threading.Event) -> bool:
        """One watch request, from resource_version, until the server ends it
        or `stop`. True when it delivered anything or ended cleanly."""
        stream = WatchStream(self._api_client(), self.resource, self.resource_version,
                                  timeout_seconds=self.timeout_seconds, bookmarks=self.bookmark, read_timeout=self.read_timeout,
                                  namespace=self.namespace)
        with self._lock:
            self._stream = stream
        if stop.is_set():  # set before the closer could see this stream
            stream.close()
        try:
            for type_, obj in stream:
                self._on_watch_event(type_, obj)
            return True
        finally:
            with self._lock:
                self._stream = None

    def _on_watch_event(self, type_: str, obj: Any) -> None:
        if type_ == BOOKMARK:
            rv = _resource_version(obj)
            if rv:
                self.resource_version = rv
            return
        if type_ not in CHANGES:
            log.warning("watch: an event of unknown type, skipped", extra={"fields": {"kind": self.resource.kind, "type": type_[:64]}})
            return
        if object_name(obj) is None:
            log.warning("watch: an event object without metadata.name, skipped", extra={"fields": {
                "kind": self.resource.kind, "type": type_, "object_type": type(obj).__name__}})
            return
        rv = _resource_version(obj)
        if rv:
            self.resource_version = rv
        self._call(self.on_event, type_, obj)

    def _call(self, fn: OnEvent, type_: str, obj: dict[str, Any]) -> None:
        try:
            fn(type_, obj)
        except Exception:
            log.exception("on_event failed", extra={"fields": {"kind": self.resource.kind, "type": type_,
                                                               "object": object_name(obj)}})
