"""Process settings: one table of flags, each also `FLEET_<FLAG>` in the
environment (flags win), and the seed's schedule validation.

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

MIN_INTERVAL = 10.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_INSTALLATION = "default"
DEFAULT_NAMESPACE = "default"  # the installation's namespace outside a cluster (no pod namespace)
ALL_NAMESPACES = "*"  # --proxy-namespaces: every namespace (the widest grant)
MAX_PROXY_NAMESPACES = 100
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_HOSTNAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\.?", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
_DB = re.compile(r"/?([0-9]{1,5})?", re.ASCII)
MAX_SHOWN = 60
SECRET_QUERY_KEYS = ("password", "pass", "passwd", "secret", "token", "sentinel_password")


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    """A bounded display of a user's value for messages: short strings and
    numbers as repr, long strings cut before repr (never repr an unbounded
    value), containers only by size. O(limit) time and memory."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return "[]" if not value else f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return "{}" if not value else f"a mapping of {len(value)} key(s)"
    return f"a {type(value).__name__}"


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
    return text if len(text) <= 200 else text[:200] + f"... ({len(text)} characters)"


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
    elif host and not _HOSTNAME.fullmatch(host):
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


@dataclass(frozen=True)
class Option:
    flag: str  # without the leading --
    help: str
    kind: str = "str"  # str | duration | int

    @property
    def env(self) -> str:
        return "FLEET_" + self.flag.upper().replace("-", "_")

    @property
    def attr(self) -> str:
        return self.flag.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("providers-config", "Path of the providers YAML file."),
    Option("broker", "Redis URL of the Celery broker, result backend and latest state.", "str"),
    Option(
        "provider-check-interval",
        "Interval between provider health checks; 0 turns them off, otherwise at least 10s. Default 1m.",
        "duration",
    ),
    Option(
        "provider-check-timeout",
        "Time limit of one provider check: 15s, or the interval when that is shorter. If set, at most the interval.",
        "duration",
    ),
    Option("metrics-bind-address", "host:port of the controller's /metrics; 0 turns it off. Default :8080."),
    Option(
        "worker-metrics-bind-address",
        "host:port of a provider worker's /metrics (its provider-call counters); 0 turns it off. Default 0.",
    ),
    Option("kubeconfig", "Kubeconfig for the controller's ProviderHealth writes (default: in-cluster, $KUBECONFIG, ~/.kube/config)."),
    Option("kube-context", "Context in that kubeconfig."),
    Option(
        "installation",
        "This fleet's identity, a DNS-1123 label carried as a label on everything it creates, so fleets sharing a cluster, "
        "project or hypervisor never touch each other's. Default: the pod's namespace, else 'default'.",
    ),
    Option(
        "proxies",
        "Standalone mode (no cluster): a Proxy manifest file or directory of them, re-read on change; their status "
        "lives in Redis (`fleet get px`). Without it, the controller watches Proxy objects when it has a cluster.",
    ),
    Option(
        "proxy-namespaces",
        "Cluster mode: the namespaces whose Proxies this installation lists, watches, reconciles and garbage-collects, "
        "a comma list of DNS-1123 labels; '*' for every namespace (the widest grant: a cluster-wide Secret read). "
        "Default: the installation's own namespace (the pod's; 'default' outside a cluster).",
    ),
    Option("secrets-dir", "Standalone mode: where cloudInit.secretRef is read, as <dir>/<namespace>/<name>/<key> "
                          "(the layout of mounted Secrets). Default: none (secretRef Proxies wait)."),
    Option("max-provider-calls", "Provider calls in flight at once per provider, from the Proxy reconciler. Default 3.", "int"),
    Option("proxy-poll-interval", "How often a provisioning or deleting Proxy's instance is polled. Default 10s.", "duration"),
    Option("proxy-resync-interval", "How often a Running Proxy's instance is looked at again. Default 1m.", "duration"),
    Option("provider-call-timeout", "Time limit of one provider call (create, get, delete). Default 1m, at most 10m.",
           "duration"),
    Option("gc-interval", "How often beat schedules an orphan GC sweep; 0 turns GC off. Default 10m.", "duration"),
    Option("gc-min-age", "An orphan younger than this is never collected (unknown age counts as very old). Default 10m.",
           "duration"),
    Option("probe-target", "What the prober reaches through every Running proxy: host:port (a CONNECT), or "
                           "http://host:port/path (a CONNECT, then a GET in the tunnel; a body holding an IP is the "
                           "proxy's egress address). Default: none (the prober idles and says so)."),
    Option("probe-interval", "How often each Running proxy is probed. Default 1s.", "duration"),
    Option("probe-timeout", "Time limit of one probe. Default: 5s, or 5 x --probe-interval when that is shorter.", "duration"),
    Option("probe-failure-threshold", "Failed probes in a row before a proxy is Healthy=False. Default 3.", "int"),
    Option("probe-success-threshold", "Good probes in a row before an unhealthy proxy is Healthy=True again. Default 1.",
           "int"),
    Option("trace-health-probes", "true: a span per probe (off by default: one per proxy per second)."),
    Option("prober-metrics-bind-address", "host:port of the prober's /metrics; 0 turns it off. Default :8081."),
    Option("api-bind-address", "host:port the discovery and lease API (`fleet api`) listens on. Default :8090."),
    Option("api-token-file", "A file holding the API's bearer token (a mounted Secret); FLEET_API_TOKEN gives it directly."),
    Option("insecure-no-auth", "true: serve the API without a token (it warns at start and on /healthz). Default false."),
    Option("max-leases-per-proxy", "Leases one proxy may hold at once. Default 1.", "int"),
    Option("lease-max-ttl", "The longest lease a client may ask for. Default 1h.", "duration"),
    Option("lease-grace", "After the API sees that Redis lost lease data, how long it grants nothing new (renewals "
                          "re-create lost leases meanwhile): at least the longest time a crawler goes without renewing. "
                          "Default 0: --lease-max-ttl.", "duration"),
    Option("lease-replica-wait", "How long a grant or renewal waits for a replica to have it (Redis WAIT) when one is "
                                 "connected; then it is answered anyway and counted. 0: never wait. Default 100ms.",
           "duration"),
    Option("cooldown-blocked", "How long a proxy is not leased for a target after a `blocked` report. Default 10m.", "duration"),
    Option("cooldown-errors", "Error reports in a row that put a proxy in a global cooldown. Default 3.", "int"),
    Option("cooldown-global", "How long that global cooldown lasts. Default 5m.", "duration"),
    Option("api-header-timeout", "Time from a request's first byte to the end of its headers (slow clients: 408). "
                                 "Default 10s.", "duration"),
    Option("api-idle-timeout", "How long a connection may hold no request in progress, before its first and between "
                               "requests. Default 30s.", "duration"),
    Option("api-body-timeout", "Time from a request's headers to the end of its body. Default 30s.", "duration"),
    Option("api-max-connections", "Connections one API process holds; at the limit the longest-idle one makes room. "
                                  "Default 16384 (the process raises its open-file limit to fit).", "int"),
    Option("api-max-connections-per-client", "Connections one client address may hold. Default 1024.", "int"),
    Option("log-format", "text (key=value) or json."),
    Option("log-level", "debug, info, warning or error."),
)

