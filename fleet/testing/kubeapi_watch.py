"""The watch half of the fake Kubernetes API (fleet/testing/kubeapi.py): the
event log every write of a custom object appends to, and one watch
request's stream of events, as the API server sends them.

- Events carry the resourceVersion of the write; a watch from
  resourceVersion N gets, in order, the events of its plural (and namespace)
  after N; from "" or "0", first the current objects as ADDED.
- The log keeps the last `window` events (configurable); a watch from a
  resourceVersion older than what was dropped -- or everything, after
  `expire()` -- gets one ERROR event holding a Status with code 410
  (reason Expired), as the API server does, and ends.
- With allowWatchBookmarks, a BOOKMARK (an object with only its kind,
  apiVersion and metadata.resourceVersion) every `bookmark_interval`
  seconds; an idle watch still advances to the newest resourceVersion.
- A stream ends cleanly after timeoutSeconds; `drop()` cuts every open
  stream mid-response (a server restart, a broken connection).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_WINDOW = 1000
DEFAULT_BOOKMARK_INTERVAL = 1.0
DEFAULT_TIMEOUT = 60.0  # a watch without timeoutSeconds (the API server picks 30-60 minutes)


class Dropped(Exception):
    """The stream is cut: the handler closes the connection without ending the response."""


@dataclass(frozen=True)
class Event:
    rv: int
    plural: str
    namespace: str | None
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]  # a snapshot: never changed after recording


def expired(since: int, oldest: int) -> dict[str, Any]:
    """The ERROR event of a watch from a resourceVersion the log no longer holds."""
    return {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
        "message": f"too old resource version: {since} ({oldest})",
    }}


class EventLog:
    """Shares the fake's (reentrant) lock. An open stream gets its events
    pushed to it as they are recorded (as the API server's watch cache fans
    out), so only a watch that starts from a forgotten resourceVersion gets 410."""

    def __init__(self, lock: threading.RLock, window: int = DEFAULT_WINDOW,
                 bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL) -> None:
        self.cond = threading.Condition(lock)
        self.events: deque[Event] = deque()
        self.window, self.bookmark_interval = window, bookmark_interval
        self.compacted = 0  # a watch must start at or after this resourceVersion
        self.drops = 0
        self._queues: list[tuple[str, str | None, list[Event]]] = []  # (plural, namespace, pending) per open stream

    @property
    def open(self) -> int:
        """Streams being served, for tests."""
        with self.cond:
            return len(self._queues)

    def record(self, rv: int, plural: str, namespace: str | None, type_: str, obj: dict[str, Any]) -> None:
        with self.cond:
            event = Event(rv, plural, namespace, type_, obj)
            self.events.append(event)
            while len(self.events) > max(self.window, 0):
                self.compacted = self.events.popleft().rv
            for p, ns, pending in self._queues:
                if p == plural and (ns is None or ns == namespace):
                    pending.append(event)
            self.cond.notify_all()

    def expire(self, head: int) -> None:
        """Forget every event: a watch from any resourceVersion before `head` gets 410."""
        with self.cond:
            self.events.clear()
            self.compacted = head
            self.cond.notify_all()

    def drop(self) -> None:
        with self.cond:
            self.drops += 1
            self.cond.notify_all()

    def stream(
        self, plural: str, namespace: str | None, since: int | None, timeout: float, bookmarks: bool,
        head: Callable[[], int], current: Callable[[], list[dict[str, Any]]], bookmark: Callable[[int], dict[str, Any]],
    ) -> Iterator[dict[str, Any]]:
        """The events of one watch request. `head` (the newest resourceVersion)
        and `current` (the objects now) are called holding the lock."""
        deadline = time.monotonic() + timeout
        with self.cond:  # never yield holding the lock
            drops = self.drops
            if since is not None and since < self.compacted:
                gone: dict[str, Any] | None = expired(since, self.compacted)
            else:
                gone = None
                first: list[dict[str, Any]] = (
                    [{"type": "ADDED", "object": o} for o in current()] if since is None else
                    [{"type": e.type, "object": e.obj} for e in self.events
                     if e.rv > since and e.plural == plural and (namespace is None or e.namespace == namespace)])
                queue: tuple[str, str | None, list[Event]] = (plural, namespace, [])
                self._queues.append(queue)
        if gone is not None:
            yield gone
            return
        try:
            yield from first
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                with self.cond:
                    while True:
                        if self.drops != drops:
                            raise Dropped()
                        now = time.monotonic()
                        due = bookmarks and now >= next_bookmark
                        if queue[2] or due or now >= deadline:
                            break
                        self.cond.wait(min(deadline, next_bookmark if bookmarks else deadline) - now)
                    batch, queue[2][:] = list(queue[2]), []
                    newest = head()  # every event of ours up to here is in `batch`
                for e in batch:
                    yield {"type": e.type, "object": e.obj}
                if due:
                    yield {"type": "BOOKMARK", "object": bookmark(newest)}
                    next_bookmark = time.monotonic() + self.bookmark_interval
                if time.monotonic() >= deadline:
                    return
        finally:
            with self.cond:
                self._queues.remove(queue)
