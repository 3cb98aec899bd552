"""Pure decisions of the controller: the ProviderHealth status, the Ready
verdict, transitions worth a log line, overdue detection, merge patches,
and `decide`: what `fleet.kube.Writer.publish` writes into a ProviderHealth.

No I/O here: the writers (`fleet.kube`, `fleet.store`) apply what these
return. Semantics follow the seed's `buildStatus` and `logTransitions`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet.durations import format_duration, parse_rfc3339
from fleet.health import schema
from fleet.health.limits import LIMITS
from fleet.health.results import CheckResult, Verdict, rfc3339
from fleet.kube import UNCHANGED, Patch, Skip
from providers.base import TargetStatus
from providers.text import clip

CONDITION_READY = "Ready"
REASON_ALL_TARGETS_READY = "AllTargetsReady"
REASON_TARGETS_NOT_READY = "TargetsNotReady"
REASON_CHECKS_NOT_IMPLEMENTED = "ChecksNotImplemented"
REASON_NO_TARGETS = "NoTargets"
# Ours: no result for 2 × interval + timeout (worker gone, queue stuck).
REASON_CHECK_OVERDUE = "CheckOverdue"
# Ours: `fleet get ph` for a configured provider never checked yet.
REASON_NOT_CHECKED = "NotCheckedYet"

MAX_MESSAGE = schema.MAX_MESSAGE  # the CRD's maxLength of a target's message
# A target's latencyMillis moving by less than max(this, JITTER_RATIO of the
# written value) is not a change worth a write (`should_write`).
JITTER_MILLIS = 10
JITTER_RATIO = 0.2


def verdict(result: CheckResult) -> Verdict:
    """The Ready condition for a fresh result."""
    targets = result.targets
    ready = sum(1 for t in targets if t.ready)
    failing = [f"{t.name}: {t.reason}" for t in targets if not t.ready]
    if not result.supported:
        return Verdict("Unknown", REASON_CHECKS_NOT_IMPLEMENTED, f"{result.type} providers have no health check")
    if not targets:
        return Verdict("Unknown", REASON_NO_TARGETS, "the provider has nothing to check")
    if not failing:
        return Verdict("True", REASON_ALL_TARGETS_READY, f"{ready} of {len(targets)} targets ready")
    return Verdict("False", REASON_TARGETS_NOT_READY, clip("; ".join(failing), MAX_MESSAGE))


def overdue_verdict(last_checked: float | None, queue: str, after: float, beat_stopped: bool = False,
                    last_round: float | None = None) -> Verdict:
    """Why a provider is overdue. When beat's rounds stopped too
    (`rounds_stopped`), nobody sends checks: say so rather than blame the
    provider's worker. Stamps, not ages, so a steady overdue state writes nothing."""
    last = rfc3339(last_checked) if last_checked else "never"
    head = f"no check result for more than {format_duration(after)} (last check: {last}); "
    if beat_stopped:
        sent = rfc3339(last_round) if last_round else "none on record"
        return Verdict("Unknown", REASON_CHECK_OVERDUE, head + f"no check round sent since {sent}: is fleet beat running?")
    return Verdict("Unknown", REASON_CHECK_OVERDUE, head + f"is a worker consuming queue {queue}?")


def rounds_stopped(last_round: float | None, now: float, after: float) -> bool:
    """Beat sent no round (or none on record) for longer than `after`."""
    return last_round is None or now - last_round > after


def is_overdue(last_checked: float | None, first_seen: float | None, now: float, after: float) -> bool:
    """Overdue when the newest result (or, before any, the moment the
    controller first expected one) is older than `after`."""
    since = last_checked if last_checked is not None else first_seen
    return since is not None and now - since > after


class _NotLookedUp:
    """`last_round` was not read (callers that know nothing of beat)."""


NOT_LOOKED_UP = _NotLookedUp()


