"""The `upstream:` block of a provider entry: proxies fleet did not create.

Pure data and validation: importing it reads no file and dials nothing.
Two modes:

- `list`: proxy URLs (`http://host:port`, `socks5://host:port`) in the block
  (`proxies`) or one per line in `listFile`. Credentials never stand in the
  providers file: a `user:pass@` in `proxies` is refused; they come from
  `usernameFile`/`passwordFile` (every entry), or from the entry's own line
  of `listFile` (a mounted Secret, so it may carry `user:pass@`).
- `vendor`: one `endpoint` and a `usernameTemplate` whose `{session}` gives
  each member its own exit; `{user}` is `usernameFile`'s content, and
  `{country}`, `{region}`, `{city}` come from the Proxy's placement through
  `placementFields` (which placement field fills which placeholder).

Every file path is mounted by `fleet render` from the provider's Secret
(`runtime().files`); no value read from them is ever shown.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from pydantic import Field, field_validator, model_validator

from providers.blocks import Block, Runtime

SCHEMES = ("http", "socks5")
DEFAULT_PORTS = {"http": 8080, "socks5": 1080}
MAX_PROXIES = 10_000
MAX_SESSION = 32
ROOT_STATE_BASE = "/var/lib/fleet/upstream"
# The placeholders a usernameTemplate may hold; the placement ones are filled per member.
USER, SESSION = "user", "session"
PLACEMENT_PLACEHOLDERS = ("country", "region", "city")
PLACEHOLDERS = (USER, SESSION, *PLACEMENT_PLACEHOLDERS)
# The Proxy placement fields a vendor member can use (machineType and image mean nothing here).
PLACEMENT_FIELDS = ("region", "zone")
DEFAULT_PLACEMENT_FIELDS = {"region": "country", "zone": "city"}
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# A host name (RFC 1123 labels) or an IP literal (IPv6 in brackets in a URL).
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
# What a placement value may be: it lands in a username and in the provider id.
PLACEMENT_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,62}$")
# Template text outside placeholders: no ':' (Basic auth splits there), no space or control characters.
_TEMPLATE_TEXT = re.compile(r"^[!-~]*$")


@dataclass(frozen=True)
class Endpoint:
    """One upstream proxy without its credentials: what a dialer needs but the secret."""

    scheme: str
    host: str  # a DNS name or an IP literal (IPv6 without brackets)
    port: int

    @property
    def netloc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}"


@dataclass(frozen=True)
class Entry:
    """A list entry: its endpoint, and credentials from its own listFile line.
    Never shown: repr names the endpoint only."""

    endpoint: Endpoint
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:
        return f"Entry({self.endpoint.url}, credentials={'yes' if self.username else 'no'})"


def _host(text: str) -> str:
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError("an IPv6 host must be in brackets, e.g. [2001:db8::1]:8080")
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
    if not _HOST.match(text):
        raise ValueError(f"{text[:80]!r} is not a host name or IP address")
    return text.rstrip(".").lower()


def parse_url(text: str, *, credentials: bool) -> Entry:
    """`scheme://[user:pass@]host[:port]` → an Entry; ValueError naming what
    is wrong and never the credentials. `credentials=False` refuses a
    `user:pass@` (the providers file holds none)."""
    if not isinstance(text, str):
        raise ValueError("must be a string such as http://203.0.113.7:8080")
    scheme, sep, rest = text.strip().partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(f"must start with http:// or socks5:// (got {scheme[:20]!r})")
    scheme = scheme.lower()
    rest = rest.rstrip("/")
    if "/" in rest or "?" in rest or "#" in rest:
        raise ValueError("must be scheme://host:port with no path, query or fragment")
    userinfo, at, hostport = rest.rpartition("@")
    username = password = ""
    if at:
        if not credentials:
            raise ValueError("holds credentials (user:pass@): they never stand in the providers file; "
                             "put them in usernameFile/passwordFile, or the URLs with them in listFile (a mounted Secret)")
        username, colon, password = userinfo.partition(":")
        if not username or not colon:
            raise ValueError("credentials must be user:pass@ (both non-empty)")
        username, password = unquote(username), unquote(password)
    if hostport.startswith("[") and "]" in hostport:
        host_text, _, port_text = hostport.partition("]")
        host_text += "]"
        port_text = port_text[1:] if port_text.startswith(":") else ("" if not port_text else "x")
    else:
        host_text, colon, port_text = hostport.partition(":")
        if colon and not port_text:
            port_text = "x"
    host = _host(host_text)
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError("the port must be from 1 to 65535")
        port = int(port_text)
    else:
        port = DEFAULT_PORTS[scheme]
    return Entry(Endpoint(scheme, host, port), username, password)


def parse_list(text: str) -> list[Entry]:
    """A listFile's lines: one URL each (credentials allowed), `#` comments
    and blank lines skipped. ValueError names the line, never its content."""
    out: list[Entry] = []
    seen: set[Endpoint] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = parse_url(line, credentials=True)
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
        if entry.endpoint in seen:
            raise ValueError(f"line {n}: {entry.endpoint.url} is listed twice")
        seen.add(entry.endpoint)
        out.append(entry)
        if len(out) > MAX_PROXIES:
            raise ValueError(f"more than {MAX_PROXIES} proxies")
    return out


def template_placeholders(template: str) -> list[str]:
    return _PLACEHOLDER.findall(template)


def render_username(template: str, values: dict[str, str]) -> str:
    """The template with each placeholder replaced (plain replacement, no
    str.format: a value can't reach attributes or other fields)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), template)


def _abs(v: str, what: str) -> str:
    if v and (not v.startswith("/") or os.path.normpath(v) != v):
        raise ValueError(f"{what} must be an absolute, normalised path")
    return v


class UpstreamConfig(Block):
    """Proxies fleet did not create (docs/upstream-provider.md).

    - `mode`: `list` (each member takes one entry) or `vendor` (each member
      is a new session of one endpoint).
    - `proxies`: list mode, URLs without credentials.
    - `listFile`: list mode, a file of URLs, one a line, credentials allowed
      (it is mounted from the provider's Secret); read at each create and get.
    - `endpoint`: vendor mode, the one URL (no credentials).
    - `usernameTemplate`: vendor mode; placeholders `{user}`, `{session}`
      (required), `{country}`, `{region}`, `{city}`.
    - `placementFields`: vendor mode, which Proxy placement field (`region`,
      `zone`) fills which placeholder; default region→country, zone→city.
    - `usernameFile`, `passwordFile`: the credentials, read at each use.
    - `checkURL`: `host:port` the health check connects to through the upstream.
    - `checkPlacement`: vendor mode, placeholder values the check's username uses.
    - `stateDir`: which member holds which entry or session (as the local
      provider keeps its records); default /var/lib/fleet/upstream/<name>
      as root, else $XDG_STATE_HOME/fleet/upstream/<name>.
    """

    mode: Literal["list", "vendor"]
    proxies: list[str] = Field(default_factory=list, max_length=MAX_PROXIES)
    listFile: str = ""
    endpoint: str = ""
    usernameTemplate: str = ""
    placementFields: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_PLACEMENT_FIELDS))
    usernameFile: str = ""
    passwordFile: str = ""
    checkURL: str = "www.example.com:443"
    checkPlacement: dict[str, str] = Field(default_factory=dict)
    stateDir: str = ""

    @model_validator(mode="before")
    @classmethod
    def _no_inline_endpoint_credentials(cls, data: object) -> object:
        """Judged on the whole block, so the error shows the block's size and
        never the endpoint's text (which would hold the password)."""
        endpoint = data.get("endpoint") if isinstance(data, dict) else None
        if isinstance(endpoint, str) and "@" in endpoint:
            raise ValueError("endpoint holds credentials (user:pass@): they never stand in the providers file; "
                             "put them in usernameFile/passwordFile")
        return data

    @field_validator("proxies")
    @classmethod
    def _proxies(cls, v: list[str]) -> list[str]:
        seen: set[Endpoint] = set()
        out = []
        for i, text in enumerate(v):
            try:
                entry = parse_url(text, credentials=False)
            except ValueError as exc:
                raise ValueError(f"proxies[{i}] {exc}") from None
            if entry.endpoint in seen:
                raise ValueError(f"proxies[{i}] {entry.endpoint.url} is listed twice")
            seen.add(entry.endpoint)
            out.append(entry.endpoint.url)
        return out

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        return parse_url(v, credentials=False).endpoint.url if v else v

    @field_validator("listFile", "usernameFile", "passwordFile", "stateDir")
    @classmethod
    def _paths(cls, v: str, info) -> str:  # type: ignore[no-untyped-def]
        return _abs(v, info.field_name)

    @field_validator("usernameTemplate")
    @classmethod
    def _template(cls, v: str) -> str:
        if not v:
            return v
        names = template_placeholders(v)
        unknown = [n for n in names if n not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"unknown placeholder {{{unknown[0][:20]}}}: use {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        if SESSION not in names:
            raise ValueError("must hold {session}: each member's session is its own exit")
        if len(names) != len(set(names)):
            raise ValueError("names a placeholder twice")
        text = _PLACEHOLDER.sub("", v)
        if "{" in text or "}" in text or ":" in text or not _TEMPLATE_TEXT.match(text):
            raise ValueError("outside placeholders, only printable characters other than ':', '{' and '}'")
        return v

    @field_validator("placementFields")
    @classmethod
    def _placement_fields(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if key not in PLACEMENT_FIELDS:
                raise ValueError(f"key {key[:20]!r}: a Proxy placement field is one of {', '.join(PLACEMENT_FIELDS)}")
            if value not in PLACEMENT_PLACEHOLDERS:
                raise ValueError(f"{key}: {value[:20]!r} is not one of {', '.join(PLACEMENT_PLACEHOLDERS)}")
        if len(set(v.values())) != len(v):
            raise ValueError("two placement fields fill the same placeholder")
        return v

    @field_validator("checkPlacement")
    @classmethod
    def _check_placement(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if key not in PLACEMENT_PLACEHOLDERS:
                raise ValueError(f"key {key[:20]!r} is not one of {', '.join(PLACEMENT_PLACEHOLDERS)}")
            if not PLACEMENT_VALUE.match(value):
                raise ValueError(f"{key}: {value[:40]!r} must be letters, digits, '_', '.', '+' or '-' (at most 63)")
        return v

    @field_validator("checkURL")
    @classmethod
    def _check_url(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. www.example.com:443")
        _host(host)
        return v

    @model_validator(mode="after")
    def _mode(self) -> UpstreamConfig:
        if (self.usernameFile == "") != (self.passwordFile == ""):
            raise ValueError("give usernameFile and passwordFile together")
        if self.mode == "list":
            extra = [f for f in ("endpoint", "usernameTemplate", "checkPlacement") if getattr(self, f)]
            if extra:
                raise ValueError(f"{extra[0]} is for mode vendor, not list")
            if not self.proxies and not self.listFile:
                raise ValueError("mode list needs proxies or listFile")
        else:
            extra = [f for f in ("proxies", "listFile") if getattr(self, f)]
            if extra:
                raise ValueError(f"{extra[0]} is for mode list, not vendor")
            if not self.endpoint or not self.usernameTemplate:
                raise ValueError("mode vendor needs endpoint and usernameTemplate")
            if not self.usernameFile:
                raise ValueError("mode vendor needs usernameFile and passwordFile (the vendor's credentials)")
            names = template_placeholders(self.usernameTemplate)
            missing = [k for k in self.checkPlacement if k not in names]
            if missing:
                raise ValueError(f"checkPlacement.{missing[0]}: usernameTemplate has no {{{missing[0]}}}")
        return self

    # -- resolved values --------------------------------------------------------------

    def runtime(self) -> Runtime:
        """The credential files (and listFile, which may carry credentials):
        mounted from the provider's Secret, in the worker and (as `list`,
        `username`, `password`: fleet.credentials) in the gateway and prober."""
        named = (("list", self.listFile), ("username", self.usernameFile), ("password", self.passwordFile))
        return Runtime(files=tuple(f for _, f in named if f), dial_files=tuple((n, f) for n, f in named if f))

    def vendor_endpoint(self) -> Endpoint:
        return parse_url(self.endpoint, credentials=False).endpoint

    def check_target(self) -> tuple[str, int]:
        host, _, port = self.checkURL.rpartition(":")
        return _host(host), int(port)

    def state_dir(self, provider_name: str) -> str:
        return self.stateDir or default_state_dir(provider_name)


def default_state_dir(provider_name: str) -> str:
    if os.geteuid() == 0:
        return os.path.join(ROOT_STATE_BASE, provider_name)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "fleet", "upstream", provider_name)
