"""The `fleet api` process: the token, the Redis client, uvicorn.

The token comes from `--api-token-file` (a mounted Secret; the file wins)
or `FLEET_API_TOKEN`. Without one the process refuses to start unless
`--insecure-no-auth` is given; then it logs a WARNING at start and says
`"insecure": true` on /healthz. uvicorn serves with uvloop and httptools
when they are installed (the `api` extra), one process per replica: scale
by replicas (or processes), which share everything through Redis.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
from collections.abc import Mapping

from fleet import httpguard, runtime, tracing
from fleet.leases.app import INSECURE_WARNING, Api, ApiConfig
from fleet.logs import kv
from fleet.settings import Settings, parse_bind_address, pick
from fleet.store import Store, target
from fleet.store.leases import AsyncLeases
from fleet.untrusted import FileProblem, raise_open_files_limit, read_bounded

log = logging.getLogger("fleet.api")

TOKEN_ENV = "FLEET_API_TOKEN"
MAX_TOKEN = 4096
MIN_TOKEN = 16


class TokenError(ValueError):
    """No usable token and no --insecure-no-auth: the API does not start."""


def load_token(settings: Settings, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The bearer token, or None when the API is to run without one (--insecure-no-auth)."""
    env = os.environ if environ is None else environ
    token: str | None = None
    if settings.api_token_file:
        try:
            raw = read_bounded(settings.api_token_file, MAX_TOKEN, f"--api-token-file {settings.api_token_file}")
        except FileProblem as exc:
            raise TokenError(str(exc)) from None
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise TokenError(f"--api-token-file {settings.api_token_file}: the token must be UTF-8 text") from None
        if not token:
            raise TokenError(f"--api-token-file {settings.api_token_file} is empty")
    elif env.get(TOKEN_ENV, "").strip():
        token = env[TOKEN_ENV].strip()
    if token is None:
        if settings.api_insecure:
            return None
        raise TokenError(f"refusing to start without a token: set {TOKEN_ENV} or --api-token-file "
                         "(or --insecure-no-auth to serve without one)")
    if not token.isprintable() or " " in token:
        raise TokenError("the API token must be printable, without spaces")
    if len(token) < MIN_TOKEN:
        log.warning("the API token is short; use at least 32 random characters", extra=kv(length=len(token)))
    if settings.api_insecure:
        log.info("a token is configured: --insecure-no-auth is ignored")
    return token.encode()


def config_of(settings: Settings, token: bytes | None) -> ApiConfig:
    """By name: ApiConfig's `max_ttl` is --lease-max-ttl, its `cooldown_blocked` --cooldown-blocked."""
    return pick(settings, ApiConfig, "lease_", token=token, max_per_proxy=settings.max_leases_per_proxy)


def limits_of(settings: Settings) -> httpguard.Limits:
    """By name: Limits' `header_timeout` is --api-header-timeout."""
    return pick(settings, httpguard.Limits, "api_")


def main(settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT; 1 when the server could not start (a busy port)."""
    import uvicorn

    token = load_token(settings)
    bind = parse_bind_address(settings.api_bind_address, "--api-bind-address")
    if bind is None:
        raise TokenError("--api-bind-address must be host:port or :port (the API cannot be turned off)")
    tracing.setup("fleet-api")
    marker = Store.from_url(settings.broker, timeout=5, connect_timeout=3)
    try:
        runtime.own_database(marker, settings.installation_id)
    finally:
        marker.close()
    app = Api(AsyncLeases.from_url(settings.broker), config_of(settings, token))
    target.watch(settings.broker)
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools"  # the guard's protocol is httptools' (fleet.httpguard): the api extra installs it
    if token is None:
        log.warning(INSECURE_WARNING)
    log.info("serving the lease API", extra=kv(address=f"{bind[0]}:{bind[1]}", loop=loop, http=http,
                                               max_leases_per_proxy=settings.max_leases_per_proxy,
                                               auth="none" if token is None else "bearer"))
    limits = limits_of(settings)
    protocol, guard = httpguard.guarded(limits)
    app.series.registry.register(guard)
    files = raise_open_files_limit()
    if files < limits.max_connections + 256:
        log.warning("the open-file limit is below --api-max-connections", extra=kv(limit=files,
                                                                                  wanted=limits.max_connections + 256))
    config = uvicorn.Config(app, host=bind[0], port=bind[1], loop=loop, http=protocol, lifespan="on", access_log=False,
                            log_config=None, server_header=False, timeout_keep_alive=int(limits.idle_timeout) + 1,
                            backlog=2048, limit_concurrency=None)
    server = uvicorn.Server(config)
    gc.collect()
    gc.freeze()  # what is loaded by now lives as long as the process: the collector no longer walks it per request
    server.run()
    return 0 if server.started else 1
