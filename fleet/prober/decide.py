"""Verdicts (pure): probe outcomes in a row → Healthy or not, written only
on a transition. One `State` per (Proxy key, uid) in each replica's memory;
`judge` folds one probe's outcome into it and says whether a verdict is due.

The rules, one row each (tests/fleet/prober/test_verdicts.py):

- no verdict yet for this uid: the first probe decides at once (healthy if
  it succeeded, unhealthy if it failed); the thresholds apply to the
  transitions after that;
- healthy: `failure_threshold` failed probes in a row → unhealthy;
- unhealthy: `success_threshold` good probes in a row → healthy;
- a good probe that learns an egress address other than the one last
  written (an egress change, or the first one learnt), or whose mismatch
  flag differs from the one written, is a transition too, so the
  controller sees mismatches and shared addresses; a failed probe never
  forgets the last known egress address;
- anything else: no verdict (the stored one stands).

The counts in a row stop at their threshold (a count past it decides
nothing: a healthy Proxy's successes, an unhealthy one's failures), so a
steady Proxy's `State` comes back from `judge` as the same object, probe
after probe: nothing is allocated per probe (issue 24).

A verdict's document (`fleet:probe:verdicts`, read by the controller):
`{"uid", "healthy", "since", "message", "egressIP", "egressMismatch"}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from providers.text import clip

MAX_MESSAGE = 512


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one probe found."""

    ok: bool
    message: str  # why (bounded, no secrets): "200 in 3 ms", "connection refused", ...
    egress_ip: str | None = None  # the address the target echoed, when it did
    duration: float = 0.0


@dataclass(frozen=True)
class Thresholds:
    failures: int = 3
    successes: int = 1


@dataclass(frozen=True, slots=True)
class State:
    """One Proxy's probe history in this replica, for one uid."""

    uid: str
    healthy: bool | None = None  # the last verdict written; None: none yet
    since: float = 0.0  # when that verdict's health began
    egress_ip: str = ""  # the last egress address written ("" unknown)
    egress_mismatch: bool = False  # as last written
    failures: int = 0  # failed probes in a row, up to the failure threshold
    successes: int = 0  # good probes in a row, up to the success threshold


@dataclass(frozen=True, slots=True)
class Verdict:
    key: str
    uid: str
    healthy: bool
    since: float
    message: str
    egress_ip: str
    egress_mismatch: bool

    def doc(self) -> dict[str, Any]:
        return {"uid": self.uid, "healthy": self.healthy, "since": round(self.since, 3), "message": self.message,
                "egressIP": self.egress_ip, "egressMismatch": self.egress_mismatch}

    def encode(self) -> str:
        return json.dumps(self.doc(), separators=(",", ":"))


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    text = "".join(c if c.isprintable() else " " for c in message)
    return clip(text, limit)


def mismatch(egress: str, endpoint_ip: str) -> bool:
    """The egress address is known and is not the address the instance
    reported. A flag, not a failure: an instance may report a private
    address and egress through a public one (NAT)."""
    return bool(egress) and egress != endpoint_ip


def judge(state: State, outcome: Outcome, key: str, endpoint_ip: str, now: float,
          thresholds: Thresholds) -> tuple[State, Verdict | None]:
    """Fold one probe's `outcome` into `state`; a Verdict when one is due."""
    if outcome.ok:
        successes, failures = min(state.successes + 1, thresholds.successes), 0
    else:
        successes, failures = 0, min(state.failures + 1, thresholds.failures)
    egress = outcome.egress_ip if outcome.ok and outcome.egress_ip else state.egress_ip
    healthy = state.healthy
    why = outcome.message
    if state.healthy is None:
        healthy = outcome.ok
        why = ("first probe: " if outcome.ok else "first probe failed: ") + outcome.message
    elif state.healthy and failures >= thresholds.failures:
        healthy = False
        why = f"{failures} probes failed in a row; last: {outcome.message}"
    elif not state.healthy and successes >= thresholds.successes:
        healthy = True
        why = f"{successes} good probe{'s' if successes > 1 else ''} in a row: {outcome.message}"
    flagged = mismatch(egress, endpoint_ip)
    if healthy == state.healthy and egress == state.egress_ip and flagged == state.egress_mismatch:
        if successes == state.successes and failures == state.failures:
            return state, None  # the steady state: nothing changed
        return State(state.uid, state.healthy, state.since, state.egress_ip, state.egress_mismatch, failures, successes), None
    if healthy == state.healthy:
        why = f"egress address {egress}{' (not the instance address)' if flagged else ''}: {outcome.message}"
    since = state.since if healthy == state.healthy else now
    assert healthy is not None
    new = State(state.uid, healthy, since, egress, flagged, failures, successes)
    return new, Verdict(key, state.uid, healthy, since, bounded(why), egress, flagged)


def restored(uid: str, raw: bytes | str | None) -> State:
    """A replica's starting State for (key, uid) from the stored verdict, so a
    restarted (or newly owning) prober does not announce an unchanged verdict
    again; a verdict for another uid, or one that does not decode, counts as none."""
    if raw is None:
        return State(uid)
    try:
        doc = json.loads(raw)
    except ValueError:
        return State(uid)
    if not isinstance(doc, dict) or doc.get("uid") != uid or not isinstance(doc.get("healthy"), bool):
        return State(uid)
    since = doc.get("since")
    egress = doc.get("egressIP")
    return State(uid, healthy=doc["healthy"], since=float(since) if isinstance(since, (int, float)) else 0.0,
                 egress_ip=egress if isinstance(egress, str) else "", egress_mismatch=doc.get("egressMismatch") is True)
