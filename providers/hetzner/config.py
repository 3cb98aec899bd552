"""The `hetzner:` block of a provider entry (pure data, no SDK import).

The API token is a project's whole key: it comes from `tokenFile` (mounted
from the provider's own Secret), or inline as `token`, which `fleet render`
moves into that Secret (a secret field: redacted wherever the config is
shown). The file is re-read when it changes, so a rotated token needs no
restart.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from providers.blocks import Block, Runtime, SourceRange

TOKEN_DIR = "/var/run/secrets/fleet/hetzner"
TOKEN_FILE = TOKEN_DIR + "/token"
DEFAULT_ENDPOINT = "https://api.hetzner.cloud/v1"
MAX_SOURCES = 100  # source_ips of one firewall rule

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # locations (fsn1), server types (cx22), image names (ubuntu-24.04 has a dot)
IMAGE = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,62}$|^\d{1,12}$")


class HetznerConfig(Block):
    secret_fields = ("token",)

    token: str | None = Field(default=None, min_length=1, repr=False)
    tokenFile: str = TOKEN_FILE
    apiEndpoint: str = DEFAULT_ENDPOINT
    # Defaults for a Proxy whose placement leaves them out.
    location: str | None = None
    serverType: str | None = None
    image: str | None = None
    # Allow-list of locations; empty: any.
    locations: tuple[str, ...] = ()
    # Who may use the proxies: the one inbound rule of each firewall fleet creates.
    allowedSources: tuple[SourceRange, ...] = Field(default=(), max_length=MAX_SOURCES)
    # false: fleet creates no firewall; firewallIds must admit the proxy port.
    manageFirewall: bool = True
    firewallIds: tuple[int, ...] = ()
    # SSH keys (names or ids) put on every server; without any, Hetzner mails a root password.
    sshKeys: tuple[str, ...] = ()
    # Report the first private network address instead of the public IPv4.
    internalIP: bool = False
    enableIPv6: bool = False

    def runtime(self) -> Runtime:
        return Runtime(files=(self.tokenFile,))

    @field_validator("tokenFile")
    @classmethod
    def _file(cls, v: str) -> str:
        if not v.startswith("/") or any(c.isspace() for c in v):
            raise ValueError("must be an absolute path")
        return v

    @field_validator("apiEndpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")) or v.endswith("/") or any(c.isspace() for c in v):
            raise ValueError("an http(s)://host[:port]/path URL without a trailing slash, e.g. https://api.hetzner.cloud/v1")
        return v

    @field_validator("location", "serverType")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.match(v):
            raise ValueError(f"{v!r} is not a Hetzner name such as fsn1 or cx22")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and not IMAGE.match(v):
            raise ValueError(f"{v!r} is not an image name such as ubuntu-24.04 or an image id")
        return v

    @field_validator("locations")
    @classmethod
    def _locations(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for loc in v:
            if not _NAME.match(loc):
                raise ValueError(f"{loc!r} is not a location such as fsn1")
        dup = sorted({x for x in v if v.count(x) > 1})
        if dup:
            raise ValueError(f"duplicate entries: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _firewall(self) -> HetznerConfig:
        if self.manageFirewall and not self.allowedSources:
            raise ValueError("allowedSources is required while manageFirewall is true: the networks that may use the "
                             "proxies (the crawler clients and fleet's prober), e.g. [203.0.113.0/24]")
        if not self.manageFirewall and not self.firewallIds:
            raise ValueError("with manageFirewall false, firewallIds must name the firewalls that admit the proxy port")
        return self
