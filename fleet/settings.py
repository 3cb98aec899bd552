"""Process settings: one table of flags, each also `FLEET_<FLAG>` in the
environment (flags win), and the seed's schedule validation.

The CLI turns this table into flags and exports the parsed values to the
Celery processes it starts, which read them back with `Settings.from_env`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

from fleet.durations import format_duration, parse_duration

MIN_INTERVAL = 10.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_INSTALLATION = "default"
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class SettingsError(ValueError):
    """A process setting is invalid; the message names the flag and value."""


@dataclass(frozen=True)
class Option:
    flag: str  # without the leading --
    help: str
    kind: str = "str"  # str | duration

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
    Option("kubeconfig", "Kubeconfig for the controller's ProviderHealth writes (default: in-cluster, $KUBECONFIG, ~/.kube/config)."),
    Option("kube-context", "Context in that kubeconfig."),
    Option(
        "installation",
        "This fleet's identity, a DNS-1123 label carried as a label on everything it creates, so fleets sharing a cluster, "
        "project or hypervisor never touch each other's. Default: the pod's namespace, else 'default'.",
    ),
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
    kubeconfig: str | None = None
    kube_context: str | None = None
    installation: str | None = None
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
            raise SettingsError(f"--log-format must be text or json, got {self.log_format!r}")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise SettingsError(f"--log-level must be debug, info, warning or error, got {self.log_level!r}")
        if self.installation is not None and not _DNS1123_LABEL.fullmatch(self.installation):
            raise SettingsError(
                f"--installation must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63), got {self.installation!r}"
            )
        if not self.broker.startswith(("redis://", "rediss://", "unix://")):
            raise SettingsError(f"--broker must be a redis:// or rediss:// URL, got {self.broker!r}")


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


def validate_schedule(interval: float, timeout: float) -> None:
    """The seed's ValidateSchedule: interval 0 (off) or ≥ 10s; timeout 0
    (derived) or in (0, interval]. Messages as the seed prints them."""
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
