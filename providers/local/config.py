"""The `local:` block of a provider entry, and the defaults that depend on
where the worker runs.

Pure data and validation: importing it starts nothing and reads no file.
Values that end up in squid.conf (paths, addresses) are restricted so they
can never break its syntax: no whitespace, quotes or `#`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from collections.abc import Iterator

from pydantic import Field, field_validator, model_validator

from providers.blocks import Block, SourceRange

DEFAULT_PORT_RANGE = "31280-31379"
MIN_PORT = 1024
MAX_PORTS = 1000
MAX_SOURCES = 64
MIN_EGRESS_PREFIX = {4: 8, 6: 64}  # egressRange no wider than a /8 (IPv4) or /64 (IPv6)
FALLBACK_SQUID = "/usr/sbin/squid"
ROOT_STATE_BASE = "/var/lib/fleet/local"

PORT_RANGE = re.compile(r"^(\d{1,5})-(\d{1,5})$")
# Characters that would end a squid.conf token or start a comment.
_UNSAFE = re.compile(r"[\s\"'#\\]")


def parse_port_range(text: str) -> tuple[int, int]:
    """`"31280-31379"` → (31280, 31379); ValueError naming what is wrong."""
    m = PORT_RANGE.match(text)
    if not m:
        raise ValueError("portRange must be FIRST-LAST, e.g. 31280-31379")
    lo, hi = int(m.group(1)), int(m.group(2))
    if lo > hi:
        raise ValueError(f"portRange must be ordered: {lo} is above {hi}")
    if lo < MIN_PORT or hi > 65535:
        raise ValueError(f"portRange must lie within {MIN_PORT}-65535")
    if hi - lo + 1 > MAX_PORTS:
        raise ValueError(f"portRange may hold at most {MAX_PORTS} ports (got {hi - lo + 1})")
    return lo, hi


def parse_egress_range(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """`"127.0.1.0/24"` → the network; ValueError naming what is wrong."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"egressRange must be a CIDR such as 127.0.1.0/24 ({exc})") from None
    if net.prefixlen < MIN_EGRESS_PREFIX[net.version]:
        raise ValueError(f"egressRange {net} is too wide: at most a /{MIN_EGRESS_PREFIX[net.version]}")
    if net.is_multicast or net.is_unspecified:
        raise ValueError(f"egressRange {net} must be unicast addresses")
    return net


def egress_addresses(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Iterator[str]:
    """The range's usable addresses in order (no network or broadcast
    address in an IPv4 range wider than a /31)."""
    for ip in net.hosts():
        yield str(ip)


def safe_path(v: str, what: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"{what} must be an absolute path")
    if _UNSAFE.search(v) or "\x00" in v:
        raise ValueError(f"{what} must not contain whitespace, quotes, '#' or '\\'")
    return v


class LocalConfig(Block):
    """Squid processes on the worker's own host.

    - `stateDir`: where records, configs and logs live. Unset: the worker
      resolves `/var/lib/fleet/local/<provider name>` when it runs as root,
      else `$XDG_STATE_HOME/fleet/local/<provider name>` (XDG's default
      `~/.local/state`). Created on first use, never at load.
    - `bindAddress`: the address every instance listens on and reports as
      its IP; an IP literal, not a wildcard (clients must reach it).
    - `portRange`: the ports a Proxy's `spec.port` may use, `FIRST-LAST`.
    - `squidPath`: the squid binary; unset: `squid` on $PATH, else /usr/sbin/squid.
    - `allowedSources`: CIDRs allowed to use the proxies; everything else is
      denied. Unset: 127.0.0.0/8 (or ::1/128) for a loopback bind address,
      else the bind address alone.
    - `egressRange`: a CIDR; each instance gets its own outgoing address from
      it (squid's `tcp_outgoing_address`), so an origin sees a different
      client address per proxy. Unset: the host's default source address.
      Loopback ranges only (127.0.0.0/8), unless `egressAnyRange` is true:
      then any range, whose addresses must be assigned to this host.
    """

    stateDir: str | None = None
    bindAddress: str = "127.0.0.1"
    portRange: str = DEFAULT_PORT_RANGE
    squidPath: str | None = None
    allowedSources: list[SourceRange] | None = Field(
        default=None, min_length=1, max_length=MAX_SOURCES)
    egressRange: str | None = None
    egressAnyRange: bool = False

    @field_validator("stateDir")
    @classmethod
    def _state_dir(cls, v: str | None) -> str | None:
        return None if v is None else safe_path(v, "stateDir")

    @field_validator("squidPath")
    @classmethod
    def _squid_path(cls, v: str | None) -> str | None:
        return None if v is None else safe_path(v, "squidPath")

    @field_validator("bindAddress")
    @classmethod
    def _bind(cls, v: str) -> str:
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError("bindAddress must be an IP address such as 127.0.0.1 (not a host name)") from None
        if ip.is_unspecified or ip.is_multicast:
            raise ValueError("bindAddress must be one address clients can reach, not a wildcard or multicast address")
        return str(ip)

    @field_validator("egressRange")
    @classmethod
    def _egress(cls, v: str | None) -> str | None:
        return None if v is None else str(parse_egress_range(v))

    @model_validator(mode="after")
    def _egress_loopback(self) -> LocalConfig:
        net = self.egress_network
        if net is not None and not self.egressAnyRange and not net.is_loopback:
            raise ValueError(f"egressRange {net} is not a loopback range (127.0.0.0/8): "
                             "set egressAnyRange: true to use addresses of this host's interfaces")
        return self

    @field_validator("portRange")
    @classmethod
    def _range(cls, v: str) -> str:
        parse_port_range(v)
        return v

    # -- resolved values (no I/O beyond the environment and $PATH) -------------------

    @property
    def ports(self) -> tuple[int, int]:
        return parse_port_range(self.portRange)

    @property
    def egress_network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        return None if self.egressRange is None else ipaddress.ip_network(self.egressRange)

    def sources(self) -> list[str]:
        """The CIDRs squid allows; never empty, never everything."""
        if self.allowedSources:
            return list(self.allowedSources)
        ip = ipaddress.ip_address(self.bindAddress)
        if ip.is_loopback:
            return ["127.0.0.0/8"] if ip.version == 4 else ["::1/128"]
        return [f"{ip}/{ip.max_prefixlen}"]

    def state_dir(self, provider_name: str) -> str:
        if self.stateDir:
            return self.stateDir
        return default_state_dir(provider_name)

    def squid(self) -> str:
        return self.squidPath or shutil.which("squid") or FALLBACK_SQUID


def default_state_dir(provider_name: str) -> str:
    if os.geteuid() == 0:
        return os.path.join(ROOT_STATE_BASE, provider_name)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "fleet", "local", provider_name)