def current_verdict(
    result: CheckResult | None, seen: float | None, now: float, after: float, queue: str, checks_enabled: bool = True,
    last_round: float | _NotLookedUp | None = NOT_LOOKED_UP,
) -> Verdict:
    """The Ready verdict as of `now`, for readers of the store (`fleet get
    ph`, the overdue gauge): overdue beats the last result. With beat's
    `last_round` (None: none on record), an overdue verdict says whether
    rounds stopped."""
    last = result.checked_at if result else None
    if checks_enabled and is_overdue(last, seen, now, after):
        if isinstance(last_round, _NotLookedUp):
            return overdue_verdict(last, queue, after)
        return overdue_verdict(last, queue, after, rounds_stopped(last_round, now, after), last_round)
    if result is None:
        return Verdict("Unknown", REASON_NOT_CHECKED, f"no result yet; is a worker consuming queue {queue}?")
    return verdict(result)


def set_condition(conditions: list[dict[str, Any]], v: Verdict, now: str) -> list[dict[str, Any]]:
    """apimeta.SetStatusCondition: lastTransitionTime moves only when the
    status changes; reason and message always follow."""
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == CONDITION_READY:
            if c.get("status") != v.status:
                c["lastTransitionTime"] = now
            c.update(status=v.status, reason=v.reason, message=v.message)
            return out
    out.append(
        {"type": CONDITION_READY, "status": v.status, "reason": v.reason, "message": v.message, "lastTransitionTime": now}
    )
    return out


def _target(ts: TargetStatus, transition: str) -> dict[str, Any]:
    t: dict[str, Any] = {"name": ts.name}
    if ts.address:
        t["address"] = ts.address
    t["ready"] = ts.ready
    if ts.reason:
        t["reason"] = ts.reason
    if ts.message:
        t["message"] = clip(ts.message, MAX_MESSAGE)
    millis = int(ts.latency * 1000)
    if millis:
        t["latencyMillis"] = millis
    t["lastTransitionTime"] = transition
    if ts.details:
        t["details"] = dict(ts.details)
    return t


def build_status(prev: dict[str, Any] | None, result: CheckResult) -> dict[str, Any]:
    """The seed's buildStatus. `prev` is left untouched; every timestamp
    comes from result.checked_at; a target keeps its lastTransitionTime
    unless `ready` flipped."""
    prev = prev or {}
    now = rfc3339(result.checked_at)
    before = {t.get("name"): t for t in prev.get("targets") or ()}
    targets = []
    for ts in result.targets:
        b = before.get(ts.name)
        since = b.get("lastTransitionTime") if b is not None and bool(b.get("ready")) == ts.ready else None
        targets.append(_target(ts, since or now))
    out: dict[str, Any] = {"type": result.type}
    out["conditions"] = set_condition(prev.get("conditions") or [], verdict(result), now)
    if targets:
        out["targets"] = targets
    if result.supported:
        out["targetsReady"] = f"{sum(1 for t in result.targets if t.ready)}/{len(result.targets)}"
    out["lastCheckTime"] = now
    return out


def overdue_status(prev: dict[str, Any] | None, type_name: str, v: Verdict, now: float) -> dict[str, Any]:
    """Keep the last known targets but never a stale Ready=True."""
    out = copy.deepcopy(prev or {})
    out["type"] = out.get("type") or type_name
    out["conditions"] = set_condition(out.get("conditions") or [], v, rfc3339(now))
    return out


def ready_of(status: dict[str, Any]) -> dict[str, Any] | None:
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    for c in conditions:
        if c.get("type") == CONDITION_READY:
            return c
    return None


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 patch turning old into new: removed keys become null, lists
    are replaced whole."""
    patch: dict[str, Any] = {}
    for k in old:
        if k not in new:
            patch[k] = None
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif isinstance(v, dict) and isinstance(old[k], dict):
            sub = merge_patch(old[k], v)
            if sub:
                patch[k] = sub
        elif v != old[k]:
            patch[k] = v
    return patch


# publish's outcome when the object holds a newer check than the one at hand
STALE = "stale"
# publish's outcome when only lastCheckTime and latency jitter moved and the heartbeat is not due
NOT_DUE = "not-due"


def latency_moved(written: int, new: int) -> bool:
    """A latencyMillis change worth writing: at least max(JITTER_MILLIS,
    JITTER_RATIO × the written value)."""
    return abs(new - written) >= max(JITTER_MILLIS, JITTER_RATIO * written)


def _without_times(status: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The status less what moves every round (lastCheckTime, each
    target's latencyMillis), and those latencies in target order."""
    rest = {k: v for k, v in status.items() if k != "lastCheckTime"}
    targets = [dict(t) for t in status.get("targets") or ()]
    latencies = [int(t.pop("latencyMillis", 0) or 0) for t in targets]
    if "targets" in status:
        rest["targets"] = targets
    return rest, latencies


