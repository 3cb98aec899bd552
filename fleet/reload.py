"""Re-reading the providers file while a process runs (the controller, beat,
each provider worker), so a config change needs no restart.

Every `RELOAD_EVERY` seconds a daemon thread (`Watcher.run`) reads the file
whole and hashes its bytes. The content hash, not the file's mtime, tells a
change: a ConfigMap update swaps the mounted directory's `..data` symlink
(the file's own path and mtime may say nothing new), and an editor may keep
the inode. The decisions are pure (`on_look`, `on_load`, `diff`,
`to_retire`); `Watcher` applies them:

- a new content must read the same at two looks in a row before anything
  is done with it (a file written in place can be read half-written, and a
  half file may even parse, with providers missing): a change applies
  `RELOAD_EVERY` to 2 × `RELOAD_EVERY` after it is written;
- then it is parsed and validated whole (`fleet.config`, the same bounded
  loader as at start). A good one replaces the config in use at once (the
  caller's `apply`); a bad one is refused: the config in use stays, one
  ERROR line names the file and every problem with its field path (the
  loader never shows a secret value), `proxy_operator_config_reload_failures_total`
  counts it and `proxy_operator_config_last_reload_successful` is 0 until a
  good file is read (or the file in use is put back); a WARNING repeats
  every `REMIND_EVERY` while it lasts, for processes without /metrics (beat);
- an unreadable file (removed, a directory, too large) is refused the same way.

`STATUS` is this process's record of it, served on the controller's
/metrics and a provider worker's (`collector()`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fleet import serving
from fleet.config import ConfigError, ProvidersConfig

log = logging.getLogger("fleet.reload")

RELOAD_EVERY = 2.0  # seconds between two looks at the file
REMIND_EVERY = 300.0  # seconds between reminders that the file on disk is still refused
MAX_LOGGED_PROBLEMS = 10  # in the one ERROR line; the rest are counted


# --- what changed (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """Providers by name between two configs: added, removed, and changed
    (same name, another type or block)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def touched(self) -> frozenset[str]:
        """Every provider whose Proxies, checks or built instance the change concerns."""
        return frozenset(self.added + self.removed + self.changed)

    def __bool__(self) -> bool:
        return bool(self.touched)

    def summary(self) -> str:
        parts = [f"{what} {', '.join(names)}" for what, names in
                 (("added", self.added), ("removed", self.removed), ("changed", self.changed)) if names]
        return "; ".join(parts) or "no provider changed"


def diff(old: ProvidersConfig, new: ProvidersConfig) -> Change:
    """What `new` changes against `old`, by provider name (the order of the
    entries is not a change)."""
    before = {p.name: p for p in old.providers}
    after = {p.name: p for p in new.providers}
    return Change(
        added=tuple(n for n in after if n not in before),
        removed=tuple(n for n in before if n not in after),
        changed=tuple(n for n in after if n in before and (after[n].type, after[n].block) != (before[n].type, before[n].block)),
    )


def to_retire(change: Change, built: Iterable[str]) -> list[str]:
    """The provider instances this process has built that a change makes
    wrong: changed ones are rebuilt from the new block on their next use,
    removed ones are not (their calls answer "not a configured provider").
    An unchanged provider keeps its instance (and its connections)."""
    wrong = set(change.changed) | set(change.removed)
    return sorted(n for n in built if n in wrong)


# --- the file watch (pure) ---------------------------------------------------------------

NOTHING, WAIT, LOAD, REMIND, RESTORED = "nothing", "wait", "load", "remind", "restored"


@dataclass(frozen=True)
class Watch:
    """What the watcher knows: the digest of the content in use, a new one
    seen once (waiting for a second look), the one last refused."""

    current: str
    pending: str = ""
    refused: str = ""
    reminded: float = 0.0  # when the refusal was last logged


def on_look(w: Watch, digest: str, now: float) -> tuple[Watch, str]:
    """One look found content `digest`: what to do (NOTHING, WAIT for a
    second look, LOAD it, REMIND that it is still refused, or RESTORED: the
    file on disk is the one in use again, after a refusal)."""
    if digest == w.current:
        return Watch(w.current), RESTORED if w.refused else NOTHING
    if digest == w.refused:
        if now - w.reminded >= REMIND_EVERY:
            return replace(w, pending="", reminded=now), REMIND
        return replace(w, pending=""), NOTHING
    if digest != w.pending:
        return replace(w, pending=digest), WAIT
    return w, LOAD


