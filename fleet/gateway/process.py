"""The `fleet gateway` process: the clients file, the rules file (optional), the Redis client, the server on uvloop
(when installed) and its TLS listener (optional, `fleet.gateway.tlsfront`), /metrics, the sweeper; SIGTERM/SIGINT
stop accepting, and the open tunnels get `STOP_GRACE` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import signal
import ssl
from pathlib import Path

from fleet import httpguard, runtime, tracing
from fleet.gateway import decide, intercept, tlsfront
from fleet.gateway.clients import ClientsError, ClientsFile
from fleet.gateway.dialers import Credentials
from fleet.gateway.rules import Rules, RulesError, RulesFile
from fleet.gateway.server import Gateway, GatewayConfig, sweep
from fleet.logs import kv
from fleet.serving import registry_of, serve_metrics
from fleet.settings import Settings, parse_bind_address, pick
from fleet.store import Store, target
from fleet.store.leases import AsyncLeases
from fleet.untrusted import raise_open_files_limit

log = logging.getLogger("fleet.gateway")

STOP_GRACE = 5.0


class GatewayError(ValueError):
    """The gateway cannot start as configured (exit 2)."""


def config_of(settings: Settings) -> GatewayConfig:
    try:
        bans = decide.parse_statuses(settings.gateway_ban_statuses)
    except ValueError as exc:
        raise GatewayError(f"--gateway-ban-statuses: {exc}") from None
    try:
        pattern = decide.compile_ban_pattern(settings.gateway_ban_pattern)
    except ValueError as exc:
        raise GatewayError(f"--gateway-ban-pattern: {exc}") from None
    # The rest by name: GatewayConfig's `lease_ttl` is --gateway-lease-ttl, its `cooldown_blocked` --cooldown-blocked.
    return pick(settings, GatewayConfig, "gateway_", max_per_proxy=settings.max_leases_per_proxy, ban_statuses=bans,
                ban_pattern=pattern)


def interception_of(settings: Settings, clients: ClientsFile) -> tuple[intercept.Authority | None,
                                                                       ssl.SSLContext | None]:
    """The CA and the origins' TLS context when --gateway-ca-dir is set (its key refused when others may read it),
    else (None, None); a client asking for interception without a CA is refused at start."""
    asked = sorted(c.name for c in clients.clients.values() if c.intercept)
    if not settings.gateway_ca_dir:
        if asked:
            raise GatewayError(f"client(s) {', '.join(asked)} ask for interception (intercept: true): --gateway-ca-dir "
                               f"is required (`fleet ca --gateway-ca-dir DIR` makes the CA)")
        return None, None
    directory = Path(settings.gateway_ca_dir)
    if not (directory / intercept.CERT_FILE).exists() and not (directory / intercept.KEY_FILE).exists():
        raise GatewayError(f"--gateway-ca-dir {directory}: no CA there (`fleet ca --gateway-ca-dir {directory}` makes "
                           f"one)")
    try:
        return intercept.Authority(directory), intercept.origin_context(settings.gateway_origin_ca_file)
    except intercept.CaError as exc:
        raise GatewayError(f"--gateway-ca-dir: {exc}") from None


def limits_of(settings: Settings) -> httpguard.Limits:
    return httpguard.Limits(header_timeout=settings.gateway_header_timeout, idle_timeout=settings.gateway_idle_timeout,
                            max_connections=settings.gateway_max_connections,
                            max_connections_per_client=settings.gateway_max_connections_per_client)


def main(settings: Settings) -> int:
    if not settings.gateway_clients_file:
        raise GatewayError("--gateway-clients-file (FLEET_GATEWAY_CLIENTS_FILE) is required: the clients and tokens "
                           "that may use the gateway")
    try:
        clients = ClientsFile(settings.gateway_clients_file)
    except ClientsError as exc:
        raise GatewayError(str(exc)) from None
    bind = parse_bind_address(settings.gateway_bind_address, "--gateway-bind-address")
    if bind is None:
        raise GatewayError("--gateway-bind-address must be host:port or :port (the gateway cannot be turned off)")
    socks_bind = parse_bind_address(settings.gateway_socks_bind_address, "--gateway-socks-bind-address")
    config = config_of(settings)
    authority, origin_tls = interception_of(settings, clients)
    tls = tls_of(settings)
    rules = rules_of(settings, config)
    tracing.setup("fleet-gateway")
    marker = Store.from_url(settings.broker, timeout=5, connect_timeout=3)
    try:
        runtime.own_database(marker, settings.installation_id)
    except BaseException:
        marker.close()
        raise
    target.watch(settings.broker)
    limits = limits_of(settings)
    files = raise_open_files_limit()
    wanted = limits.max_connections + 2 * config.max_tunnels + 256
    if files < wanted:
        log.warning("the open-file limit is below what the connection and tunnel limits need",
                    extra=kv(limit=files, wanted=wanted))
    loop_name = "asyncio"
    factory = None
    if importlib.util.find_spec("uvloop"):
        import uvloop

        factory, loop_name = uvloop.new_event_loop, "uvloop"
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_serve(settings, bind, config, limits, clients, rules, marker, loop_name,
                                 authority=authority, origin_tls=origin_tls, socks_bind=socks_bind, tls=tls))


def tls_of(settings: Settings) -> tuple[tuple[str, int], tlsfront.ServerCert] | None:
    """The TLS listener's address and certificate when --gateway-tls-bind-address is set, else None; GatewayError
    when a file is missing, the key is readable by others, or the certificate is not the key's."""
    bind = parse_bind_address(settings.gateway_tls_bind_address, "--gateway-tls-bind-address")
    if bind is None:
        return None
    if not settings.gateway_tls_cert_file or not settings.gateway_tls_key_file:
        raise GatewayError("--gateway-tls-bind-address needs --gateway-tls-cert-file and --gateway-tls-key-file: the "
                           "certificate the crawlers verify and its key")
    try:
        return bind, tlsfront.ServerCert(settings.gateway_tls_cert_file, settings.gateway_tls_key_file)
    except tlsfront.TlsError as exc:
        raise GatewayError(str(exc)) from None


