"""Process settings: one table (`Settings`, a field per option), each option a
flag and `FLEET_<FLAG>` in the environment (a flag wins, an empty one too),
and the seed's schedule validation.

Each field's `_option(...)` holds all its option's facts: group, type (str,
duration, int, bool), default, bounds, choices and named check. `OPTIONS`
is read from the fields; `Settings.validate`, the CLI's flags and help
("Default …", each command's settings groups) and the docs' settings page
(docs/reference/settings.md, written by `python docs/generate.py`) are derived from it, and a
feature's own config from its fields by name (`pick`).

The CLI turns this table into flags and exports the parsed values to the
processes it starts, which read them back with `Settings.from_env`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar
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
_Config = TypeVar("_Config")
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



GROUPS: dict[str, str] = {  # the docs' settings page and each command's --help list them in this order
    "process": "every command",
    "store": "Redis, where everything meets",
    "providers": "the providers file and the calls to them",
    "cluster": "the Kubernetes API",
    "metrics": "the Celery processes' /metrics",
    "health": "provider health checks (controller, beat)",
    "proxies": "where the Proxies are declared",
    "reconciler": "the Proxy reconciler (controller)",
    "gc": "orphan GC",
    "prober": "the proxy prober (`fleet prober`)",
    "leases": "leasing proxies (`fleet api`, `fleet gateway`, the pool controller)",
    "api": "the discovery and lease API (`fleet api`)",
    "gateway": "the crawlers' forward proxy (`fleet gateway`)",
    "interception": "the gateway's TLS interception for the clients that ask (`fleet gateway`, `fleet ca`)",
    "socks5": "the gateway's SOCKS5 listener (`fleet gateway`, `fleet render`)",
    "tls": "TLS between the crawlers and the gateway: an HTTPS proxy (`fleet gateway`, `fleet render`)",
}
KINDS = ("str", "duration", "int", "bool")
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
MAX_PATH = 4096
_SPEC = "fleet.settings.option"  # the key of each Settings field's metadata holding its Option's facts


@dataclass(frozen=True)
class Option:
    """One setting: every fact about it, read from its `Settings` field; `Settings.validate`, the CLI's
    flags and help and the docs' settings page come from it."""

    flag: str  # without the leading --
    group: str  # a key of GROUPS
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



def _option(group: str, help: str, kind: str = "str", default: Any = None, low: float | None = None,
            high: float | None = None, **facts: Any) -> Any:
    """A `Settings` field: its default, and every other fact of its `Option` (the flag is the field's name)."""
    spec = {"group": group, "help": help, "kind": kind, "default": default, "low": low, "high": high, **facts}
    return field(default=default, metadata={_SPEC: spec})


def _bind(group: str, help: str, default: str) -> Any:
    return _option(group, help + "; 0 or empty turns it off.", default=default, check="bind")


def _path(group: str, help: str, shown_default: str | None = None, short: str | None = None) -> Any:
    return _option(group, help, shown_default=shown_default, check="path", short=short)


def parse_bool(raw: str, flag: str) -> bool:
    text = raw.strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise SettingsError(f"{flag} must be true or false, got {show(raw)}")


_UNSET: Any = object()  # an empty value of an option that has no empty value: its default


def _parse(opt: Option, raw: str, name: str) -> Any:
    """One raw value as typed; `name` (the flag, or the variable it came from) heads any error.
    Empty is empty: '' for a string (None where the default is none); the default where no empty value exists."""
    if opt.kind == "str" and not opt.choices:
        return None if raw == "" and opt.default is None else raw
    if not raw.strip():
        return _UNSET
    if opt.kind == "duration":
        try:
            return parse_duration(raw)
        except ValueError as exc:
            raise SettingsError(f"{name}: {exc}") from None
    if opt.kind == "int":
        if not re.fullmatch(f"[0-9]{{1,{INT_DIGITS}}}", raw.strip()):
            raise SettingsError(f"{name} must be a whole number, got {show(raw)}")
        return int(raw)
    if opt.kind == "bool":
        return parse_bool(raw, name)
    return raw


