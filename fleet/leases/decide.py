"""What is leasable and what each answer says (pure, table-tested).

A proxy is leasable when it is Running (its endpoint is in
`fleet:px:endpoints`) and the prober's verdict for the same uid is not
`healthy: false`. A proxy not probed yet — no verdict, or a verdict about an
earlier instance under the same name — counts as healthy: the prober is
optional (`fleet up` without `--probe-target` runs none) and a fresh
instance would otherwise wait a probe interval. The lease script applies the
same rule inside Redis (`fleet.store.leases`), plus the cooldowns and the
per-proxy limit.

Status codes: 200 granted / released / revoked / listed / reported; 400 bad
input (and more than one `Authorization` header); 401 no or wrong token; 404
an unknown lease, proxy or path; 409 every matching proxy is busy or cooling
down (the body and `Retry-After` say when one frees up); 410 a report on a
lease whose proxy is gone or another instance now (nothing recorded); 413 a
body over 64 KiB; 503 no Running, healthy proxy matches at all (or Redis does
not answer).

A renewal (POST /v1/leases/{id}/renew) answers like a grant (200, plus
`recreated`), or like a release for what it cannot renew: 410 revoked with
the reason, 404 released, expired or unknown; 409 when Redis lost the lease
and its proxy is full now. While the grace after a loss of Redis data is in
force (`fleet.leases.guard`) a lease request is 503 with `recovering: true`
and `Retry-After` until the grace ends.

A release answers the same thing again while its answer is kept (5 minutes,
`fleet.store.leases.RELEASE_KEEP`). `egressIP` (lease and list answers) is
the prober's last egress address for the proxy's uid, `null` when unknown
(not probed, no prober, or the target echoed none).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import orjson

from fleet.leases.requests import Filters


def decode(raw: bytes | str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def healthy(endpoint: dict[str, Any], verdict: dict[str, Any] | None) -> bool:
    """Not known to be unhealthy: no verdict for this uid, or one that is not `healthy: false`."""
    return verdict is None or verdict.get("uid") != endpoint.get("uid") or verdict.get("healthy") is not False


def timestamp(t: float) -> str:
    """RFC 3339 in UTC with milliseconds (truncated), e.g. 2026-01-02T03:04:05.678Z."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"  # [:-6]: "+00:00"


def endpoint_fields(endpoint: dict[str, Any], egress_ip: str | None) -> dict[str, Any]:
    return {"ip": endpoint.get("ip"), "port": endpoint.get("port"), "egressIP": egress_ip or None,
            "provider": endpoint.get("provider"), "region": endpoint.get("region"), "zone": endpoint.get("zone"),
            "pool": endpoint.get("pool") or None}


def egress_of(endpoint: dict[str, Any], verdict: dict[str, Any] | None) -> str | None:
    """The prober's last egress address for this endpoint's uid, or None."""
    if verdict is None or verdict.get("uid") != endpoint.get("uid"):
        return None
    egress = verdict.get("egressIP")
    return egress if isinstance(egress, str) and egress else None


def listing(endpoints: dict[str, bytes | str], verdicts: dict[str, bytes | str], loads: dict[str, int],
            cooling: dict[str, float], filters: Filters, max_per_proxy: int, now: float) -> list[dict[str, Any]]:
    """GET /v1/proxies: the healthy Running proxies matching `filters`, by key, with their load and
    global cooldown (a target-scoped cooldown depends on the target, so it shows only at lease time)."""
    out = []
    for key in sorted(endpoints):
        ep = decode(endpoints[key])
        if ep is None or not isinstance(ep.get("ip"), str) or not isinstance(ep.get("port"), int):
            continue
        verdict = decode(verdicts.get(key))
        if not filters.matches(ep) or not healthy(ep, verdict):
            continue
        until = cooling.get(key, 0.0)
        out.append({"proxy": key, **endpoint_fields(ep, egress_of(ep, verdict)), "leases": max(0, loads.get(key, 0)),
                    "capacity": max_per_proxy, "coolingUntil": timestamp(until) if until > now else None})
    return out


def granted(lease_id: str, proxy: str, endpoint: dict[str, Any], expires: float, ttl: int,
            egress_ip: str = "") -> dict[str, Any]:
    return {"lease": lease_id, "proxy": proxy, **endpoint_fields(endpoint, egress_ip),
            "url": f"http://{endpoint.get('ip')}:{endpoint.get('port')}", "ttl": ttl, "expiresAt": timestamp(expires)}


