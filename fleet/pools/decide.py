"""The pool's next step, as one pure decision:

    decide(pool, members, demand, now, history) → Decision(creates, deletes, status, scale_to, recommendation)

`members` are the pool's Proxies (`fleet.pools.model.Member`: phase,
health, age, leases, cooldowns, template hash, the prober's egress
address); `demand` is the lease API's (None: unknown, no autoscaling this time); `history` the autoscaler's past
recommendations (the caller keeps them, as an HPA does). The caller
(`fleet.pools.cluster`) creates and deletes the member Proxies, writes
`status` to the pool's status subresource and, when `scale_to` is set,
`spec.replicas` through the scale subresource. Nothing here reads a clock or
the API. The rules, one row each in tests/fleet/pools/test_decide.py:

| rule                 | what                                                                                  |
|----------------------|---------------------------------------------------------------------------------------|
| spread               | replicas over providers by weight: floors, then the remainders largest first, ties to |
|                      | the earlier entry (10 at 3:1 → 8:2); a provider's `max` caps it, the rest goes to the |
|                      | others by their weights (ScalingLimited=True ProviderMax when all are capped)         |
| refusal              | a provider with a member Failed for good (a latch) or out of quota refuses for       |
|                      | REFUSAL_HOLD: its share is capped at its working members, the rest moves to the      |
|                      | others (ScalingLimited=True ProviderRefused, naming it)                               |
| rounding             | maxSurge of replicas rounds up, maxUnavailable down; both 0 after rounding: 1 unavailable |
| updated              | a member is updated while its template hash is its provider's and it is younger than   |
|                      | maxAge + its jitter (a fixed share of maxAgeJitter from its uid); else outdated       |
| creates              | each provider up to its share of updated members, at most replicas + maxSurge members |
|                      | in all (so rotation is surge-first: the new one before the old one goes)              |
| deletes              | outdated members, and updated ones beyond a provider's share, in the scale-down order;|
|                      | an available one only while availableReplicas stays ≥ replicas − maxUnavailable; the  |
|                      | reason: rotation (past maxAge), template (changed, or its provider no longer listed), |
|                      | remediation, egress, scale-down                                                        |
| scale-down order     | not created yet, then Failed/unhealthy, then outdated or egress duplicates, then most |
|                      | cooldowns, then fewest leases, then oldest (then by name)                             |
| remediation          | unhealthy (Failed, or Healthy=False for unhealthyAfter) members are deleted (and so   |
|                      | replaced) only while at most maxUnhealthy (rounded down) are faulty (unhealthy, or an |
|                      | egress duplicate); above, none is, not even by rotation, and no egress duplicate:     |
|                      | RemediationAllowed=False (TooManyUnhealthy)                                           |
| egress               | uniqueEgressIP: of the Running members with one egress address (the prober's), all   |
|                      | but the earliest created (then by name) are egress duplicates: outdated like a member |
|                      | past maxAge, so replaced surge-first within maxSurge/maxUnavailable (reason egress), |
|                      | first in the scale-down order after the unhealthy; only while the breaker allows      |
| leases               | a replaced member's leases are revoked when it is deleted (the lease API answers      |
|                      | `revoked` once its endpoint goes), so with maxUnavailable 0 only after its            |
|                      | replacement is available; maxUnavailable > 0 lets that many go first (a Deployment's) |
| autoscale            | demand / (per-member capacity × target%) rounded up, clamped to [min, max]; a scale up |
|                      | takes the lowest recommendation of its window, a scale down the highest of its window;|
|                      | ScalingLimited=True AtMaxReplicas / AtMinReplicas when clamped                        |
| Available            | True while availableReplicas ≥ replicas − maxUnavailable                              |
| Progressing          | True NewReplicasAvailable when every member is updated and available; else True      |
|                      | ReplicasUpdating, False ProgressDeadlineExceeded after progressDeadline without a     |
|                      | change in the counts or the generation                                               |
| deleting             | a pool being deleted does nothing (its members go with it: ownerReferences)           |
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.durations import rfc3339
from fleet.pools.model import (
    AVAILABLE,
    PROGRESSING,
    REMEDIATION_ALLOWED,
    SCALING_LIMITED,
    IntOrPercent,
    Member,
    Pool,
    PoolSpec,
    ProviderShare,
)
from fleet.proxies.decide import set_condition
from fleet.proxies.model import Condition

REFUSAL_HOLD = 300.0  # seconds a provider counts as refusing after its last refused member

# reasons
R_AVAILABLE, R_UNAVAILABLE = "MinimumReplicasAvailable", "MinimumReplicasUnavailable"
R_COMPLETE, R_UPDATING, R_DEADLINE = "NewReplicasAvailable", "ReplicasUpdating", "ProgressDeadlineExceeded"
R_WITHIN, R_TOO_MANY = "WithinMaxUnhealthy", "TooManyUnhealthy"
R_NOT_LIMITED, R_REFUSED, R_PROVIDER_MAX, R_AT_MAX, R_AT_MIN = (
    "WithinLimits", "ProviderRefused", "ProviderMax", "AtMaxReplicas", "AtMinReplicas")

# why a member is deleted (the counters' label): rotation by age, a template changed (or its provider no longer
# listed), the remediation of an unhealthy member, an egress address shared with an earlier member (uniqueEgressIP);
# the last four are replacements (fleet.pools.metrics)
SCALE_DOWN, ROTATION, TEMPLATE, REMEDIATION, EGRESS = "scale-down", "rotation", "template", "remediation", "egress"
REPLACEMENTS = (ROTATION, TEMPLATE, REMEDIATION, EGRESS)


@dataclass(frozen=True)
class Demand:
    """The lease API's demand for this pool over its window."""

    held: int  # leases held
    refused: int  # lease requests refused for want of a free proxy
    per_member: int  # leases one member may hold (--max-leases-per-proxy)