# FLEET_BROKER_URL is the documented name of the broker setting.
ENV_ALIASES = {"broker": "FLEET_BROKER_URL"}


def env_name(opt: Option) -> str:
    return ENV_ALIASES.get(opt.flag, opt.env)


@dataclass(frozen=True)
class Settings:
    providers_config: str | None = None
    broker: str = DEFAULT_BROKER
    provider_check_interval: float = 60.0
    provider_check_timeout: float = 0.0  # 0: derived, see `check_timeout`
    metrics_bind_address: str = ":8080"
    worker_metrics_bind_address: str = "0"
    kubeconfig: str | None = None
    kube_context: str | None = None
    installation: str | None = None
    proxies: str | None = None
    proxy_namespaces: str | None = None
    secrets_dir: str | None = None
    max_provider_calls: int = 3
    proxy_poll_interval: float = 10.0
    proxy_resync_interval: float = 60.0
    provider_call_timeout: float = 60.0
    gc_interval: float = 600.0
    gc_min_age: float = 600.0
    probe_target: str | None = None
    probe_interval: float = 1.0
    probe_timeout: float = 0.0  # 0: derived, see `probe_time_limit`
    probe_failure_threshold: int = 3
    probe_success_threshold: int = 1
    trace_health_probes: str = "false"
    prober_metrics_bind_address: str = ":8081"
    api_bind_address: str = ":8090"
    api_token_file: str | None = None
    insecure_no_auth: str = "false"
    max_leases_per_proxy: int = 1
    lease_max_ttl: float = 3600.0
    lease_grace: float = 0.0  # 0: lease_max_ttl
    lease_replica_wait: float = 0.1
    cooldown_blocked: float = 600.0
    cooldown_errors: int = 3
    cooldown_global: float = 300.0
    api_header_timeout: float = 10.0
    api_idle_timeout: float = 30.0
    api_body_timeout: float = 30.0
    api_max_connections: int = 16_384
    api_max_connections_per_client: int = 1024
    log_format: str = "text"
    log_level: str = "info"

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
        return self.trace_health_probes.lower() in ("true", "1", "yes")

    @property
    def api_insecure(self) -> bool:
        return self.insecure_no_auth.lower() in ("true", "1", "yes")

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
                if not re.fullmatch(r"[0-9]{1,6}", raw.strip()):
                    raise SettingsError(f"--{opt.flag} must be a whole number, got {show(raw)}")
                kw[opt.attr] = int(raw)
            else:
                kw[opt.attr] = raw
        s = cls(**kw)  # type: ignore[arg-type]
        s.validate()
        return s

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls.from_values({o.attr: env.get(env_name(o)) for o in OPTIONS})

    def to_env(self) -> dict[str, str]:
        """The FLEET_* variables that reproduce these settings in a child process."""
        out = {}
        for opt in OPTIONS:
            v = getattr(self, opt.attr)
            if v is None:
                continue
            out[env_name(opt)] = format_duration(v) if opt.kind == "duration" else str(v)
        return out

    def validate(self) -> None:
        validate_schedule(self.provider_check_interval, self.provider_check_timeout)
        if self.log_format not in ("text", "json"):
            raise SettingsError(f"--log-format must be text or json, got {show(self.log_format)}")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise SettingsError(f"--log-level must be debug, info, warning or error, got {show(self.log_level)}")
        if self.installation is not None and not _DNS1123_LABEL.fullmatch(self.installation):
            raise SettingsError(
                f"--installation must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63), got {show(self.installation)}"
            )
        if self.proxy_namespaces is not None:
            parse_namespaces(self.proxy_namespaces)
        why = broker_problem(self.broker)
        if why:
            raise SettingsError(f"--broker {why}, got {show(redact_url(self.broker), 200)}")
        parse_bind_address(self.metrics_bind_address)
        parse_bind_address(self.worker_metrics_bind_address, "--worker-metrics-bind-address")
        if self.gc_interval and not 60.0 <= self.gc_interval <= 86400.0:
            raise SettingsError(f"--gc-interval must be 0 (off) or from 1m to 24h, got {format_duration(self.gc_interval)}")
        if not 0.0 <= self.gc_min_age <= 86400.0:
            raise SettingsError(f"--gc-min-age must be at most 24h, got {format_duration(self.gc_min_age)}")
        if not 0.1 <= self.probe_interval <= 3600.0:
            raise SettingsError(f"--probe-interval must be from 100ms to 1h, got {format_duration(self.probe_interval)}")
        if self.probe_timeout and not 0.05 <= self.probe_timeout <= 60.0:
            raise SettingsError(f"--probe-timeout must be from 50ms to 1m, got {format_duration(self.probe_timeout)}")
        for flag, n in (("--probe-failure-threshold", self.probe_failure_threshold),
                        ("--probe-success-threshold", self.probe_success_threshold)):
            if not 1 <= n <= 100:
                raise SettingsError(f"{flag} must be from 1 to 100, got {n}")
        if self.trace_health_probes.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise SettingsError(f"--trace-health-probes must be true or false, got {show(self.trace_health_probes)}")
        parse_bind_address(self.prober_metrics_bind_address, "--prober-metrics-bind-address")
        parse_bind_address(self.api_bind_address, "--api-bind-address")
        if self.insecure_no_auth.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise SettingsError(f"--insecure-no-auth must be true or false, got {show(self.insecure_no_auth)}")
        if not 1 <= self.max_leases_per_proxy <= 10_000:
            raise SettingsError(f"--max-leases-per-proxy must be from 1 to 10000, got {self.max_leases_per_proxy}")
        if not 16 <= self.api_max_connections <= 1_000_000:
            raise SettingsError(f"--api-max-connections must be from 16 to 1000000, got {self.api_max_connections}")
        if not 1 <= self.api_max_connections_per_client <= self.api_max_connections:
            raise SettingsError(f"--api-max-connections-per-client must be from 1 to --api-max-connections "
                                f"({self.api_max_connections}), got {self.api_max_connections_per_client}")
        if not 1 <= self.cooldown_errors <= 1000:
            raise SettingsError(f"--cooldown-errors must be from 1 to 1000, got {self.cooldown_errors}")
        if self.lease_grace and not 1.0 <= self.lease_grace <= 86400.0:
            raise SettingsError(f"--lease-grace must be 0 (--lease-max-ttl) or from 1s to 24h, got "
                                f"{format_duration(self.lease_grace)}")
        if not 0.0 <= self.lease_replica_wait <= 5.0:
            raise SettingsError(f"--lease-replica-wait must be from 0 (never) to 5s, got "
                                f"{format_duration(self.lease_replica_wait)}")
        for flag, seconds, low, high in (("--lease-max-ttl", self.lease_max_ttl, 1.0, 86400.0),
                                         ("--cooldown-blocked", self.cooldown_blocked, 0.0, 86400.0),
                                         ("--cooldown-global", self.cooldown_global, 0.0, 86400.0),
                                         ("--api-header-timeout", self.api_header_timeout, 0.1, 600.0),
                                         ("--api-idle-timeout", self.api_idle_timeout, 0.1, 3600.0),
                                         ("--api-body-timeout", self.api_body_timeout, 0.1, 600.0)):
            if not low <= seconds <= high:
                raise SettingsError(f"{flag} must be from {format_duration(low)} to {format_duration(high)}, "
                                    f"got {format_duration(seconds)}")
        if self.probe_target is not None and probe_target_problem(self.probe_target):
            raise SettingsError(f"--probe-target {probe_target_problem(self.probe_target)}, got {show(redact_url(self.probe_target))}")
        if not 1 <= self.max_provider_calls <= 1000:
            raise SettingsError(f"--max-provider-calls must be from 1 to 1000, got {self.max_provider_calls}")
        for flag, seconds, low, high in (("--proxy-poll-interval", self.proxy_poll_interval, 1.0, 3600.0),
                                       ("--proxy-resync-interval", self.proxy_resync_interval, 1.0, 86400.0),
                                       ("--provider-call-timeout", self.provider_call_timeout, 1.0, 600.0)):
            if not low <= seconds <= high:
                raise SettingsError(f"{flag} must be from {format_duration(low)} to {format_duration(high)}, "
                                    f"got {format_duration(seconds)}")
        for what, value in (("--kubeconfig", self.kubeconfig), ("--kube-context", self.kube_context),
                            ("--providers-config", self.providers_config), ("--proxies", self.proxies),
                            ("--secrets-dir", self.secrets_dir), ("--api-token-file", self.api_token_file)):
            if value is not None and (len(value) > 4096 or not value.isprintable()):
                raise SettingsError(f"{what} must be printable and at most 4096 characters, got {show(value)}")


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
        if not _DNS1123_LABEL.fullmatch(item):
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
    if not host or not (_HOSTNAME.fullmatch(host.strip("[]")) or _is_ip(host.strip("[]"))):
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
