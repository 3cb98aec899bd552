"""The `aws:` block of a provider entry.

Pure data and validation (no SDK import). Credentials are deliberately
absent: boto3's default chain finds them (environment, the shared
credentials/config files, a web identity token such as EKS IRSA, the
container or instance role), never a key in this file.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from providers.blocks import Block, Runtime, SourceRange

# Where a deployment may put a shared credentials and config file, mounted
# from the provider's own Secret (optional: without them boto3 goes on to a
# web identity token or the instance role).
AWS_DIR = "/var/run/secrets/fleet/aws"
CREDENTIALS_FILE = AWS_DIR + "/credentials"
CONFIG_FILE = AWS_DIR + "/config"

MAX_SOURCES = 50  # a security group holds 60 inbound rules by default

REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
_VPC = re.compile(r"^vpc-[0-9a-f]{8,17}$")
SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
_PROFILE = re.compile(r"^[A-Za-z0-9_.+@-]{1,64}$")


class AwsConfig(Block):
    # The region of a Proxy without placement.region; always allowed.
    region: str
    # More regions Proxies may be placed in (and that list_by_tag, GC and the
    # check cover); the provider id carries the region.
    regions: tuple[str, ...] = ()
    # The VPC the security groups are created in; unset: the region's default
    # VPC. Required when Proxies name a subnet in placement.zone.
    vpcId: str | None = None
    # Who may use the proxies: the one inbound rule of each security group
    # fleet creates. Required while fleet manages the groups.
    allowedSources: tuple[SourceRange, ...] = Field(default=(), max_length=MAX_SOURCES)
    # false: fleet creates no security group; securityGroupIds must admit the
    # proxy port (a firewall of your own).
    manageSecurityGroup: bool = True
    # Groups of your own put on every instance as well (never modified or deleted).
    securityGroupIds: tuple[str, ...] = ()
    # Report the private address instead of the public one (clients inside the VPC).
    internalIP: bool = False
    # A shared-config profile; unset: the default chain.
    profile: str | None = None
    # A private or test endpoint (http(s)://host[:port]); unset: AWS's own per region.
    endpointUrl: str | None = Field(default=None, min_length=1)

    def runtime(self) -> Runtime:
        """The shared credentials and config files from the provider's
        Secret (optional), or whatever else the default chain finds."""
        return Runtime(
            files=(CREDENTIALS_FILE, CONFIG_FILE),
            env=(("AWS_SHARED_CREDENTIALS_FILE", CREDENTIALS_FILE), ("AWS_CONFIG_FILE", CONFIG_FILE)),
        )

    @property
    def all_regions(self) -> tuple[str, ...]:
        return (self.region, *(r for r in self.regions if r != self.region))

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not REGION.match(v):
            raise ValueError(f"{v!r} is not an AWS region such as eu-west-1")
        return v

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for r in v:
            if not REGION.match(r):
                raise ValueError(f"{r!r} is not an AWS region such as eu-west-1")
        return _unique(v)

    @field_validator("vpcId")
    @classmethod
    def _vpc(cls, v: str | None) -> str | None:
        if v is not None and not _VPC.match(v):
            raise ValueError(f"{v!r} is not a VPC id such as vpc-0a1b2c3d")
        return v

    @field_validator("securityGroupIds")
    @classmethod
    def _groups(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for g in v:
            if not SECURITY_GROUP.match(g):
                raise ValueError(f"{g!r} is not a security group id such as sg-0a1b2c3d")
        return _unique(v)

    @field_validator("allowedSources")
    @classmethod
    def _sources(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _unique(v)

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str | None) -> str | None:
        if v is not None and not _PROFILE.match(v):
            raise ValueError("not a profile name (letters, digits and _.+@-, at most 64)")
        return v

    @field_validator("endpointUrl")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("http://", "https://")) or any(c.isspace() for c in v) or v.endswith("/"):
            raise ValueError("an http(s)://host[:port] URL without a trailing slash")
        if "/" in v.split("://", 1)[1]:
            raise ValueError("an http(s)://host[:port] URL without a path")
        return v

    @model_validator(mode="after")
    def _firewall(self) -> AwsConfig:
        if self.manageSecurityGroup and not self.allowedSources:
            raise ValueError(
                "allowedSources is required while manageSecurityGroup is true: the networks that may use the proxies "
                "(the crawler clients and fleet's prober), e.g. [203.0.113.0/24]"
            )
        if not self.manageSecurityGroup and not self.securityGroupIds:
            raise ValueError("with manageSecurityGroup false, securityGroupIds must name the groups that admit the proxy port")
        return self


def _unique(v: tuple[str, ...]) -> tuple[str, ...]:
    dup = sorted({x for x in v if v.count(x) > 1})
    if dup:
        raise ValueError(f"duplicate entries: {', '.join(dup)}")
    return v