@dataclass(frozen=True)
class Settings:
    """The parsed settings: the table itself. Each field is one option, and its `_option(...)` holds every
    fact of it (group, help, kind, default, bounds, check); `OPTIONS` is read from these fields."""

    providers_config: str | None = _path(
        "providers", "Path of the providers YAML file.",
        short="c")
    broker: str = _option(
        "store", "Redis URL of the Celery broker, result backend and latest state (password and TLS via the URL: "
        "rediss://:pw@host:6380/0; Sentinel: sentinel://h1:26379;h2:26379/0?master_name=NAME).",
        default=DEFAULT_BROKER, check="broker", env_var="FLEET_BROKER_URL")
    provider_check_interval: float = _option(
        "health", "Interval between provider health checks; 0 turns them off (and the controller deletes its objects).",
        "duration", 60.0, shown_bounds=f"0 (off) or at least {short_duration(MIN_INTERVAL)}")
    provider_check_timeout: float = _option(
        "health", "Time limit of one provider check.",
        "duration", 0.0, shown_default="15s, or the interval when that is shorter", shown_bounds="if set, at most the interval")
    status_heartbeat: float = _option(
        "health", "How often a ProviderHealth status is written when nothing but its lastCheckTime and latency jitter "
        "(under max(10ms, 20%)) moved; a change of a verdict, reason, message, detail or condition is written at "
        "once.",
        "duration", 300.0, 10.0, 3600.0, zero="every round")
    metrics_bind_address: str = _bind(
        "metrics", "host:port of the controller's /metrics",
        ":8080")
    worker_metrics_bind_address: str = _bind(
        "metrics", "host:port of a provider worker's /metrics (its provider-call counters), e.g. :9090",
        "0")
    kubeconfig: str | None = _path(
        "cluster", "Kubeconfig for the controller's writes.",
        "in-cluster, $KUBECONFIG, ~/.kube/config, else standalone")
    kube_context: str | None = _path(
        "cluster", "Context in that kubeconfig.",
        "its current context")
    installation: str | None = _option(
        "process", "This fleet's identity, a DNS-1123 label carried as a label on everything it creates, so fleets sharing a"
        " cluster, project or hypervisor never touch each other's.",
        shown_default="the pod's namespace, else 'default'", check="label")
    proxies: str | None = _path(
        "proxies", "Standalone mode (no cluster): a Proxy manifest file or directory of them, re-read on change; their "
        "status lives in Redis (`fleet get px`). Without it, the controller watches Proxy objects when it has a "
        "cluster.")
    proxy_namespaces: str | None = _option(
        "proxies", "Cluster mode: the namespaces whose Proxies this installation lists, watches, reconciles and "
        "garbage-collects, a comma list of DNS-1123 labels; '*' for every namespace (the widest grant: a "
        "cluster-wide Secret read).",
        shown_default="the installation's own namespace (the pod's; 'default' outside a cluster)",
        shown_bounds=f"at most {MAX_PROXY_NAMESPACES} namespaces", check="namespaces")
    secrets_dir: str | None = _path(
        "reconciler", "Standalone mode: where cloudInit.secretRef is read, as DIR/NAMESPACE/NAME/KEY (the layout of mounted "
        "Secrets).",
        "none (secretRef Proxies wait)")
    max_provider_calls: int = _option(
        "reconciler", "Provider calls in flight at once per provider, from the Proxy reconciler.",
        "int", 3, 1, 1000)
    proxy_poll_interval: float = _option(
        "reconciler", "How often a provisioning, replacing or deleting Proxy's instance is polled.",
        "duration", 10.0, 1.0, 3600.0)
    proxy_resync_interval: float = _option(
        "reconciler", "How often each provider's instances are listed, so a Running Proxy whose instance vanished or stopped is"
        " seen (one list per provider, no write).",
        "duration", 60.0, 1.0, 86400.0)
    provider_call_timeout: float = _option(
        "providers", "Time limit of one provider call (create, get, delete).",
        "duration", 60.0, 1.0, 600.0)
    gc_interval: float = _option(
        "gc", "How often beat schedules an orphan GC sweep; 0 turns GC off.",
        "duration", 600.0, 60.0, 86400.0, zero="off")
    gc_min_age: float = _option(
        "gc", "An orphan younger than this is never collected (unknown age counts as very old).",
        "duration", 600.0, 0.0, 86400.0)
    probe_target: str | None = _option(
        "prober", "What the prober reaches through every Running proxy: host:port (a CONNECT), or http://host:port/path (a "
        "CONNECT, then a GET in the tunnel; a body holding an IP is the proxy's egress address).",
        shown_default="none (the prober idles and says so)", check="probe-target")
    probe_interval: float = _option(
        "prober", "How often each Running proxy is probed.",
        "duration", 1.0, 0.1, 3600.0)
    probe_timeout: float = _option(
        "prober", "Time limit of one probe.",
        "duration", 0.0, 0.05, 60.0, zero="derived", shown_default="5s, or 5 x --probe-interval when that is shorter")
    probe_failure_threshold: int = _option(
        "prober", "Failed probes in a row before a proxy is Healthy=False.",
        "int", 3, 1, 100)
    probe_success_threshold: int = _option(
        "prober", "Good probes in a row before an unhealthy proxy is Healthy=True again.",
        "int", 1, 1, 100)
    trace_health_probes: bool = _option(
        "prober", "A span per probe (off by default: one per proxy per second).",
        "bool", False)
    prober_metrics_bind_address: str = _bind(
        "prober", "host:port of the prober's /metrics",
        ":8081")
    prober_upstream_secrets_dir: str | None = _path(
        "prober", "The credentials of upstream proxies that ask for them, as --gateway-upstream-secrets-dir (one "
        "subdirectory per provider): the prober probes a bought proxy with them; never stored in Redis.")
    api_bind_address: str = _option(
        "api", "host:port the discovery and lease API (`fleet api`) listens on.",
        default=":8090", check="bind")
    api_token_file: str | None = _path(
        "api", "A file holding the API's bearer token (a mounted Secret); FLEET_API_TOKEN gives it directly.")
    insecure_no_auth: bool = _option(
        "api", "Serve the API without a token (it warns at start and on /healthz).",
        "bool", False)
    max_leases_per_proxy: int = _option(
        "leases", "Leases one proxy may hold at once.",
        "int", 1, 1, 10_000)
    lease_max_ttl: float = _option(
        "api", "The longest lease a client may ask for.",
        "duration", 3600.0, 1.0, 86400.0)
    lease_grace: float = _option(
        "api", "After the API sees that Redis lost lease data, how long it grants nothing new (renewals re-create lost "
        "leases meanwhile): at least the longest time a crawler goes without renewing.",
        "duration", 0.0, 1.0, 86400.0, zero="--lease-max-ttl", shown_default="--lease-max-ttl")
    lease_replica_wait: float = _option(
        "api", "How long a grant or renewal waits for a replica to have it (Redis WAIT) when one is connected; then it "
        "is answered anyway and counted.",
        "duration", 0.1, 0.0, 5.0, zero="never")
    cooldown_blocked: float = _option(
        "leases", "How long a proxy is not leased for a target after a `blocked` report.",
        "duration", 600.0, 0.0, 86400.0)
    cooldown_errors: int = _option(
        "leases", "Error reports in a row that put a proxy in a global cooldown.",
        "int", 3, 1, 1000)
    cooldown_global: float = _option(
        "leases", "How long that global cooldown lasts.",
        "duration", 300.0, 0.0, 86400.0)
    api_header_timeout: float = _option(
        "api", "Time from a request's first byte to the end of its headers (slow clients: 408).",
        "duration", 10.0, 0.1, 600.0)
    api_idle_timeout: float = _option(
        "api", "How long a connection may hold no request in progress, before its first and between requests.",
        "duration", 30.0, 0.1, 3600.0)
    api_body_timeout: float = _option(
        "api", "Time from a request's headers to the end of its body.",
        "duration", 30.0, 0.1, 600.0)
    api_max_connections: int = _option(
        "api", "Connections one API process holds; at the limit the longest-idle one makes room (the process raises its "
        "open-file limit to fit).",
        "int", 16_384, 16, 1_000_000)
    api_max_connections_per_client: int = _option(
        "api", "Connections one client address may hold.",
        "int", 1024, 1, shown_bounds="from 1 to --api-max-connections", check="per-client")
    gateway_bind_address: str = _option(
        "gateway", "host:port the crawlers' forward proxy (`fleet gateway`) listens on.",
        default=":8888", check="bind")
    gateway_clients_file: str | None = _path(
        "gateway", "The gateway's clients (YAML: clients: {NAME: {token, namespaces, ports, maxTunnels}}; a mounted Secret),"
        " re-read when it changes; required.")
    gateway_rules_file: str | None = _path(
        "gateway", "The gateway's rules per domain (YAML: rules: [{name, domains, bans, actions, politeness, sessions}]; "
        "a mounted ConfigMap; docs/gateway.md), re-read when it changes; checked with `fleet validate`. Without it every "
        "host gets the --gateway-ban-*, --cooldown-blocked and --gateway-max-attempts behaviour.")
    gateway_metrics_bind_address: str = _bind(
        "gateway", "host:port of the gateway's /metrics, /livez and /readyz",
        ":8083")
    gateway_socks_bind_address: str = _bind(
        "socks5", "host:port the gateway's SOCKS5 listener (CONNECT, username/password: the same usernames and tokens "
        "as the HTTP proxy) listens on, beside --gateway-bind-address",
        "")
    gateway_max_attempts: int = _option(
        "gateway", "Proxies one request tries before the crawler sees an error.",
        "int", 3, 1, 20)
    gateway_connect_timeout: float = _option(
        "gateway", "Time limit of connecting to a proxy and of its CONNECT answer.",
        "duration", 5.0, 0.05, 120.0)
    gateway_response_timeout: float = _option(
        "gateway", "Time limit of a plain HTTP response's head, after the request.",
        "duration", 30.0, 0.1, 600.0)
    gateway_header_timeout: float = _option(
        "gateway", "Time from a request's first byte to the end of its headers (slow clients: 408).",
        "duration", 10.0, 0.1, 600.0)
    gateway_idle_timeout: float = _option(
        "gateway", "How long a connection may wait for a request, and a tunnel may carry no byte either way.",
        "duration", 60.0, 0.1, 86400.0)
    gateway_tunnel_max_duration: float = _option(
        "gateway", "The longest a tunnel stays open.",
        "duration", 3600.0, 1.0, 86400.0)
    gateway_max_tunnels: int = _option(
        "gateway", "Tunnels one gateway process holds at once (then 503 tunnel-limit).",
        "int", 10_000, 1, 1_000_000)
    gateway_max_tunnels_per_client: int = _option(
        "gateway", "Tunnels one client holds at once, unless its maxTunnels says otherwise (then 503 client-tunnel-limit).",
        "int", 1000, 1, 1_000_000)
    gateway_max_connections: int = _option(
        "gateway", "Connections one gateway process holds; at the limit the longest-idle one makes room.",
        "int", 20_000, 16, 1_000_000)
    gateway_max_connections_per_client: int = _option(
        "gateway", "Connections one client address may hold.",
        "int", 4096, 1, 1_000_000)
    gateway_ban_statuses: str = _option(
        "gateway", "Plain HTTP statuses that mean the origin banned the proxy: reported blocked, and an idempotent request "
        "is retried on another proxy (comma-separated; empty: none).",
        default="403,429,503", check="statuses")
    gateway_ban_pattern: str = _option(
        "gateway", "A regular expression (Python's) that marks a plain HTTP response as a ban at any status when found in "
        "the first 64 KiB of its body (gzip and deflate decoded); every response's start is read before it is "
        "relayed then. Empty: status codes only.",
        default="", check="regex")
    gateway_max_body: int = _option(
        "gateway", "The largest request body (bytes) the gateway relays, Content-Length or chunked (then 413).",
        "int", 10 * 1024 * 1024, 0, 1 << 30)
    gateway_body_timeout: float = _option(
        "gateway", "Time from a request's headers to the end of its body (then 408).",
        "duration", 30.0, 0.1, 600.0)
    gateway_lease_ttl: float = _option(
        "gateway", "The TTL of the lease a tunnel or request holds (a tunnel renews it at half).",
        "duration", 60.0, 2.0, 3600.0)
    gateway_session_ttl: float = _option(
        "gateway", "How long a session (the username's -session-ID) keeps its proxy after its last use.",
        "duration", 600.0, 1.0, 86400.0)
    gateway_session_connections: int = _option(
        "gateway", "Connections (and tunnels) one session may hold through its proxy at once; they count as one lease "
        "against --max-leases-per-proxy, so a browser's parallel connections keep the session's exit (a browser opens 6 "
        "per host, a Scrapy crawl 16).",
        "int", 16, 1, 1000)
    gateway_session_max_uses: int = _option(
        "gateway", "Leases (connections, tunnels, plain requests) a session gets on one proxy before it is retired: "
        "moved to another proxy with its counts anew (Crawlee's maxUsageCount); 0: never.",
        "int", 50, 0, 1_000_000)
    gateway_session_max_age: float = _option(
        "gateway", "The longest a session keeps one proxy before it is retired (Crawlee's maxAgeSecs); a username's "
        "-sesstime-MINUTES sets its own.",
        "duration", 3000.0, 1.0, 86400.0)
    gateway_session_max_error_score: int = _option(
        "gateway", "A session's error score at which it is retired: each failed exchange adds 1, each good one takes "
        "0.5 off (Crawlee's maxErrorScore); a ban retires it at once.",
        "int", 3, 1, 1000)
    gateway_upstream_secrets_dir: str | None = _path(
        "gateway", "The credentials of upstream proxies that ask for them (bought HTTP and SOCKS5 proxies): one "
        "subdirectory per provider holding the files username and password (a mounted Secret each), named by the "
        "proxies' endpoints and re-read when they change; never stored in Redis.")
    gateway_ca_dir: str | None = _path(
        "interception", "The directory of fleet's CA (ca.crt and ca.key; a Secret mounted with defaultMode 0400): the "
        "gateway signs its leaf certificates with it for the clients with intercept: true, and refuses a key others "
        "may read. `fleet ca` makes it when the directory holds neither file and prints the certificate the crawlers "
        "trust.")
    gateway_origin_ca_file: str | None = _path(
        "interception", "CA certificates (PEM) the gateway trusts for origins of intercepted requests, beside the "
        "system's.")
    gateway_tls_bind_address: str = _bind(
        "tls", "host:port of the gateway's TLS listener: the same proxy as --gateway-bind-address, the "
        "connection to it in TLS (an https:// proxy URL), so the client's token never crosses the network in clear; "
        "needs --gateway-tls-cert-file and --gateway-tls-key-file",
        "")
    gateway_tls_cert_file: str | None = _path(
        "tls", "The TLS listener's certificate (PEM, the leaf first, then any intermediates), re-read with its "
        "key when either file changes (connections open keep theirs).")
    gateway_tls_key_file: str | None = _path(
        "tls", "The TLS listener's private key (unencrypted PEM; a Secret mounted with defaultMode 0400); the "
        "gateway refuses a key others may read, or one the certificate is not of.")
    log_format: str = _option(
        "process", "How log lines are written: text is key=value.",
        default="text", choices=("text", "json"))
    log_level: str = _option(
        "process", "How much is logged.",
        default="info", choices=("debug", "info", "warning", "error"), any_case=True)

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
    def from_sources(cls, flags: Mapping[str, str | None], environ: Mapping[str, str]) -> Settings:
        """Each option from its flag when one is given (an empty one too: it beats the environment), else from
        its variable; validates. A problem names where its value came from (`--probe-interval`, or
        `FLEET_PROBE_INTERVAL` when the environment gave it)."""
        kw: dict[str, Any] = {}
        names: dict[str, str] = {}
        for opt in OPTIONS:
            raw, name = flags.get(opt.attr), f"--{opt.flag}"
            if raw is None and opt.env in environ:
                raw, name = environ[opt.env], opt.env
                names[opt.attr] = name
            if raw is not None and (value := _parse(opt, raw, name)) is not _UNSET:
                kw[opt.attr] = value
        s = cls(**kw)
        s.validate(names)
        return s

    @classmethod
    def from_values(cls, values: Mapping[str, str | None]) -> Settings:
        """Build from raw strings keyed by attribute name, as flags; validates."""
        return cls.from_sources(values, {})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        return cls.from_sources({}, os.environ if environ is None else environ)

    def to_env(self) -> dict[str, str]:
        """The FLEET_* variables that reproduce these settings in a child process: every option, an unset one
        as empty, so a variable of the parent's environment that a flag overrode does not come back."""
        out = {}
        for opt in OPTIONS:
            v = getattr(self, opt.attr)
            out[opt.env] = "" if v is None else format_duration(v) if opt.kind == "duration" else opt.shown(v)
        return out

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Each option's type, bounds, choices and named check, in the table's order; the messages name the
        flag, or the variable `names` says the value came from."""
        validate_schedule(self.provider_check_interval, self.provider_check_timeout)
        for opt in OPTIONS:
            value = getattr(self, opt.attr)
            if value is not None:
                _check(opt, value, self, (names or {}).get(opt.attr, f"--{opt.flag}"))


OPTIONS: tuple[Option, ...] = tuple(Option(flag=f.name.replace("_", "-"), **f.metadata[_SPEC]) for f in fields(Settings))
OPTION = {o.flag: o for o in OPTIONS}
# Digits an int setting may have: enough for the largest bound (before the table, 6, and
# --api-max-connections' documented 1000000 could not be written).
INT_DIGITS = len(str(max(int(o.high or 0) for o in OPTIONS if o.kind == "int")))


def pick(settings: Settings, config: type[_Config], prefix: str = "", **given: Any) -> _Config:
    """A feature's config (a dataclass) from `settings` by name, so its fields are not listed again: each
    field not `given` takes the setting `prefix + name`, else the setting `name`; one no setting names keeps
    its own default. `given`: what is computed (a parsed pattern) or named otherwise."""
    kw = dict(given)
    for f in fields(config):  # type: ignore[arg-type]  # a dataclass, as the callers pass
        for attr in (prefix + f.name, f.name):
            if f.name not in kw and attr in _ATTRS:
                kw[f.name] = getattr(settings, attr)
    return config(**kw)


_ATTRS = frozenset(o.attr for o in OPTIONS)


def _check(opt: Option, value: Any, settings: Settings, flag: str) -> None:
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


# --- the docs' settings page (docs/reference/settings.md, written by docs/generate.py) ---------------


def markdown_table(group: str | None = None) -> str:
    """A markdown table of the options of `group` (every group, with a group column, when None), from OPTIONS."""
    head = "| flag | env | default | bounds | what |"
    rows = [("| group " if group is None else "") + head, ("|---" if group is None else "") + "|---|---|---|---|---|"]
    for g in GROUPS if group is None else (group,):
        for o in (o for o in OPTIONS if o.group == g):
            flag = f"`--{o.flag}`" + (f", `-{o.short}`" if o.short else "")
            default = o.shown_default or ("—" if o.default is None else f"`{o.shown(o.default)}`")
            rows.append((f"| {g} " if group is None else "") + f"| {flag} | `{o.env}` | {default} | {o.bounds or ''} | {o.help} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m fleet.settings",
                                description="Print the table of every setting (docs/generate.py writes the docs' page).")
    p.parse_args(argv)
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
