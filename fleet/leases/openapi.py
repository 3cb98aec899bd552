"""The OpenAPI 3.0 document the API serves at /openapi.json, hand-written
from the same patterns and limits `fleet.leases.requests` enforces (so the
document and the server cannot drift: tests validate the document and run
schemathesis against the real server)."""

from __future__ import annotations

from typing import Any

from fleet.leases import requests as rq
from fleet.store.leases import RELEASE_KEEP


def _error(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"error": {"type": "string"}, "field": {"type": "string", "nullable": True}}
    props.update(extra or {})
    return {"type": "object", "required": ["error", "field"], "properties": props}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _resp(description: str, schema: dict[str, Any], headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"description": description, **_json(schema)}
    if headers:
        out["headers"] = headers
    return out


def document(max_ttl: float, default_ttl: int, max_per_proxy: int, insecure: bool) -> dict[str, Any]:
    high = int(max_ttl)
    err = {"$ref": "#/components/schemas/Error"}
    unauthorized = _resp("No or a wrong bearer token.", err,
                         {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer realm=\"fleet\""}})
    bad = _resp("Bad input: the body, a field or a parameter (named in `field`), or more than one "
                "Authorization header (`field`: authorization).", err)
    too_large = _resp("The body is larger than 64 KiB.", err)
    unavailable = _resp("Redis does not answer.", err)
    host = {"type": "string", "pattern": rq.HOST_PATTERN, "maxLength": rq.HOST_MAX,
            "description": "A host name (RFC 1123 labels); compared case-insensitively, without a trailing dot."}
    filters = {
        "provider": {"type": "string", "pattern": rq.PROVIDER_PATTERN, "maxLength": 63},
        "region": {"type": "string", "pattern": rq.PLACE_PATTERN, "maxLength": 128},
        "zone": {"type": "string", "pattern": rq.PLACE_PATTERN, "maxLength": 128},
        "pool": {"type": "string", "pattern": rq.POOL_PATTERN, "maxLength": 63,
                 "description": "A ProxyPool's name: only its members (in any namespace)."},
    }
    nullable_str = {"type": "string", "nullable": True}
    egress = {"type": "string", "nullable": True,
              "description": "The address the prober's target saw this proxy's requests come from (its last good "
                             "probe of this uid); null when unknown: not probed yet, no prober, or no echo."}
    endpoint = {"ip": {"type": "string"}, "port": {"type": "integer"}, "egressIP": egress, "provider": nullable_str,
                "region": nullable_str, "zone": nullable_str,
                "pool": {"type": "string", "nullable": True, "description": "The ProxyPool it is a member of; null: none."}}
    security: list[dict[str, list[str]]] = [] if insecure else [{"bearer": []}]
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "fleet discovery and lease API",
            "version": "1",
            "description": "Lease the fleet's Running, healthy egress proxies. Every /v1 path needs "
                           "`Authorization: Bearer <token>`; /healthz, /metrics and /openapi.json need none.",
        },
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": _error(),
                "Unavailable": _error({"freeAt": {"type": "string", "format": "date-time", "nullable": True},
                                       "retryAfter": {"type": "integer", "minimum": 1, "nullable": True},
                                       "recovering": {"type": "boolean", "description": (
                                           "true: Redis lost lease data and nothing new is leased until freeAt "
                                           "(the grace period); renewals go on")}}),
                "Proxy": {"type": "object", "required": ["proxy", "ip", "port", "leases", "capacity"],
                          "properties": {"proxy": {"type": "string"}, **endpoint, "leases": {"type": "integer", "minimum": 0},
                                         "capacity": {"type": "integer", "minimum": 1},
                                         "coolingUntil": {"type": "string", "format": "date-time", "nullable": True}}},
                "LeaseRequest": {
                    "type": "object", "additionalProperties": False, "required": ["target"],
                    "properties": {
                        "target": host,
                        "ttl": {"type": "integer", "minimum": 1, "maximum": high, "default": min(default_ttl, high),
                                "description": "Seconds; at most --lease-max-ttl."},
                        "sticky": {"type": "string", "pattern": rq.STICKY_PATTERN, "maxLength": 128,
                                   "description": "Leases with the same key get the same proxy while it stays "
                                                  "leasable and has room."},
                        **filters,
                    },
                },
                "Lease": {"type": "object", "required": ["lease", "proxy", "ip", "port", "url", "ttl", "expiresAt"],
                          "properties": {"lease": {"type": "string", "pattern": rq.LEASE_ID_PATTERN},
                                         "proxy": {"type": "string"}, **endpoint, "url": {"type": "string"},
                                         "ttl": {"type": "integer"}, "expiresAt": {"type": "string", "format": "date-time"}}},
                "RenewRequest": {
                    "type": "object", "additionalProperties": False,
                    "description": "All optional (an empty body renews for the lease's own ttl). proxy and target "
                                   "(with the lease's ip and port) re-create a lease Redis lost, while the grace "
                                   "after that loss is in force and the proxy has room.",
                    "properties": {
                        "ttl": {"type": "integer", "minimum": 1, "maximum": high,
                                "description": "Seconds from now; at most --lease-max-ttl. Default: the lease's."},
                        "proxy": {"type": "string", "pattern": rq.PROXY_PATTERN, "maxLength": 317},
                        "target": host,
                        "ip": {"type": "string", "maxLength": 45, "description": "The lease's ip (IPv4 or IPv6)."},
                        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    },
                },
                "Renewed": {"allOf": [{"$ref": "#/components/schemas/Lease"}, {
                    "type": "object", "required": ["recreated"],
                    "properties": {"recreated": {"type": "boolean", "description": (
                        "true: Redis had lost the lease; it was re-created from the request")}}}]},
                "Released": {"type": "object", "required": ["lease", "status"],
                             "properties": {"lease": {"type": "string"},
                                            "status": {"type": "string", "enum": ["released", "revoked"]},
                                            "reason": {"type": "string", "nullable": True,
                                                       "enum": ["gone", "replaced", "unhealthy", None]},
                                            "message": {"type": "string"}}},
                "ReportRequest": {
                    "description": "By an open lease (target defaults to the lease's), or by proxy with a target.",
                    "oneOf": [
                        {"type": "object", "additionalProperties": False, "required": ["lease", "outcome"],
                         "properties": {"lease": {"type": "string", "pattern": rq.LEASE_ID_PATTERN}, "target": host,
                                        "outcome": {"type": "string", "enum": list(rq.OUTCOMES)}}},
                        {"type": "object", "additionalProperties": False, "required": ["proxy", "target", "outcome"],
                         "properties": {"proxy": {"type": "string", "pattern": rq.PROXY_PATTERN, "maxLength": 317},
                                        "target": host, "outcome": {"type": "string", "enum": list(rq.OUTCOMES)}}},
                    ],
                },
                "Reported": {"type": "object", "required": ["proxy", "target", "outcome"],
                             "properties": {"proxy": {"type": "string"}, "target": {"type": "string"},
                                            "outcome": {"type": "string", "enum": list(rq.OUTCOMES)},
                                            "errorsInARow": {"type": "integer", "minimum": 0},
                                            "cooldown": {"type": "object", "nullable": True,
                                                         "properties": {"scope": {"type": "string", "enum": ["target", "global"]},
                                                                        "until": {"type": "string", "format": "date-time"}}}}},
            },
        },
        "paths": {
            "/v1/proxies": {"get": {
                "summary": "The Running, healthy proxies (filters: provider, region, zone, pool).",
                "operationId": "listProxies", "security": security,
                "parameters": [{"name": n, "in": "query", "required": False, "schema": s} for n, s in filters.items()],
                "responses": {
                    "200": _resp("The proxies, by key.", {"type": "object", "required": ["proxies"], "properties": {
                        "proxies": {"type": "array", "items": {"$ref": "#/components/schemas/Proxy"}}}}),
                    "400": bad, "401": unauthorized, "503": unavailable,
                },
            }},
            "/v1/leases": {"post": {
                "summary": "Lease the least-loaded matching proxy for a target.",
                "operationId": "lease", "security": security,
                "requestBody": {"required": True, **_json({"$ref": "#/components/schemas/LeaseRequest"})},
                "responses": {
                    "200": _resp("A lease.", {"$ref": "#/components/schemas/Lease"}),
                    "400": bad, "401": unauthorized, "413": too_large,
                    "409": _resp(f"Every matching proxy holds {max_per_proxy} lease(s) or is cooling down; `freeAt` "
                                 "and `Retry-After` say when one frees up.", {"$ref": "#/components/schemas/Unavailable"},
                                 {"Retry-After": {"schema": {"type": "integer"}}}),
                    "503": _resp("No Running, healthy proxy matches, Redis lost lease data and the grace is in "
                                 "force (`recovering`, `Retry-After`), or Redis does not answer.",
                                 {"$ref": "#/components/schemas/Unavailable"}),
                },
            }},
            "/v1/leases/{id}/release": {"post": {
                "summary": "Release a lease: released, or revoked when its proxy was deleted, replaced (another "
                           "uid, instance or ip:port) or turned unhealthy since. Idempotent: a repeated release "
                           "answers the same.",
                "operationId": "release", "security": security,
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": _resp("Released or revoked; a repeated release answers the first one's answer "
                                           f"again (for {RELEASE_KEEP:.0f} s).", {"$ref": "#/components/schemas/Released"}),
                              "400": bad, "401": unauthorized, "404": _resp("Unknown or expired lease.", err),
                              "503": unavailable},
            }},
            "/v1/leases/{id}/renew": {"post": {
                "summary": "Extend a lease to now + ttl. Answers like a release for what it cannot renew. After "
                           "a loss of Redis data, a renewal naming its proxy and target re-creates the lease.",
                "operationId": "renew", "security": security,
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "requestBody": {"required": False, **_json({"$ref": "#/components/schemas/RenewRequest"})},
                "responses": {"200": _resp("Renewed (or re-created).", {"$ref": "#/components/schemas/Renewed"}),
                              "400": bad, "401": unauthorized,
                              "404": _resp("Released, expired or unknown lease.", err),
                              "409": _resp("Redis lost the lease and its proxy is leased to capacity now.",
                                           {"$ref": "#/components/schemas/Unavailable"}),
                              "410": _resp("Revoked: its proxy was deleted, replaced or turned unhealthy (`reason`).",
                                           _error({"lease": {"type": "string"},
                                                   "status": {"type": "string", "enum": ["revoked"]},
                                                   "reason": {"type": "string",
                                                              "enum": ["gone", "replaced", "unhealthy"]}})),
                              "413": too_large, "503": unavailable},
            }},
            "/v1/reports": {"post": {
                "summary": "Report how a fetch through a proxy went: blocked starts a cooldown for that target, "
                           "errors in a row a global one, ok resets the count.",
                "operationId": "report", "security": security,
                "requestBody": {"required": True, **_json({"$ref": "#/components/schemas/ReportRequest"})},
                "responses": {"200": _resp("Recorded.", {"$ref": "#/components/schemas/Reported"}),
                              "400": bad, "401": unauthorized, "404": _resp("Unknown lease or proxy.", err),
                              "410": _resp("The lease's proxy was deleted or is another instance now (`reason`: "
                                           "gone, replaced): nothing recorded.",
                                           _error({"reason": {"type": "string", "enum": ["gone", "replaced"]}})),
                              "413": too_large, "503": unavailable},
            }},
            "/healthz": {"get": {
                "summary": "Liveness and Redis reachability; says when the API runs without a token.",
                "operationId": "healthz", "security": [],
                "responses": {
                    "200": _resp("Serving.", {"type": "object", "required": ["ok", "insecure"], "properties": {
                        "ok": {"type": "boolean"}, "insecure": {"type": "boolean"}, "warning": {"type": "string"},
                        "recovering": {"type": "boolean"},
                        "graceUntil": {"type": "string", "format": "date-time"}}}),
                    "503": _resp("Redis does not answer.", {"type": "object", "properties": {
                        "ok": {"type": "boolean"}, "insecure": {"type": "boolean"}, "error": {"type": "string"}}}),
                },
            }},
        },
    }
