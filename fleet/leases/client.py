"""A small synchronous client of the lease API (the standard library only),
behind `fleet lease`; docs/leases.md shows the same calls for crawlers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

MAX_ANSWER = 1024 * 1024


class Unreachable(Exception):
    """The API did not answer (connection refused, timeout, not HTTP)."""


def call(base_url: str, method: str, path: str, token: str | None, body: dict[str, Any] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) of one request; Unreachable when there is no HTTP answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base_url.rstrip("/") + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # an http(s) URL we were given
            status, raw, headers = resp.status, resp.read(MAX_ANSWER), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(MAX_ANSWER), dict(exc.headers)
        exc.close()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Unreachable(f"no answer from {base_url}: {getattr(exc, 'reason', exc)}") from None
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = {"error": raw[:200].decode("utf-8", "replace"), "field": None}
    return status, doc if isinstance(doc, dict) else {"value": doc}, headers


def lease(base_url: str, token: str | None, target: str, ttl: int | None = None, sticky: str | None = None,
          provider: str | None = None, region: str | None = None, zone: str | None = None,
          timeout: float = 10.0, pool: str | None = None) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"target": target}
    for name, value in (("ttl", ttl), ("sticky", sticky), ("provider", provider), ("region", region), ("zone", zone),
                        ("pool", pool)):
        if value is not None:
            body[name] = value
    status, doc, _ = call(base_url, "POST", "/v1/leases", token, body, timeout)
    return status, doc