def busy(free_at: float, now: float) -> tuple[int, dict[str, Any], int]:
    """409: status, body, Retry-After seconds (at least 1)."""
    wait = max(1, math.ceil(free_at - now))
    return 409, {"error": "every matching proxy is leased to capacity or cooling down for this target",
                 "field": None, "freeAt": timestamp(max(free_at, now)), "retryAfter": wait}, wait


def no_proxy(filters: Filters) -> tuple[int, dict[str, Any]]:
    """503: nothing Running and healthy matches; no time can be promised."""
    asked = ", ".join(f"{n}={v}" for n, v in filters.asked())
    return 503, {"error": "no Running, healthy proxy" + (f" matches {asked}" if asked else ""), "field": None,
                 "freeAt": None, "retryAfter": None}


REVOKED = {"gone": "the proxy was deleted since",
           "replaced": "the proxy was replaced since (another instance or address)",
           "unhealthy": "the proxy turned unhealthy since"}


def released(lease_id: str, got: list[str]) -> tuple[int, dict[str, Any]]:
    """POST /v1/leases/{id}/release from the script's answer (a repeated release: the same answer)."""
    kind = got[0]
    if kind == "released":
        return 200, {"lease": lease_id, "status": "released", "reason": None}
    if kind == "revoked":
        why = got[1]
        return 200, {"lease": lease_id, "status": "revoked", "reason": why, "message": REVOKED.get(why, why)}
    if kind == "expired":
        return 404, {"error": f"lease {lease_id} had already expired", "field": "id"}
    return 404, {"error": f"unknown lease {lease_id}", "field": "id"}


def recovering(until: float, now: float, why: str) -> tuple[int, dict[str, Any]]:
    """503 while the grace after a loss of Redis data is in force: nothing new is leased, renewals go on."""
    wait = max(1, math.ceil(until - now))
    return 503, {"error": f"Redis lost lease data ({why or 'seen by another API process'}): no new leases until "
                          f"{timestamp(until)}, so that no proxy a crawler still holds is leased twice; holders keep "
                          "theirs by renewing (with proxy, target, ip and port)", "field": None,
                 "freeAt": timestamp(until), "retryAfter": wait, "recovering": True}


def renewed(lease_id: str, proxy: str, endpoint: dict[str, Any], expires: float, ttl: float, egress_ip: str,
            recreated: bool) -> dict[str, Any]:
    """200 of POST /v1/leases/{id}/renew: the lease as a grant answers it, and whether it was re-created."""
    return {**granted(lease_id, proxy, endpoint, expires, int(ttl), egress_ip), "recreated": recreated}


def not_renewed(lease_id: str, kind: str, reason: str) -> tuple[int, dict[str, Any]]:
    """A renewal that did not happen: revoked (410, with the reason), released, expired or unknown (404),
    busy (409: Redis lost the lease and its proxy is full now)."""
    if kind == "revoked":
        return 410, {"error": f"lease {lease_id} is revoked: {REVOKED.get(reason, reason)}; release it and lease "
                              "anew", "field": "id", "lease": lease_id, "status": "revoked", "reason": reason}
    if kind == "busy":
        return 409, {"error": f"lease {lease_id} was lost by Redis and its proxy is leased to capacity now: lease "
                              "anew", "field": "id", "freeAt": None, "retryAfter": None}
    if kind == "released":
        return 404, {"error": f"lease {lease_id} was released", "field": "id"}
    if kind == "expired":
        return 404, {"error": f"lease {lease_id} had already expired", "field": "id"}
    return 404, {"error": f"unknown lease {lease_id}", "field": "id"}


def reported(got: list[str], outcome: str) -> tuple[int, dict[str, Any]]:
    """POST /v1/reports from the script's answer."""
    kind = got[0]
    if kind == "unknown-lease":
        return 404, {"error": "unknown or expired lease (report by proxy after a release)", "field": "lease"}
    if kind == "revoked":
        why = got[1]
        return 410, {"error": f"the lease is revoked: {REVOKED.get(why, why)}; the report is about an instance "
                              "that is no longer this proxy's, nothing was recorded", "field": "lease", "reason": why}
    if kind == "unknown-proxy":
        return 404, {"error": "no Running proxy by that key", "field": "proxy"}
    if kind == "no-target":
        return 400, {"error": "target is required", "field": "target"}
    body: dict[str, Any] = {"proxy": got[1], "target": got[2], "outcome": outcome, "cooldown": None, "errorsInARow": 0}
    if kind == "cooldown":
        body["cooldown"] = {"scope": got[3], "until": timestamp(float(got[4]))}
    elif kind == "counted":
        body["errorsInARow"] = int(got[3])
    return 200, body