def rules_of(settings: Settings, config: GatewayConfig) -> RulesFile | Rules:
    """The rules file in force (its defaults the flags'), or, without one, the flags' rule for every host;
    GatewayError naming the file, line and field when its first version is not usable."""
    if not settings.gateway_rules_file:
        return Rules(defaults=config)
    try:
        return RulesFile(settings.gateway_rules_file, defaults=config)
    except RulesError as exc:
        raise GatewayError(str(exc)) from None


async def _serve(settings: Settings, bind: tuple[str, int], config: GatewayConfig, limits: httpguard.Limits,
                 clients: ClientsFile, rules: RulesFile | Rules, marker: Store, loop_name: str, *,
                 authority: intercept.Authority | None, origin_tls: ssl.SSLContext | None,
                 socks_bind: tuple[str, int] | None = None,
                 tls: tuple[tuple[str, int], tlsfront.ServerCert] | None = None) -> int:
    guard = httpguard.Guard(limits)
    leases = AsyncLeases.from_url(settings.broker, max_connections=256)
    gw = Gateway(leases, clients, config, guard, rules=rules, authority=authority, origin_tls=origin_tls,
                 credentials=Credentials(settings.gateway_upstream_secrets_dir))
    try:
        metrics = serve_metrics(settings.gateway_metrics_bind_address, registry_of([gw.series, guard]), marker.ping)
    except OSError as exc:
        log.error("cannot serve /metrics", extra=kv(error=str(exc)))
        return 1
    try:
        server = await asyncio.start_server(gw.handle, bind[0], bind[1], limit=config.max_header_bytes, backlog=4096,
                                            reuse_address=True)
    except OSError as exc:
        log.error("cannot listen", extra=kv(address=f"{bind[0]}:{bind[1]}", error=str(exc)))
        return 1
    servers = [server]
    if socks_bind is not None:  # --gateway-socks-bind-address: the SOCKS5 front-end over the same core and guard
        try:
            servers.append(await asyncio.start_server(gw.handle_socks5, socks_bind[0], socks_bind[1], backlog=4096,
                                                      reuse_address=True))
        except OSError as exc:
            log.error("cannot listen", extra=kv(address=f"{socks_bind[0]}:{socks_bind[1]}", error=str(exc)))
            for each in servers:
                each.close()
            return 1
        log.info("serving SOCKS5", extra=kv(address=f"{socks_bind[0]}:{socks_bind[1]}"))
    if tls is not None:  # the same front-end behind TLS: the handshake is the transport's, within the header timeout
        (host, port), cert = tls
        try:
            servers.append(await asyncio.start_server(gw.handle, host, port, limit=config.max_header_bytes,
                                                      backlog=4096, reuse_address=True, ssl=cert.listener(),
                                                      ssl_handshake_timeout=config.header_timeout))
        except OSError as exc:
            for each in servers:
                each.close()
            log.error("cannot listen", extra=kv(address=f"{host}:{port}", error=str(exc)))
            return 1
        tlsfront.started(cert, f"{host}:{port}")
    log.info("serving the gateway", extra=kv(address=f"{bind[0]}:{bind[1]}", loop=loop_name,
                                             clients=len(clients.clients), rules=len(rules),
                                             max_attempts=config.max_attempts,
                                             max_leases_per_proxy=config.max_per_proxy,
                                             intercepting=authority is not None))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sweeper = asyncio.create_task(sweep(gw), name="gateway-sweep")
    # without it a new proxy joins the load set only when every other is busy, and a gone one never leaves it
    syncer = asyncio.create_task(leases.keep_synced(gw.core.clock, log), name="gateway-lease-sync")
    try:
        await stop.wait()
    finally:
        log.info("stopping: no new connections", extra=kv(tunnels=len(gw.tunnels)))
        for each in servers:
            each.close()
        end = loop.time() + STOP_GRACE
        while gw.tunnels and loop.time() < end:
            await asyncio.sleep(0.1)
        for t in list(gw.tunnels):
            t.end("stopping")
        await asyncio.sleep(0.2)  # their releases
        for task in (sweeper, syncer):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await leases.close()
        if metrics is not None:
            metrics.shutdown()  # type: ignore[attr-defined]
        marker.close()
    return 0