def should_write(written: dict[str, Any], new: dict[str, Any], heartbeat: float) -> bool:
    """Whether `new` is worth a write over `written` (the status as last
    written, KEP-589's rule for node status): always when anything but
    lastCheckTime and latencyMillis differs (a verdict, reason, message,
    detail, condition, target set, type); when a latency moved by at least
    `latency_moved`; otherwise only once the heartbeat is due, i.e. `new`'s
    lastCheckTime is more than `heartbeat` seconds past `written`'s (as
    the kubelet's nodeStatusReportFrequency: at a 1m interval and the 5m
    default, the 7th steady round). Both times are check times (no clock
    here). `heartbeat` 0: every change is written (the seed's one write per
    round). Nothing written yet, or a written lastCheckTime unreadable or
    later than the new one (from the future: `decide` passes it on only
    then): written."""
    if new == written:
        return False
    if heartbeat <= 0 or not written:
        return True
    rest_w, lat_w = _without_times(written)
    rest_n, lat_n = _without_times(new)
    if rest_w != rest_n or any(latency_moved(w, n) for w, n in zip(lat_w, lat_n, strict=True)):
        return True
    try:
        last, cur = parse_rfc3339(written["lastCheckTime"]), parse_rfc3339(new["lastCheckTime"])
    except (KeyError, TypeError, ValueError):
        return True
    return cur - last > heartbeat or cur < last  # later than the check at hand: from the future (`decide`)


def decide(
    current: dict[str, Any], want: Callable[[dict[str, Any]], dict[str, Any]], checked_at: float | None, now: float,
    heartbeat: float = 0.0,
) -> Patch | Skip:
    """What to write into the ProviderHealth `current` (as last written or
    read): the merge patch from its status to `want(status)`
    (`build_status`, `overdue_status`), or a Skip. NOT_DUE when
    `should_write` says the change is only time and jitter within the
    `heartbeat` (--status-heartbeat). STALE when the check at `checked_at` is
    older than the object's lastCheckTime (another replica wrote a newer
    one), unless that lastCheckTime is past `now` + the clock skew (written
    before messages were validated: it must not block newer writes);
    UNCHANGED when there is nothing to patch. `checked_at` None (the overdue
    sweep) is never stale."""
    prev = current.get("status") or {}
    last = prev.get("lastCheckTime")
    if checked_at is not None and last and rfc3339(checked_at) < last <= rfc3339(now + LIMITS.clock_skew):
        return Skip(STALE)
    new = want(prev)
    if new == prev:
        return Skip(UNCHANGED)
    if not should_write(prev, new, heartbeat):
        return Skip(NOT_DUE)
    return Patch(merge_patch(prev, new))


@dataclass(frozen=True)
class Transition:
    level: int
    message: str
    fields: dict[str, Any]


def transitions(prev: CheckResult | None, cur: CheckResult) -> list[Transition]:
    """The seed's rules: down, or down for a new reason → warning; back up →
    info; ready at first sight → debug; steady → nothing. Judged against
    the previous stored result, so restarts and replicas don't repeat them."""
    before = {t.name: t for t in prev.targets} if prev else {}
    out = []
    for ts in cur.targets:
        p = before.get(ts.name)
        kv: dict[str, Any] = {"provider": cur.provider, "target": ts.name, "address": ts.address, "reason": ts.reason}
        if not ts.ready and (p is None or p.ready or p.reason != ts.reason):
            out.append(Transition(logging.WARNING, "provider target not ready", {**kv, "message": ts.message}))
        elif ts.ready and p is not None and not p.ready:
            out.append(Transition(logging.INFO, "provider target ready", {**kv, "latencyMillis": int(ts.latency * 1000)}))
        elif ts.ready and p is None:
            out.append(Transition(logging.DEBUG, "provider target ready", {**kv, "latencyMillis": int(ts.latency * 1000)}))
    return out
