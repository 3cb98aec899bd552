"""A session pool as Crawlee's `SessionPool`, for crawlers that use the gateway: each session has an id, which
is the gateway's `-session-ID` (one sticky proxy per session, docs/gateway.md), and a life on the crawler's
side. A session is retired — dropped from the pool, so its next replacement gets a new id and so another
proxy — after `max_usage_count` uses, at `max_age` seconds, at an error score of `max_error_score`, or at once
on a ban status. Crawlee's defaults: 50 uses, 3000 s, score 3 (each bad use +1, each good one −0.5), ban
statuses 401, 403, 429, a pool of 1000.

The gateway keeps a life per session too (its own limits, `--gateway-session-*`); this pool is the crawler's
view, for crawlers that also keep cookies or a fingerprint per session and want them retired together.
Pure apart from the clock and the random choice, both injectable; not thread-safe (one per event loop or thread).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fleet_crawler._gateway import Gateway

BAN_STATUSES = frozenset({401, 403, 429})  # Crawlee's blockedStatusCodes


@dataclass(frozen=True)
class SessionLimits:
    max_usage_count: int = 50
    max_age: float = 3000.0  # seconds
    max_error_score: float = 3.0
    error_score_decrement: float = 0.5


@dataclass
class Session:
    """One session: `id` is the gateway's session id; `proxy_url`/`username` when the pool has a gateway."""

    id: str
    created_at: float
    limits: SessionLimits
    clock: Callable[[], float] = field(repr=False)
    gateway: Gateway | None = field(default=None, repr=False)
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # the gateway's other username options
    usage_count: int = 0
    error_score: float = 0.0
    retired: bool = False
    user_data: dict[str, Any] = field(default_factory=dict, repr=False)  # cookies, a fingerprint, ...

    @property
    def is_blocked(self) -> bool:
        return self.error_score >= self.limits.max_error_score

    @property
    def is_expired(self) -> bool:
        return self.clock() - self.created_at >= self.limits.max_age

    @property
    def is_max_usage_reached(self) -> bool:
        return self.usage_count >= self.limits.max_usage_count

    @property
    def is_usable(self) -> bool:
        return not (self.retired or self.is_blocked or self.is_expired or self.is_max_usage_reached)

    def mark_good(self) -> None:
        """A use that went well: one more use, the error score down by the decrement."""
        self.usage_count += 1
        self.error_score = max(0.0, self.error_score - self.limits.error_score_decrement)
        self._maybe_retire()

    def mark_bad(self) -> None:
        """A use that failed (refused, timed out, an odd answer): one more use, the error score up by one."""
        self.usage_count += 1
        self.error_score += 1
        self._maybe_retire()

    def retire(self) -> None:
        self.retired = True

    def retire_on_status(self, status: int, ban_statuses: Iterable[int] = BAN_STATUSES) -> bool:
        """Retire the session if `status` means a ban; whether it did."""
        if status in frozenset(ban_statuses):
            self.retire()
            return True
        return False

    def _maybe_retire(self) -> None:
        if not self.is_usable:
            self.retire()

    @property
    def username(self) -> str:
        return self._gateway().username(session=self.id, **self.options)

    @property
    def proxy_url(self) -> str:
        """http://CLIENT-session-ID…:TOKEN@HOST:PORT."""
        return self._gateway().proxy_url(session=self.id, **self.options)

    def playwright(self) -> dict[str, str]:
        return self._gateway().playwright(session=self.id, **self.options)

    def _gateway(self) -> Gateway:
        if self.gateway is None:
            raise ValueError("this session's pool has no gateway")
        return self.gateway


class SessionPool:
    """Sessions handed out as Crawlee hands them out: a new one while the pool has room, else a random usable
    one; unusable ones are dropped when met. `ban_statuses`: what `Session.retire_on_status` and
    `SessionPool.report` treat as a ban. `options`: the gateway's other username options (pool, sesstime, ...)."""

    def __init__(self, gateway: Gateway | None = None, *, max_pool_size: int = 1000, max_usage_count: int = 50,
                 max_age: float = 3000.0, max_error_score: float = 3.0, error_score_decrement: float = 0.5,
                 ban_statuses: Iterable[int] = BAN_STATUSES, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None, **options: Any) -> None:
        if max_pool_size < 1:
            raise ValueError("max_pool_size must be at least 1")
        self.gateway, self.options = gateway, options
        if gateway is not None:
            gateway.username(session="probe", **options)  # refuse bad options now, not at the first request
        self.max_pool_size = max_pool_size
        self.limits = SessionLimits(max_usage_count, max_age, max_error_score, error_score_decrement)
        self.ban_statuses = frozenset(ban_statuses)
        self.clock = clock
        self._rng = rng or random.Random()
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def new_session(self, session_id: str | None = None) -> Session:
        sid = session_id or "s" + secrets.token_hex(8)
        session = Session(sid, self.clock(), self.limits, self.clock, self.gateway, dict(self.options))
        self._sessions[sid] = session
        return session

    def get(self, session_id: str | None = None) -> Session:
        """The session by that id (a new one under that id when it is missing or unusable), else a usable one."""
        self._drop_unusable()
        if session_id is not None:
            found = self._sessions.get(session_id)
            return found if found is not None else self.new_session(session_id)
        if len(self._sessions) < self.max_pool_size:
            return self.new_session()
        return self._rng.choice(list(self._sessions.values()))

    def report(self, session: Session, status: int | None) -> None:
        """The outcome of one use: a ban status retires it, None (no answer) is bad, anything else good."""
        if status is None:
            session.mark_bad()
        elif not session.retire_on_status(status, self.ban_statuses):
            session.mark_good()
        if not session.is_usable:
            self._sessions.pop(session.id, None)

    def _drop_unusable(self) -> None:
        for sid in [sid for sid, s in self._sessions.items() if not s.is_usable]:
            del self._sessions[sid]
