"""Beat's decisions, pure: which providers a round sends to, what changed
since the last round, the role a beat plays, and when a beat that becomes
active resumes the rounds. `beat.scheduler.FleetScheduler` applies them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

ACTIVE, STANDBY = "active", "standby"


@dataclass(frozen=True)
class RoundPlan:
    send: tuple[str, ...]  # providers with a live worker: one check each
    skip: tuple[str, ...]  # providers nobody consumes: no message (the overdue verdict reports them)
    record: bool  # stamp the round and republish the schedule


def plan_round(active: bool, providers: Iterable[str], live: Collection[str]) -> RoundPlan:
    """Only the lock holder sends; it sends a check to each provider with a
    live worker heartbeat and none into a queue nobody consumes, where it
    would only expire. A round with every provider skipped is still a round:
    beat is alive."""
    if not active:
        return RoundPlan((), (), False)
    names = list(providers)
    return RoundPlan(tuple(n for n in names if n in live), tuple(n for n in names if n not in live), True)


def worker_changes(skipped_before: Collection[str], skipped_now: Collection[str]) -> tuple[list[str], list[str]]:
    """(providers whose worker is gone, providers whose worker is back),
    each logged once per transition."""
    return sorted(set(skipped_now) - set(skipped_before)), sorted(set(skipped_before) - set(skipped_now))


def provider_changes(before: Iterable[str], after: Iterable[str]) -> tuple[list[str], list[str]]:
    """(providers added, providers removed) by a reloaded config."""
    old, new = list(before), list(after)
    return [n for n in new if n not in old], [n for n in old if n not in new]


def catch_up(skipped: Collection[str], live: Collection[str]) -> list[str]:
    """Providers skipped in the last round whose worker has come since: they
    get their check now rather than an interval later (a worker that starts
    after beat, as under `fleet up`)."""
    return sorted(set(skipped) & set(live))


def role_change(was: str | None, holds_lock: bool) -> str | None:
    """The new role when it changed (or at the first attempt), else None."""
    now = ACTIVE if holds_lock else STANDBY
    return now if now != was else None


def resume_at(last_round: float | None, interval: float, now: float) -> float:
    """The last run time a newly active beat gives its entries: the previous
    holder's last round, so the next is due one interval after it (a takeover
    neither doubles nor skips a round); due at once without one or when it
    is more than an interval old; never later than now (a clock ahead of
    ours)."""
    if last_round is None:
        return now - interval
    return min(max(last_round, now - interval), now)