def on_load(w: Watch, digest: str, ok: bool, now: float) -> Watch:
    """After loading `digest`: in use, or refused (the old one stays)."""
    if ok:
        return Watch(digest)
    return Watch(w.current, refused=digest, reminded=now)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- this process's record, for /metrics -----------------------------------------------------


class ReloadStatus:
    """Whether the file on disk is the one in use, when a config was last
    taken in (the start counts), and how many versions were refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.successful = True
        self.last_success = 0.0
        self.failures = 0

    def loaded(self, now: float) -> None:
        with self._lock:
            self.successful, self.last_success = True, now

    def refused(self) -> None:
        with self._lock:
            self.successful = False
            self.failures += 1

    def restored(self) -> None:
        with self._lock:
            self.successful = True

    def collector(self) -> Collector:
        return _StatusCollector(self)


class _StatusCollector(Collector):
    def __init__(self, status: ReloadStatus) -> None:
        self._status = status

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self._status
        with s._lock:
            ok, last, failures = s.successful, s.last_success, s.failures
        yield GaugeMetricFamily(serving.CONFIG_RELOAD_SUCCESSFUL,
                                "1 when the providers file on disk is the config in use, 0 while it is refused.", value=int(ok))
        if last:
            yield GaugeMetricFamily(serving.CONFIG_RELOAD_SUCCESS_TIMESTAMP,
                                    "Unix time this process last took in the providers file (its start counts).", value=last)
        yield CounterMetricFamily(serving.CONFIG_RELOAD_FAILURES.removesuffix("_total"),
                                  "Versions of the providers file this process refused (unreadable or invalid).",
                                  value=failures)


STATUS = ReloadStatus()


# --- applying it -------------------------------------------------------------------------


def problems_line(exc: ConfigError) -> str:
    """The loader's problems on one line (field paths, never secret values)."""
    shown = exc.problems[:MAX_LOGGED_PROBLEMS]
    more = len(exc.problems) - len(shown)
    return "; ".join(shown) + (f"; ... and {more} more" if more > 0 else "")


class Watcher:
    """Look at the file every `every` seconds; hand a good new config to
    `apply(config, change)`. `read` returns the file's bytes or raises
    ConfigError; `parse` builds the config from them or raises ConfigError."""

    def __init__(self, source: str, current: tuple[str, ProvidersConfig], read: Callable[[], bytes],
                 parse: Callable[[bytes], ProvidersConfig], apply: Callable[[ProvidersConfig, Change], None],
                 status: ReloadStatus = STATUS, every: float = RELOAD_EVERY,
                 clock: Callable[[], float] = time.time) -> None:
        self.source, self.read, self.parse, self.apply = source, read, parse, apply
        self.status, self.every, self.clock = status, every, clock
        self.watch = Watch(current[0])
        self.config = current[1]
        self._error = ""  # the last refusal's line, for reminders

    def look(self) -> str:
        """One look; what it did (for tests and logs)."""
        now = self.clock()
        data: bytes | None = None
        unreadable: ConfigError | None = None
        try:
            data = self.read()
            digest = digest_of(data)
        except ConfigError as exc:  # unreadable: a version of its own, named by the reason
            digest, unreadable = "unreadable:" + digest_of(str(exc).encode()), exc
        self.watch, action = on_look(self.watch, digest, now)
        if action == REMIND:
            log.warning("the providers file is still refused; the config in use stays: %s", self._error,
                        extra={"fields": {"file": self.source}})
        elif action == RESTORED:
            self.status.restored()
            log.info("the providers file is the config in use again", extra={"fields": {"file": self.source}})
        if action != LOAD:
            return action
        try:
            if unreadable is not None or data is None:
                raise unreadable or ConfigError(self.source, ["nothing was read"])
            new = self.parse(data)
        except ConfigError as exc:
            self.watch = on_load(self.watch, digest, False, now)
            self.status.refused()
            self._error = problems_line(exc)
            log.error("providers config reload refused; the config in use stays: %s: %s", self.source, self._error,
                      extra={"fields": {"file": self.source, "problems": len(exc.problems)}})
            return "refused"
        change = diff(self.config, new)
        self.apply(new, change)
        self.config = new
        self.watch = on_load(self.watch, digest, True, now)
        self.status.loaded(now)
        log.info("providers config reloaded: %s", change.summary(),
                 extra={"fields": {"file": self.source, "providers": ",".join(new.names())}})
        return "reloaded"

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.every):
            try:
                self.look()
            except Exception as exc:  # a hook that failed: keep watching, say it
                log.exception("providers config reload failed: %s: %s", type(exc).__name__, exc)