@dataclass(frozen=True)
class Create:
    provider: str
    template_hash: str


@dataclass(frozen=True)
class Delete:
    name: str
    reason: str  # SCALE_DOWN | ROTATION | TEMPLATE | REMEDIATION | EGRESS


@dataclass(frozen=True)
class Decision:
    creates: tuple[Create, ...]
    deletes: tuple[Delete, ...]
    status: Mapping[str, Any]  # the status subresource
    scale_to: int | None = None  # autoscale: write spec.replicas
    recommendation: tuple[float, int] | None = None  # autoscale: (now, replicas) for the history
    desired: int = 0
    max_unavailable: int = 0  # strategy.maxUnavailable resolved against desired (after the both-0 rule)
    remediation_blocked: bool = False  # more unhealthy than maxUnhealthy: nothing is replaced


# --- arithmetic ---------------------------------------------------------------------------


def resolve(value: IntOrPercent, total: int, round_up: bool) -> int:
    """An int, or a percent of `total` rounded up or down (Deployment's rule)."""
    if isinstance(value, int):
        return value
    pct = int(value.rstrip("%"))
    return math.ceil(total * pct / 100) if round_up else (total * pct) // 100


def spread(n: int, shares: Sequence[tuple[str, int, int | None]]) -> dict[str, int]:
    """`n` over (name, weight, cap): floors of n·w/W, then the remainders
    largest first (ties to the earlier entry); an entry over its cap is held
    at it and the rest spread again over the others. The sum is less than
    `n` only when every entry is capped."""
    out = {name: 0 for name, _, _ in shares}
    active = list(range(len(shares)))
    left = n
    while left > 0 and active:
        total = sum(shares[i][1] for i in active)
        base = {i: left * shares[i][1] // total for i in active}
        rem = {i: left * shares[i][1] % total for i in active}
        extra = left - sum(base.values())
        for i in sorted(active, key=lambda i: (-rem[i], i))[:extra]:
            base[i] += 1
        over = [i for i in active if shares[i][2] is not None and base[i] > (shares[i][2] or 0)]
        if not over:
            for i in active:
                out[shares[i][0]] = base[i]
            return out
        for i in over:
            cap = shares[i][2] or 0
            out[shares[i][0]] = cap
            left -= cap
            active.remove(i)
    return out


def template_hash(spec: PoolSpec, share: ProviderShare) -> str:
    """The hash of what a member on this provider is made from (10 hex characters, a label value)."""
    placement = share.placement if share.placement is not None else spec.template.placement
    doc = {"provider": share.provider, "port": spec.template.port,
           "placement": [placement.region, placement.zone, placement.machine_type, placement.image],
           "cloudInit": spec.template.raw.get("cloudInit")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


def jitter(uid: str, max_jitter: float) -> float:
    """A member's fixed share of maxAgeJitter, from its uid (the same on every replica and restart)."""
    if max_jitter <= 0:
        return 0.0
    return max_jitter * int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


# --- the decision -------------------------------------------------------------------------------


def _autoscale(pool: Pool, demand: Demand | None, now: float,
               history: Sequence[tuple[float, int]]) -> tuple[int, int | None, tuple[float, int] | None, str, str]:
    """(desired, scale_to, recommendation, limit reason, its message)."""
    a, current = pool.spec.autoscale, pool.spec.replicas
    if a is None or demand is None:
        return current, None, None, "", ""
    per = max(1, demand.per_member) * a.target_utilization / 100
    raw = math.ceil((demand.held + demand.refused) / per) if demand.held + demand.refused else 0
    rec = min(a.max, max(a.min, raw))
    why, msg = "", ""
    if raw > a.max:
        why, msg = R_AT_MAX, f"demand asks for {raw} replicas; autoscale.max is {a.max}"
    elif raw < a.min:
        why, msg = R_AT_MIN, f"demand asks for {raw} replicas; autoscale.min is {a.min}"
    recs = [*history, (now, rec)]
    up = min(n for t, n in recs if t >= now - a.up_window)
    down = max(n for t, n in recs if t >= now - a.down_window)
    desired = current
    if up > current:
        desired = up
    elif down < current:
        desired = down
    desired = min(a.max, max(a.min, desired))
    return desired, (desired if desired != current else None), (now, rec), why, msg


def decide(pool: Pool, members: Sequence[Member], demand: Demand | None, now: float,
           history: Sequence[tuple[float, int]] = ()) -> Decision:
    spec, prior = pool.spec, pool.status
    live = [m for m in members if not m.deleting]
    desired, scale_to, rec, limit_why, limit_msg = _autoscale(pool, demand, now, history)
    if pool.deleting:
        return Decision((), (), {}, desired=desired)

    surge = resolve(spec.strategy.max_surge, desired, round_up=True)
    unavailable = resolve(spec.strategy.max_unavailable, desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    max_unhealthy = resolve(spec.remediation.max_unhealthy, desired, round_up=False)
    hashes = {s.provider: template_hash(spec, s) for s in spec.providers}

    def available(m: Member) -> bool:
        return m.ready_since is not None and now - m.ready_since >= spec.min_ready

    def unhealthy(m: Member) -> bool:
        return m.failed or (m.unhealthy_since is not None and now - m.unhealthy_since >= spec.remediation.unhealthy_after)

    def updated(m: Member) -> bool:
        if m.template_hash != hashes.get(m.provider):
            return False
        return spec.max_age is None or now - m.created_at < spec.max_age + jitter(m.uid, spec.max_age_jitter)

    # uniqueEgressIP: of the Running members sharing an egress address, all but the earliest created
    shared: set[str] = set()
    if spec.unique_egress:
        by_ip: dict[str, list[Member]] = {}
        for m in live:
            if m.running and m.egress_ip:
                by_ip.setdefault(m.egress_ip, []).append(m)
        for group in by_ip.values():
            shared.update(m.name for m in sorted(group, key=lambda m: (m.created_at, m.name))[1:])

    # the breaker: unhealthy members and egress duplicates are replaced only while at most maxUnhealthy are either
    sick = [m for m in live if unhealthy(m)]
    faulty = {m.name for m in sick} | shared
    remediate = len(faulty) <= max_unhealthy
    replacing = shared if remediate else set()

    def current(m: Member) -> bool:
        """Updated and not to be replaced for its egress address: what counts toward its provider's share."""
        return updated(m) and m.name not in replacing

    def order(m: Member) -> tuple[int, int, int, float, str]:
        rank = 0 if not m.created else 1 if unhealthy(m) else 2 if not current(m) else 3
        return rank, -m.cooldowns, m.leases, m.created_at, m.name

    # the spread, with refusing providers capped at their working members
    refused_at: dict[str, float] = {}
    for s in spec.providers:
        mine = [m for m in live if m.provider == s.provider]
        if any(m.refused for m in mine):
            refused_at[s.provider] = now
        elif s.provider in prior.refused_at and now - prior.refused_at[s.provider] < REFUSAL_HOLD:
            refused_at[s.provider] = prior.refused_at[s.provider]
    caps: list[tuple[str, int, int | None]] = []
    for s in spec.providers:
        cap = s.max
        if s.provider in refused_at:
            working = sum(1 for m in live if m.provider == s.provider and not m.refused and not m.failed)
            cap = working if cap is None else min(cap, working)
        caps.append((s.provider, s.weight, cap))
    targets = spread(desired, caps)
    limits: list[tuple[str, str]] = []
    if refused_at:
        limits.append((R_REFUSED, "refusing (a member failed for good or ran out of quota), its share beyond its "
                                  "working members moved to the others: " + ", ".join(sorted(refused_at))))
    if sum(targets.values()) < desired:
        limits.append((R_PROVIDER_MAX, f"the providers' max and refusals allow {sum(targets.values())} of {desired} replicas"))
    if limit_why:
        limits.append((limit_why, limit_msg))

    # remediation
    deletes: dict[str, str] = {}
    if remediate:
        for m in sorted(sick, key=order):
            deletes[m.name] = REMEDIATION

    # deletions: outdated members and updated ones beyond their provider's share, in order, within the budget
    remaining = [m for m in live if m.name not in deletes]
    candidates: list[tuple[Member, str]] = []
    providers = [s.provider for s in spec.providers] + sorted({m.provider for m in remaining} - set(hashes))
    for prov in providers:
        mine = [m for m in remaining if m.provider == prov]
        upd = sorted((m for m in mine if current(m)), key=order)
        old = [m for m in mine if not current(m)]
        excess = max(0, len(upd) - targets.get(prov, 0))
        candidates += [(m, SCALE_DOWN) for m in upd[:excess]]
        candidates += [(m, EGRESS if updated(m) else ROTATION if m.template_hash == hashes.get(m.provider) else TEMPLATE)
                       for m in old if remediate or not unhealthy(m)]
    budget = sum(1 for m in remaining if available(m)) - (desired - unavailable)
    for m, why in sorted(candidates, key=lambda c: order(c[0])):
        if not available(m):
            deletes[m.name] = why
        elif budget > 0:
            deletes[m.name] = why
            budget -= 1

    # creates: each provider up to its share of updated members, within replicas + maxSurge
    kept = [m for m in live if m.name not in deletes]
    # an unhealthy member kept by the breaker holds its place: no replacement is made for it
    need = {p: max(0, targets[p] - sum(1 for m in kept if m.provider == p and (current(m) or (not remediate and unhealthy(m)))))
            for p in targets}
    room = max(0, desired + surge - len(kept))
    creates: list[Create] = []
    index = {s.provider: i for i, s in enumerate(spec.providers)}
    for _ in range(min(room, sum(need.values()))):
        p = min((p for p in need if need[p] > 0), key=lambda p: (-need[p], index[p]))
        need[p] -= 1
        creates.append(Create(p, hashes[p]))

    # status: what was observed before this step's writes
    counts = {
        "replicas": len(live),
        "readyReplicas": sum(1 for m in live if m.ready_since is not None),
        "availableReplicas": sum(1 for m in live if available(m)),
        "updatedReplicas": sum(1 for m in live if updated(m)),
    }
    moved = (counts["replicas"], counts["readyReplicas"], counts["availableReplicas"], counts["updatedReplicas"]) != (
        prior.replicas, prior.ready, prior.available, prior.updated) or pool.generation != prior.observed_generation
    progress_time = now if moved or prior.progress_time is None else prior.progress_time
    g = pool.generation
    conds = prior.conditions
    avail = counts["availableReplicas"]
    conds = set_condition(conds, Condition(
        AVAILABLE, "True" if avail >= desired - unavailable else "False",
        R_AVAILABLE if avail >= desired - unavailable else R_UNAVAILABLE,
        f"{avail} of {desired} available (at least {max(0, desired - unavailable)} wanted)", g), now)
    complete = counts["updatedReplicas"] == desired and avail >= desired and counts["replicas"] == desired
    if complete:
        progressing = Condition(PROGRESSING, "True", R_COMPLETE, f"{desired} updated and available", g)
    elif now - progress_time > spec.progress_deadline:
        progressing = Condition(PROGRESSING, "False", R_DEADLINE,
                                f"no progress for {int(now - progress_time)} s (progressDeadlineSeconds "
                                f"{int(spec.progress_deadline)}): {counts['updatedReplicas']} updated, {avail} available "
                                f"of {desired}", g)
    else:
        progressing = Condition(PROGRESSING, "True", R_UPDATING,
                                f"{counts['updatedReplicas']} updated, {avail} available of {desired}", g)
    conds = set_condition(conds, progressing, now)
    conds = set_condition(conds, Condition(
        REMEDIATION_ALLOWED, "True" if remediate else "False", R_WITHIN if remediate else R_TOO_MANY,
        f"{len(sick)} unhealthy" + (f", {len(shared)} sharing an egress address" if shared else "")
        + f", maxUnhealthy {max_unhealthy}" + ("" if remediate else ": nothing is replaced"), g), now)
    conds = set_condition(conds, Condition(
        SCALING_LIMITED, "True" if limits else "False", limits[0][0] if limits else R_NOT_LIMITED,
        "; ".join(m for _, m in limits) if limits else "", g), now)
    per_provider = []
    for s in spec.providers:
        mine = [m for m in live if m.provider == s.provider]
        entry: dict[str, Any] = {"provider": s.provider, "desired": targets.get(s.provider, 0), "replicas": len(mine),
                                 "readyReplicas": sum(1 for m in mine if m.ready_since is not None)}
        if s.provider in refused_at:
            entry["refusedAt"] = rfc3339(refused_at[s.provider])
        per_provider.append(entry)
    status = {**counts, "unhealthyReplicas": len(sick), "observedGeneration": g, "selector": pool.selector,
              "progressTime": rfc3339(progress_time), "providers": per_provider,
              "conditions": [c.to_dict() for c in conds]}
    ordered = tuple(Delete(name, why) for name, why in sorted(deletes.items(), key=lambda kv: order(
        next(m for m in live if m.name == kv[0]))))
    return Decision(tuple(creates), ordered, status, scale_to, rec, desired, unavailable, not remediate)
