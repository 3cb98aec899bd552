"""`fleet api` (the discovery and lease API, `fleet.leases`) and `fleet lease`
(its small client: prints a proxy URL for shell use).

`fleet lease` exit codes, as the rest of the CLI: 0 a lease (its URL on
stdout, or the whole answer with -o json); 1 none free now (409: busy or
cooling down, the time one frees up on stderr; 503: no Running, healthy
proxy matches); 2 bad input (a flag, or the API refused the request: 400,
401, 404, 413); 3 the API does not answer, or answers that Redis does not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from fleet.cli import common
from fleet.durations import parse_duration
from fleet.settings import parse_bind_address
from providers.text import show

API_URL_ENV = "FLEET_API_URL"


def cmd_api(args: argparse.Namespace) -> int:
    from fleet.leases import process

    return common.run_process(args, process.main, process.TokenError)


def api_url(args: argparse.Namespace, bind_address: str) -> str:
    """--api-url, else $FLEET_API_URL, else http:// of --api-bind-address (0.0.0.0 → 127.0.0.1)."""
    url = args.api_url or os.environ.get(API_URL_ENV)
    if url:
        if not url.startswith(("http://", "https://")) or len(url) > 2048:
            raise common.BadInput(f"--api-url must be an http:// or https:// URL, got {show(url)}")
        return url
    bind = parse_bind_address(bind_address, "--api-bind-address") or ("127.0.0.1", 8090)
    host = "127.0.0.1" if bind[0] in ("0.0.0.0", "") else bind[0]
    return f"http://{host}:{bind[1]}"


def cmd_lease(args: argparse.Namespace) -> int:
    from fleet.leases import client, process
    from fleet.leases.requests import BadRequest, parse_lease

    settings = common.settings_from(args)
    base = api_url(args, settings.api_bind_address)
    ttl: int | None = None
    if args.ttl is not None:
        try:
            seconds = parse_duration(args.ttl)
        except ValueError as exc:
            raise common.BadInput(f"--ttl: {exc}") from None
        if seconds < 1 or not float(seconds).is_integer():
            raise common.BadInput(f"--ttl must be whole seconds, at least 1s, got {show(args.ttl)}")
        ttl = int(seconds)
    body: dict[str, Any] = {"target": args.target, "ttl": ttl, "sticky": args.sticky, "provider": args.provider,
                            "region": args.region, "zone": args.zone, "pool": args.pool}
    try:  # the same checks as the server's, before any request (the server's --lease-max-ttl may be lower)
        parse_lease(json.dumps({k: v for k, v in body.items() if v is not None}).encode(), 86400.0)
    except BadRequest as exc:
        raise common.BadInput(f"--{exc.field}: {exc.message}" if exc.field else exc.message) from None
    try:
        token = process.load_token(dataclasses.replace(settings, insecure_no_auth=True))
    except process.TokenError as exc:
        raise common.BadInput(str(exc)) from None
    try:
        status, doc = client.lease(base, token.decode() if token else None, args.target, ttl, args.sticky, args.provider,
                                   args.region, args.zone, timeout=args.timeout, pool=args.pool)
    except client.Unreachable as exc:
        raise common.Unreachable(str(exc)) from None
    if status == 200:
        print(json.dumps(doc, indent=2) if args.output == "json" else doc.get("url", ""))
        return common.EXIT_OK
    message = str(doc.get("error") or f"HTTP {status}")
    if status == 409:
        print(f"fleet lease: {message}; one frees up at {doc.get('freeAt')} (in {doc.get('retryAfter')}s)", file=sys.stderr)
        return common.EXIT_NOT_READY
    if status == 503 and "freeAt" in doc:
        print(f"fleet lease: {message}", file=sys.stderr)
        return common.EXIT_NOT_READY
    if status >= 500:
        raise common.Unreachable(f"{base}: HTTP {status}: {message}")
    field = doc.get("field")
    raise common.BadInput(f"HTTP {status}: {message}" + (f" (field {field})" if field else ""))


def _timeout(text: str) -> float:
    try:
        seconds = parse_duration(text, 300.0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return seconds


def add_parsers(sub: Any) -> None:
    s = common.command(sub, "api",
                       help="serve the discovery and lease API (--api-bind-address, default :8090); needs only Redis",
                       example="FLEET_API_TOKEN=... fleet api --api-bind-address :8090",
                       groups=("process", "store", "leases", "api"))
    s.set_defaults(fn=cmd_api)

    s = common.command(sub, "lease", help="lease a proxy from the API and print its URL (http://ip:port)",
                       example="curl -x \"$(fleet lease --target example.com --ttl 5m)\" https://example.com/",
                       groups=("process", "api"))
    s.add_argument("--target", required=True, help="the host name the proxy will be used for")
    s.add_argument("--ttl", help="how long the lease lasts, e.g. 300s or 5m (default: the API's, 5m)")
    s.add_argument("--sticky", help="a key: leases with the same key get the same proxy while it stays leasable")
    s.add_argument("--provider", help="only a proxy of this provider")
    s.add_argument("--region", help="only a proxy in this region")
    s.add_argument("--zone", help="only a proxy in this zone")
    s.add_argument("--pool", help="only a member of this ProxyPool (its refusals count as the pool's demand)")
    s.add_argument("--api-url", help=f"the API's URL [{API_URL_ENV}] (default: http:// of --api-bind-address)")
    s.add_argument("--timeout", type=_timeout, default=10.0, help="time limit of the request (default 10s)")
    s.add_argument("-o", "--output", choices=("url", "json"), default="url", help="url (default) or the whole lease as JSON")
    s.set_defaults(fn=cmd_lease)
