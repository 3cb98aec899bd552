"""Process settings: one table of flags (`OPTIONS`), each also `FLEET_<FLAG>`
in the environment (flags win), and the seed's schedule validation.

Each option's entry holds all its facts: group, type (str, duration, int,
bool), default, bounds, choices and named check. `Settings`' field defaults,
`Settings.validate`, the CLI's flags and help ("Default …") and README's
settings table (`python -m fleet.settings --readme README.md`) are derived
from it.

The CLI turns this table into flags and exports the parsed values to the
Celery processes it starts, which read them back with `Settings.from_env`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from fleet.durations import MAX_DURATION, format_duration, parse_duration
from providers import names
from providers.text import clip, show

MIN_INTERVAL = 10.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_INSTALLATION = "default"
DEFAULT_NAMESPACE = "default"  # the installation's namespace outside a cluster (no pod namespace)
ALL_NAMESPACES = "*"  # --proxy-namespaces: every namespace (the widest grant)
MAX_PROXY_NAMESPACES = 100
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
_DB = re.compile(r"/?([0-9]{1,5})?", re.ASCII)
SECRET_QUERY_KEYS = ("password", "pass", "passwd", "secret", "token", "sentinel_password")


def redact_url(url: str) -> str:
    """`url` fit to print: the password (or a lone user part, which Redis
    treats as one) replaced by ***, and password-like query values too.
    Works on URLs that do not parse, and bounds the length."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if sep:
        # The authority ends at the first '/', '?' or '#' after the last '@'
        # in it; a password may itself hold '/', so look for '@' first.
        at = rest.rfind("@", 0, len(rest.split("?", 1)[0].split("#", 1)[0]))
        if at >= 0:
            userinfo, hostpart = rest[:at], rest[at + 1:]
            user, colon, _ = userinfo.partition(":")
            rest = (f"{user}:***@" if colon else "***@") + hostpart
        text = scheme + sep + rest
    if "?" in text:
        base, _, query = text.partition("?")
        parts = []
        for part in query.split("&"):
            key, eq, _ = part.partition("=")
            parts.append(f"{key}=***" if eq and key.lower() in SECRET_QUERY_KEYS else part)
        text = base + "?" + "&".join(parts)
    return clip(text, 200)


def broker_problem(url: str) -> str | None:
    """Why `url` is not a usable Redis broker URL (scheme, host, port, db,
    query), or None. Never quotes the password."""
    from fleet.store import parse_url

    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        return "must be printable ASCII without spaces"
    if url.startswith("sentinel://"):
        from fleet.store.target import TargetError, parse

        try:
            parse(url)
        except TargetError as exc:
            return str(exc)
        return None
    # Exception texts of the URL parsers may quote the netloc (and so the
    # password): messages here are our own.
    try:
        parts = urlsplit(url)
    except ValueError:
        return "cannot be parsed (an unbalanced '[': an IPv6 host goes in brackets)"
    try:
        port = parts.port
    except ValueError:
        return "the port must be a number from 1 to 65535 (a password with '/', '@' or ':' must be percent-encoded)"
    if parts.scheme not in ("redis", "rediss", "unix"):
        return "must be a redis://, rediss://, unix:// or sentinel:// URL"
    if parts.scheme == "unix":
        if not parts.path.startswith("/"):
            return "a unix:// URL needs an absolute socket path, e.g. unix:///run/redis.sock?db=0"
    else:
        if not parts.hostname:
            return "needs a host, e.g. redis://:PASSWORD@HOST:6379/0"
        if port == 0:
            return "the port must be from 1 to 65535"
        if not _DB.fullmatch(parts.path):
            return "the path must be a database number, e.g. /0"
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "db" and not _PORT.fullmatch(value):
            return "db must be a database number"
        if key == "ssl_cert_reqs" and value not in ("none", "optional", "required"):
            return "ssl_cert_reqs must be none, optional or required"
    try:
        parse_url(url)
    except (ValueError, TypeError):
        keys = ", ".join(sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)}))[:120]
        return f"cannot be parsed by the Redis client (query parameters: {keys or 'none'})"
    return None


def parse_bind_address(address: str, flag: str = "--metrics-bind-address") -> tuple[str, int] | None:
    """`0` (or empty) → None (off); `:8080` → ("0.0.0.0", 8080);
    `127.0.0.1:9000`, `localhost:9000`. Raises SettingsError naming `flag`."""
    if address in ("0", ""):
        return None
    host, sep, port = address.rpartition(":")
    why = None
    if not sep or not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
        why = "the port must be a number from 1 to 65535"
    elif host.startswith("[") or ":" in host:
        why = "IPv6 addresses are not supported; use an IPv4 address, a host name or :PORT"
    elif host and not names.is_hostname(host, trailing_dot=True):
        why = "the host must be an IPv4 address or a host name"
    elif host and host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            why = "not a valid IPv4 address"
    if why:
        raise SettingsError(f"{flag} must be host:port, :port or 0 ({why}), got {show(address)}")
    return (host or "0.0.0.0"), int(port)


class SettingsError(ValueError):
    """A process setting is invalid; the message names the flag and value."""


GROUPS = ("process", "health", "proxies", "gc", "prober", "api", "gateway")  # README's table lists them in this order
KINDS = ("str", "duration", "int", "bool")
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
MAX_PATH = 4096


@dataclass(frozen=True)
class Option:
    """One setting: every fact about it, from which `Settings`' defaults,
    `Settings.validate`, the CLI's flags and help and README's table come."""

    flag: str  # without the leading --
    group: str  # one of GROUPS
    help: str  # what it is and does; its default and bounds are added from the fields below
    kind: str = "str"  # one of KINDS: str as given, duration in seconds, int, bool
    default: Any = None  # the typed value (seconds for a duration); None: unset
    low: float | None = None  # bounds, both inclusive, checked by `validate`
    high: float | None = None
    zero: str | None = None  # 0 is allowed outside [low, high] and means this ("off")
    shown_default: str | None = None  # the default in words, when not the value itself
    shown_bounds: str | None = None  # the bounds in words, when a check other than low/high keeps them
    choices: tuple[str, ...] = ()
    any_case: bool = False  # choices compared case-insensitively
    check: str | None = None  # a named check of `validate` (path, bind, label, namespaces, broker, probe-target, regex)
    short: str | None = None  # a one-letter alias (-c)
    env_var: str | None = None  # when not FLEET_<FLAG>

    def __post_init__(self) -> None:
        if self.group not in GROUPS or self.kind not in KINDS:
            raise ValueError(f"--{self.flag}: group {self.group!r} or kind {self.kind!r} unknown")

    @property
    def env(self) -> str:
        return self.env_var or "FLEET_" + self.flag.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.flag.replace("-", "_")

    def shown(self, value: Any) -> str:
        """A value of this option as a user writes it (1m, not 60)."""
        if value is None:
            return "none"
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.kind == "duration":
            return short_duration(value)
        return str(value)

    @property
    def default_text(self) -> str:
        return self.shown_default or self.shown(self.default)

    @property
    def bounds(self) -> str | None:
        """The bounds in words, as the messages of `validate` say them."""
        if self.shown_bounds:
            return self.shown_bounds
        if self.choices:
            return _either(self.choices)
        if self.high is None:
            return None
        high = self.shown(self.high)
        if not self.low:
            return f"from 0 ({self.zero}) to {high}" if self.zero else f"at most {high}"
        text = f"from {self.shown(self.low)} to {high}"
        return f"0 ({self.zero}) or {text}" if self.zero else text

    @property
    def help_text(self) -> str:
        bounds = f"; {self.bounds}" if self.bounds else ""
        return f"{self.help} Default {self.default_text}{bounds}."


def short_duration(seconds: float) -> str:
    """format_duration without the zero tails: 1m, 1h, 1m30s, 500ms, 0."""
    text = format_duration(seconds)
    if text == "0s":
        return "0"
    text = re.sub(r"(?<=[hm])0s$", "", text)
    return re.sub(r"(?<=h)0m$", "", text)


def _either(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _bind(flag: str, group: str, help: str, default: str) -> Option:
    return Option(flag, group, help + "; 0 turns it off.", default=default, check="bind")


def _path(flag: str, group: str, help: str, shown_default: str | None = None, short: str | None = None) -> Option:
    return Option(flag, group, help, shown_default=shown_default, check="path", short=short)


OPTIONS: tuple[Option, ...] = (
    _path("providers-config", "process", "Path of the providers YAML file.", short="c"),
    Option("broker", "process", "Redis URL of the Celery broker, result backend and latest state (password and TLS "
                                "via the URL: rediss://:pw@host:6380/0; Sentinel: "
                                "sentinel://h1:26379;h2:26379/0?master_name=NAME).",
           default=DEFAULT_BROKER, check="broker", env_var="FLEET_BROKER_URL"),
    Option("provider-check-interval", "health", "Interval between provider health checks; 0 turns them off (and the "
                                                "controller deletes its objects).",
           "duration", 60.0, shown_bounds=f"0 (off) or at least {short_duration(MIN_INTERVAL)}"),
    Option("provider-check-timeout", "health", "Time limit of one provider check.", "duration", 0.0,
           shown_default="15s, or the interval when that is shorter", shown_bounds="if set, at most the interval"),
    Option("status-heartbeat", "health", "How often a ProviderHealth status is written when nothing but its "
                                         "lastCheckTime and latency jitter (under max(10ms, 20%)) moved; a change of "
                                         "a verdict, reason, message, detail or condition is written at once.",
           "duration", 300.0, 10.0, 3600.0, zero="every round"),
    _bind("metrics-bind-address", "process", "host:port of the controller's /metrics", ":8080"),
    _bind("worker-metrics-bind-address", "process",
          "host:port of a provider worker's /metrics (its provider-call counters), e.g. :9090", "0"),
    _path("kubeconfig", "process", "Kubeconfig for the controller's writes.",
          "in-cluster, $KUBECONFIG, ~/.kube/config, else standalone"),
    _path("kube-context", "process", "Context in that kubeconfig.", "its current context"),
    Option("installation", "process", "This fleet's identity, a DNS-1123 label carried as a label on everything it "
                                      "creates, so fleets sharing a cluster, project or hypervisor never touch each "
                                      "other's.",
           shown_default="the pod's namespace, else 'default'", check="label"),
    _path("proxies", "proxies", "Standalone mode (no cluster): a Proxy manifest file or directory of them, re-read on "
                                "change; their status lives in Redis (`fleet get px`). Without it, the controller "
                                "watches Proxy objects when it has a cluster."),
    Option("proxy-namespaces", "proxies", "Cluster mode: the namespaces whose Proxies this installation lists, "
                                          "watches, reconciles and garbage-collects, a comma list of DNS-1123 labels; "
                                          "'*' for every namespace (the widest grant: a cluster-wide Secret read).",
           shown_default="the installation's own namespace (the pod's; 'default' outside a cluster)",
           shown_bounds=f"at most {MAX_PROXY_NAMESPACES} namespaces", check="namespaces"),
    _path("secrets-dir", "proxies", "Standalone mode: where cloudInit.secretRef is read, as "
                                    "DIR/NAMESPACE/NAME/KEY (the layout of mounted Secrets).",
          "none (secretRef Proxies wait)"),
    Option("max-provider-calls", "proxies", "Provider calls in flight at once per provider, from the Proxy "
                                            "reconciler.", "int", 3, 1, 1000),
    Option("proxy-poll-interval", "proxies", "How often a provisioning, replacing or deleting Proxy's instance is "
                                             "polled.", "duration", 10.0, 1.0, 3600.0),
    Option("proxy-resync-interval", "proxies", "How often each provider's instances are listed, so a Running "
                                               "Proxy whose instance vanished or stopped is seen (one list per "
                                               "provider, no write).", "duration", 60.0, 1.0, 86400.0),
    Option("provider-call-timeout", "proxies", "Time limit of one provider call (create, get, delete).", "duration",
           60.0, 1.0, 600.0),
    Option("gc-interval", "gc", "How often beat schedules an orphan GC sweep; 0 turns GC off.", "duration", 600.0,
           60.0, 86400.0, zero="off"),
    Option("gc-min-age", "gc", "An orphan younger than this is never collected (unknown age counts as very old).",
           "duration", 600.0, 0.0, 86400.0),
    Option("probe-target", "prober", "What the prober reaches through every Running proxy: host:port (a CONNECT), or "
                                     "http://host:port/path (a CONNECT, then a GET in the tunnel; a body holding an "
                                     "IP is the proxy's egress address).",
           shown_default="none (the prober idles and says so)", check="probe-target"),
    Option("probe-interval", "prober", "How often each Running proxy is probed.", "duration", 1.0, 0.1, 3600.0),
    Option("probe-timeout", "prober", "Time limit of one probe.", "duration", 0.0, 0.05, 60.0, zero="derived",
           shown_default="5s, or 5 x --probe-interval when that is shorter"),
    Option("probe-failure-threshold", "prober", "Failed probes in a row before a proxy is Healthy=False.", "int",
           3, 1, 100),
    Option("probe-success-threshold", "prober", "Good probes in a row before an unhealthy proxy is Healthy=True "
                                                "again.", "int", 1, 1, 100),
    Option("trace-health-probes", "prober", "true: a span per probe (off by default: one per proxy per second).",
           "bool", False),
    _bind("prober-metrics-bind-address", "prober", "host:port of the prober's /metrics", ":8081"),
    Option("api-bind-address", "api", "host:port the discovery and lease API (`fleet api`) listens on.",
           default=":8090", check="bind"),
    _path("api-token-file", "api", "A file holding the API's bearer token (a mounted Secret); FLEET_API_TOKEN gives "
                                   "it directly."),
    Option("insecure-no-auth", "api", "true: serve the API without a token (it warns at start and on /healthz).",
           "bool", False),
    Option("max-leases-per-proxy", "api", "Leases one proxy may hold at once.", "int", 1, 1, 10_000),
    Option("lease-max-ttl", "api", "The longest lease a client may ask for.", "duration", 3600.0, 1.0, 86400.0),
    Option("lease-grace", "api", "After the API sees that Redis lost lease data, how long it grants nothing new "
                                 "(renewals re-create lost leases meanwhile): at least the longest time a crawler "
                                 "goes without renewing.",
           "duration", 0.0, 1.0, 86400.0, zero="--lease-max-ttl", shown_default="--lease-max-ttl"),
    Option("lease-replica-wait", "api", "How long a grant or renewal waits for a replica to have it (Redis WAIT) when "
                                        "one is connected; then it is answered anyway and counted.",
           "duration", 0.1, 0.0, 5.0, zero="never"),
    Option("cooldown-blocked", "api", "How long a proxy is not leased for a target after a `blocked` report.",
           "duration", 600.0, 0.0, 86400.0),
    Option("cooldown-errors", "api", "Error reports in a row that put a proxy in a global cooldown.", "int", 3, 1, 1000),
    Option("cooldown-global", "api", "How long that global cooldown lasts.", "duration", 300.0, 0.0, 86400.0),
    Option("api-header-timeout", "api", "Time from a request's first byte to the end of its headers (slow clients: "
                                        "408).", "duration", 10.0, 0.1, 600.0),
    Option("api-idle-timeout", "api", "How long a connection may hold no request in progress, before its first and "
                                      "between requests.", "duration", 30.0, 0.1, 3600.0),
    Option("api-body-timeout", "api", "Time from a request's headers to the end of its body.", "duration", 30.0, 0.1,
           600.0),
    Option("api-max-connections", "api", "Connections one API process holds; at the limit the longest-idle one makes "
                                         "room (the process raises its open-file limit to fit).",
           "int", 16_384, 16, 1_000_000),
    Option("api-max-connections-per-client", "api", "Connections one client address may hold.", "int", 1024, 1,
           shown_bounds="from 1 to --api-max-connections", check="per-client"),
    Option("gateway-bind-address", "gateway", "host:port the crawlers' forward proxy (`fleet gateway`) listens on.",
           default=":8888", check="bind"),
    _path("gateway-clients-file", "gateway", "The gateway's clients (YAML: clients: {NAME: {token, namespaces, ports, "
                                             "maxTunnels}}; a mounted Secret), re-read when it changes; required."),
    _bind("gateway-metrics-bind-address", "gateway", "host:port of the gateway's /metrics, /livez and /readyz",
          ":8083"),
    Option("gateway-max-attempts", "gateway", "Proxies one request tries before the crawler sees an error.", "int", 3,
           1, 20),
    Option("gateway-connect-timeout", "gateway", "Time limit of connecting to a proxy and of its CONNECT answer.",
           "duration", 5.0, 0.05, 120.0),
    Option("gateway-response-timeout", "gateway", "Time limit of a plain HTTP response's head, after the request.",
           "duration", 30.0, 0.1, 600.0),
    Option("gateway-header-timeout", "gateway", "Time from a request's first byte to the end of its headers (slow "
                                                "clients: 408).", "duration", 10.0, 0.1, 600.0),
    Option("gateway-idle-timeout", "gateway", "How long a connection may wait for a request, and a tunnel may carry "
                                              "no byte either way.", "duration", 60.0, 0.1, 86400.0),
    Option("gateway-tunnel-max-duration", "gateway", "The longest a tunnel stays open.", "duration", 3600.0, 1.0,
           86400.0),
    Option("gateway-max-tunnels", "gateway", "Tunnels one gateway process holds at once (then 503 tunnel-limit).",
           "int", 10_000, 1, 1_000_000),
    Option("gateway-max-tunnels-per-client", "gateway", "Tunnels one client holds at once, unless its maxTunnels "
                                                        "says otherwise (then 503 client-tunnel-limit).",
           "int", 1000, 1, 1_000_000),
    Option("gateway-max-connections", "gateway", "Connections one gateway process holds; at the limit the "
                                                 "longest-idle one makes room.", "int", 20_000, 16, 1_000_000),
    Option("gateway-max-connections-per-client", "gateway", "Connections one client address may hold.", "int", 4096,
           1, 1_000_000),
    Option("gateway-ban-statuses", "gateway", "Plain HTTP statuses that mean the origin banned the proxy: reported "
                                              "blocked, and an idempotent request is retried on another proxy "
                                              "(comma-separated; empty: none).", default="403,429,503",
           check="statuses"),
    Option("gateway-ban-pattern", "gateway", "A regular expression (Python's) that marks a plain HTTP response as a ban "
                                             "at any status when found in the first 64 KiB of its body (gzip and "
                                             "deflate decoded); every response's start is read before it is "
                                             "relayed then. Empty: status codes only.", default="", check="regex"),
    Option("gateway-max-body", "gateway", "The largest request body (bytes) the gateway relays, Content-Length or "
                                          "chunked (then 413).", "int", 10 * 1024 * 1024, 0, 1 << 30),
    Option("gateway-body-timeout", "gateway", "Time from a request's headers to the end of its body (then 408).",
           "duration", 30.0, 0.1, 600.0),
    Option("gateway-lease-ttl", "gateway", "The TTL of the lease a tunnel or request holds (a tunnel renews it at "
                                           "half).", "duration", 60.0, 2.0, 3600.0),
    Option("gateway-session-ttl", "gateway", "How long a session (the username's -session-ID) keeps its proxy "
                                             "after its last use.", "duration", 600.0, 1.0, 86400.0),
    Option("log-format", "process", "How log lines are written: text is key=value.", default="text", choices=("text", "json")),
    Option("log-level", "process", "How much is logged.", default="info",
           choices=("debug", "info", "warning", "error"), any_case=True),
)
OPTION = {o.flag: o for o in OPTIONS}
# Digits an int setting may have: enough for the largest bound (before the table, 6, and
# --api-max-connections' documented 1000000 could not be written).
INT_DIGITS = len(str(max(int(o.high or 0) for o in OPTIONS if o.kind == "int")))
_DEFAULTS = {o.attr: o.default for o in OPTIONS}


def _default(attr: str) -> Any:
    return _DEFAULTS[attr]


def parse_bool(raw: str, flag: str) -> bool:
    text = raw.strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise SettingsError(f"--{flag} must be true or false, got {show(raw)}")


@dataclass(frozen=True)
class Settings:
    """The parsed settings; each field's default is its OPTIONS entry's
    (`tests/fleet/test_settings.py` holds the two in step)."""

    providers_config: str | None = _default("providers_config")
    broker: str = _default("broker")
    provider_check_interval: float = _default("provider_check_interval")
    provider_check_timeout: float = _default("provider_check_timeout")  # 0: derived, see `check_timeout`
    status_heartbeat: float = _default("status_heartbeat")  # 0: every round
    metrics_bind_address: str = _default("metrics_bind_address")
    worker_metrics_bind_address: str = _default("worker_metrics_bind_address")
    kubeconfig: str | None = _default("kubeconfig")
    kube_context: str | None = _default("kube_context")
    installation: str | None = _default("installation")
    proxies: str | None = _default("proxies")
    proxy_namespaces: str | None = _default("proxy_namespaces")
    secrets_dir: str | None = _default("secrets_dir")
    max_provider_calls: int = _default("max_provider_calls")
    proxy_poll_interval: float = _default("proxy_poll_interval")
    proxy_resync_interval: float = _default("proxy_resync_interval")
    provider_call_timeout: float = _default("provider_call_timeout")
    gc_interval: float = _default("gc_interval")
    gc_min_age: float = _default("gc_min_age")
    probe_target: str | None = _default("probe_target")
    probe_interval: float = _default("probe_interval")
    probe_timeout: float = _default("probe_timeout")  # 0: derived, see `probe_time_limit`
    probe_failure_threshold: int = _default("probe_failure_threshold")
    probe_success_threshold: int = _default("probe_success_threshold")
    trace_health_probes: bool = _default("trace_health_probes")
    prober_metrics_bind_address: str = _default("prober_metrics_bind_address")
    api_bind_address: str = _default("api_bind_address")
    api_token_file: str | None = _default("api_token_file")
    insecure_no_auth: bool = _default("insecure_no_auth")
    max_leases_per_proxy: int = _default("max_leases_per_proxy")
    lease_max_ttl: float = _default("lease_max_ttl")
    lease_grace: float = _default("lease_grace")  # 0: lease_max_ttl
    lease_replica_wait: float = _default("lease_replica_wait")
    cooldown_blocked: float = _default("cooldown_blocked")
    cooldown_errors: int = _default("cooldown_errors")
    cooldown_global: float = _default("cooldown_global")
    api_header_timeout: float = _default("api_header_timeout")
    api_idle_timeout: float = _default("api_idle_timeout")
    api_body_timeout: float = _default("api_body_timeout")
    api_max_connections: int = _default("api_max_connections")
    api_max_connections_per_client: int = _default("api_max_connections_per_client")
    gateway_bind_address: str = _default("gateway_bind_address")
    gateway_clients_file: str | None = _default("gateway_clients_file")
    gateway_metrics_bind_address: str = _default("gateway_metrics_bind_address")
    gateway_max_attempts: int = _default("gateway_max_attempts")
    gateway_connect_timeout: float = _default("gateway_connect_timeout")
    gateway_response_timeout: float = _default("gateway_response_timeout")
    gateway_header_timeout: float = _default("gateway_header_timeout")
    gateway_idle_timeout: float = _default("gateway_idle_timeout")
    gateway_tunnel_max_duration: float = _default("gateway_tunnel_max_duration")
    gateway_max_tunnels: int = _default("gateway_max_tunnels")
    gateway_max_tunnels_per_client: int = _default("gateway_max_tunnels_per_client")
    gateway_max_connections: int = _default("gateway_max_connections")
    gateway_max_connections_per_client: int = _default("gateway_max_connections_per_client")
    gateway_ban_statuses: str = _default("gateway_ban_statuses")
    gateway_ban_pattern: str = _default("gateway_ban_pattern")
    gateway_max_body: int = _default("gateway_max_body")
    gateway_body_timeout: float = _default("gateway_body_timeout")
    gateway_lease_ttl: float = _default("gateway_lease_ttl")
    gateway_session_ttl: float = _default("gateway_session_ttl")
    log_format: str = _default("log_format")
    log_level: str = _default("log_level")

    @property
    def check_timeout(self) -> float:
        return self.provider_check_timeout or min(DEFAULT_TIMEOUT, self.provider_check_interval)

    @property
    def installation_id(self) -> str:
        """The installation label's value: the flag, else the namespace this pod runs in."""
        return self.installation or current_namespace() or DEFAULT_INSTALLATION

    @property
    def proxy_scope(self) -> tuple[str, ...]:
        """The namespaces whose Proxies this installation serves (cluster
        mode): --proxy-namespaces, else the installation's own namespace
        (the pod's, else 'default'); ('*',) for every namespace."""
        if self.proxy_namespaces is not None:
            return parse_namespaces(self.proxy_namespaces)
        return (current_namespace() or DEFAULT_NAMESPACE,)

    @property
    def gc_enabled(self) -> bool:
        return self.gc_interval > 0

    @property
    def probe_time_limit(self) -> float:
        return self.probe_timeout or min(5.0, 5 * self.probe_interval)

    @property
    def traces_probes(self) -> bool:
        return self.trace_health_probes is True

    @property
    def api_insecure(self) -> bool:
        return self.insecure_no_auth is True

    @property
    def checks_enabled(self) -> bool:
        return self.provider_check_interval > 0

    @property
    def overdue_after(self) -> float:
        """A provider without a result for this long is CheckOverdue."""
        return 2 * self.provider_check_interval + self.check_timeout

    @classmethod
    def from_values(cls, values: Mapping[str, str | None]) -> Settings:
        """Build from raw strings keyed by attribute name; validates."""
        kw: dict[str, object] = {}
        for opt in OPTIONS:
            raw = values.get(opt.attr)
            if raw is None or raw == "":
                continue
            if opt.kind == "duration":
                try:
                    kw[opt.attr] = parse_duration(raw)
                except ValueError as exc:
                    raise SettingsError(f"--{opt.flag}: {exc}") from None
            elif opt.kind == "int":
                if not re.fullmatch(f"[0-9]{{1,{INT_DIGITS}}}", raw.strip()):
                    raise SettingsError(f"--{opt.flag} must be a whole number, got {show(raw)}")
                kw[opt.attr] = int(raw)
            elif opt.kind == "bool":
                kw[opt.attr] = parse_bool(raw, opt.flag)
            else:
                kw[opt.attr] = raw
        s = cls(**kw)  # type: ignore[arg-type]
        s.validate()
        return s

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls.from_values({o.attr: env.get(o.env) for o in OPTIONS})

    def to_env(self) -> dict[str, str]:
        """The FLEET_* variables that reproduce these settings in a child process."""
        out = {}
        for opt in OPTIONS:
            v = getattr(self, opt.attr)
            if v is None:
                continue
            out[opt.env] = format_duration(v) if opt.kind == "duration" else opt.shown(v)
        return out

    def validate(self) -> None:
        """Each option's type, bounds, choices and named check, in the table's order; the messages name the flag."""
        validate_schedule(self.provider_check_interval, self.provider_check_timeout)
        for opt in OPTIONS:
            value = getattr(self, opt.attr)
            if value is not None:
                _check(opt, value, self)


def _check(opt: Option, value: Any, settings: Settings) -> None:
    flag = f"--{opt.flag}"
    if opt.kind == "bool" and not isinstance(value, bool):
        raise SettingsError(f"{flag} must be true or false, got {show(value)}")
    if opt.choices and (value.lower() if opt.any_case else value) not in opt.choices:
        raise SettingsError(f"{flag} must be {opt.bounds}, got {show(value)}")
    if opt.high is not None:
        low = opt.low or 0
        if not (low <= value <= opt.high or (opt.zero and value == 0)):
            raise SettingsError(f"{flag} must be {opt.bounds}, got {opt.shown(value) if opt.kind == 'int' else format_duration(value)}")
    if opt.check == "path" and (len(value) > MAX_PATH or not value.isprintable()):
        raise SettingsError(f"{flag} must be printable and at most {MAX_PATH} characters, got {show(value)}")
    elif opt.check == "bind":
        parse_bind_address(value, flag)
    elif opt.check == "label" and not names.is_label(value):
        raise SettingsError(f"{flag} must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63), got {show(value)}")
    elif opt.check == "namespaces":
        parse_namespaces(value, flag)
    elif opt.check == "broker":
        why = broker_problem(value)
        if why:
            raise SettingsError(f"{flag} {why}, got {show(redact_url(value), 200)}")
    elif opt.check == "probe-target":
        why = probe_target_problem(value)
        if why:
            raise SettingsError(f"{flag} {why}, got {show(redact_url(value))}")
    elif opt.check == "statuses" and not re.fullmatch(r"\s*(\d{3}\s*(,\s*\d{3}\s*)*)?,?\s*", value):
        raise SettingsError(f"{flag} must be comma-separated 3-digit status codes, got {show(value)}")
    elif opt.check == "regex" and value:
        if len(value) > 1000:
            raise SettingsError(f"{flag} must be at most 1000 characters, got {len(value)}")
        try:
            re.compile(value)
        except re.error as exc:
            raise SettingsError(f"{flag} is not a regular expression ({exc}), got {show(value)}") from None
    elif opt.check == "per-client" and not 1 <= value <= settings.api_max_connections:
        raise SettingsError(f"{flag} must be from 1 to --api-max-connections ({settings.api_max_connections}), "
                            f"got {value}")


def parse_namespaces(text: str, flag: str = "--proxy-namespaces") -> tuple[str, ...]:
    """`a,b` → ("a", "b") (order kept, repeats dropped); `*` → ("*",).
    Raises SettingsError naming the flag and the first bad entry."""
    if len(text) > 64 * MAX_PROXY_NAMESPACES:
        raise SettingsError(f"{flag} must list at most {MAX_PROXY_NAMESPACES} namespaces, got {show(text)}")
    items = [item.strip() for item in text.split(",")]
    if items == [ALL_NAMESPACES]:
        return (ALL_NAMESPACES,)
    out: list[str] = []
    for i, item in enumerate(items):
        if item == ALL_NAMESPACES:
            raise SettingsError(f"{flag}: '*' (every namespace) cannot be combined with names, got {show(text)}")
        if not item:
            raise SettingsError(f"{flag} must be a comma list of namespaces or '*', entry {i + 1} is empty (got {show(text)})")
        if not names.is_label(item):
            raise SettingsError(f"{flag}: {show(item)} is not a namespace name (a DNS-1123 label: lowercase letters, "
                                f"digits, '-'; at most 63)")
        if item not in out:
            out.append(item)
    if len(out) > MAX_PROXY_NAMESPACES:
        raise SettingsError(f"{flag} must list at most {MAX_PROXY_NAMESPACES} namespaces, got {len(out)}")
    return tuple(out)


def current_namespace() -> str | None:
    """The namespace of this pod: $POD_NAMESPACE (downward API), else the
    service account's namespace file; None outside a cluster."""
    ns = os.environ.get("POD_NAMESPACE")
    if ns:
        return ns
    try:
        with open(NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read(64).strip() or None
    except OSError:
        return None


def probe_target_problem(target: str) -> str | None:
    """Why a --probe-target is unusable, or None: host:port, or http://host:port[/path]."""
    text = target.strip()
    if text.startswith("http://"):
        parts = urlsplit(text)
        if parts.query or parts.fragment or parts.username or parts.password:
            return "must be http://host[:port]/path without credentials, query or fragment"
        try:
            host, port = parts.hostname, parts.port or 80
        except ValueError:
            return "must have a port from 1 to 65535"
    else:
        host, _, raw = text.rpartition(":")
        if not raw or not _PORT.fullmatch(raw):
            return "must be host:port or http://host:port/path"
        port = int(raw)
    if not host or not (names.is_hostname(host.strip("[]"), trailing_dot=True) or _is_ip(host.strip("[]"))):
        return "must name a host (a DNS name or an IP address)"
    if not 1 <= int(port) <= 65535:
        return "must have a port from 1 to 65535"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def validate_schedule(interval: float, timeout: float) -> None:
    """The seed's ValidateSchedule: interval 0 (off) or ≥ 10s; timeout 0
    (derived) or in (0, interval]. Messages as the seed prints them."""
    for value in (interval, timeout):
        if not math.isfinite(value) or abs(value) > MAX_DURATION:
            raise SettingsError(f"--provider-check-interval and --provider-check-timeout must be at most "
                                f"{format_duration(MAX_DURATION)}, got {format_duration(value)}")
    if interval == 0:
        return
    if interval < MIN_INTERVAL:
        raise SettingsError(
            f"--provider-check-interval must be 0 (off) or at least {format_duration(MIN_INTERVAL)}, "
            f"got {format_duration(interval)}"
        )
    if timeout < 0 or timeout > interval:
        raise SettingsError(
            f"--provider-check-timeout must be at most the interval ({format_duration(interval)}), "
            f"got {format_duration(timeout)}"
        )


def field_names() -> list[str]:
    return [f.name for f in fields(Settings)]


# --- README's settings table ------------------------------------------------------

README_BEGIN = "<!-- settings: generated from fleet/settings.py OPTIONS by `python -m fleet.settings --readme README.md` -->"
README_END = "<!-- settings: end of the generated table -->"


def markdown_table() -> str:
    """README's table of every option, by group, from OPTIONS."""
    rows = ["| group | flag | env | default | bounds | what |", "|---|---|---|---|---|---|"]
    for group in GROUPS:
        for o in (o for o in OPTIONS if o.group == group):
            flag = f"`--{o.flag}`" + (f", `-{o.short}`" if o.short else "")
            default = o.shown_default or ("—" if o.default is None else f"`{o.shown(o.default)}`")
            rows.append(f"| {group} | {flag} | `{o.env}` | {default} | {o.bounds or ''} | {o.help} |")
    return "\n".join(rows) + "\n"


def with_readme_table(readme: str) -> str:
    """`readme` with the text between README_BEGIN and README_END regenerated."""
    head, sep, rest = readme.partition(README_BEGIN + "\n")
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"the README lacks the markers {README_BEGIN!r} … {README_END!r}")
    return head + sep + markdown_table() + sep2 + tail


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m fleet.settings", description="Print README's settings table.")
    p.add_argument("--readme", help="rewrite the table in this README in place")
    p.add_argument("--check", action="store_true", help="with --readme: exit 1 if it is stale, change nothing")
    args = p.parse_args(argv)
    if not args.readme:
        sys.stdout.write(markdown_table())
        return 0
    with open(args.readme, encoding="utf-8") as f:
        old = f.read()
    new = with_readme_table(old)
    if args.check:
        return 0 if new == old else 1
    if new != old:
        with open(args.readme, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
