"""The `gcp:` block of a provider entry.

Credentials are deliberately absent: they come from Application Default
Credentials (workload identity in a cluster, `gcloud auth application-default
login` on a laptop), never from a key-file path in this file.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from providers.blocks import Block, Runtime

DEFAULT_NETWORK = "default"
DEFAULT_NETWORK_TAG = "proxy-operator"
DEFAULT_DISK_SIZE_GB = 10

# Project ids: 6-30 characters, lowercase letters, digits and hyphens; old
# "domain:project" ids keep their colon. The id ends up in every URL path, so
# a slash or space is never valid.
_PROJECT = re.compile(r"^([a-z][a-z0-9.-]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$")
# GCE resource names (networks, tags, machine types): RFC 1035 labels.
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# Zones: europe-west1-b, us-central1-a. Also an RFC 1035 label (the id's rule).
ZONE = re.compile(r"^[a-z]+(-[a-z0-9]+)+$")

# Where a deployment may put Application Default Credentials as a file: the
# Cloud SDK's config directory, which ADC reads after GOOGLE_APPLICATION_CREDENTIALS
# and before the metadata server. A missing file falls through to the
# metadata server (Workload Identity), so one optional mount serves both.
ADC_DIR = "/var/run/secrets/fleet/gcloud"
ADC_FILE = ADC_DIR + "/application_default_credentials.json"


class GcpConfig(Block):
    project: str = Field(min_length=1)
    # A network name (global/networks/<name>) or a full/partial URL of one.
    network: str = Field(default=DEFAULT_NETWORK, min_length=1)
    # Put on every VM; the firewall rule for the proxy port targets it.
    networkTag: str = Field(default=DEFAULT_NETWORK_TAG)
    diskSizeGb: int = Field(default=DEFAULT_DISK_SIZE_GB, ge=10, le=65536)
    # A private or regional endpoint, e.g. https://compute-private.example.internal
    # (tests point it at a local server). Unset: compute.googleapis.com.
    apiEndpoint: str | None = Field(default=None, min_length=1)
    # Allow-lists for Proxies' placement (providers/gcp/placement.py), checked
    # on the controller before any API call. Empty: any zone, any machine type.
    zones: tuple[str, ...] = ()
    machineTypes: tuple[str, ...] = ()

    def runtime(self) -> Runtime:
        """ADC: an optional key file in the Cloud SDK's config directory, or
        the platform's workload identity when it is absent."""
        return Runtime(files=(ADC_FILE,), env=(("CLOUDSDK_CONFIG", ADC_DIR),))

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        if not _PROJECT.match(v):
            raise ValueError("not a GCP project id (lowercase letters, digits and hyphens, 6-30 characters)")
        return v

    @field_validator("zones")
    @classmethod
    def _zones(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for zone in v:
            if not ZONE.match(zone) or not _NAME.match(zone):
                raise ValueError(f"{zone!r} is not a GCE zone such as europe-west1-b")
        return _unique(v)

    @field_validator("machineTypes")
    @classmethod
    def _machine_types(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for mt in v:
            if not _NAME.match(mt):
                raise ValueError(f"{mt!r} is not a GCE machine type name such as e2-small (a name, not a URL)")
        return _unique(v)

    @field_validator("networkTag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if v and not _NAME.match(v):  # empty: no tag
            raise ValueError("not a GCE network tag (a lowercase RFC 1035 label, at most 63 characters)")
        return v

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        if "/" not in v and not _NAME.match(v):
            raise ValueError("not a GCE network name (a lowercase RFC 1035 label) or a network URL")
        if any(c.isspace() for c in v):
            raise ValueError("must not contain whitespace")
        return v

    @field_validator("apiEndpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if any(c.isspace() for c in v) or v.endswith("/"):
            raise ValueError("a host[:port] or an http(s)://host[:port] URL, without a trailing slash or path")
        rest = v.split("://", 1)[1] if "://" in v else v
        if "://" in v and not v.startswith(("http://", "https://")):
            raise ValueError("the scheme must be http or https")
        if not rest or "/" in rest:
            raise ValueError("a host[:port] or an http(s)://host[:port] URL, without a trailing slash or path")
        return v


def _unique(v: tuple[str, ...]) -> tuple[str, ...]:
    dup = sorted({x for x in v if v.count(x) > 1})
    if dup:
        raise ValueError(f"duplicate entries: {', '.join(dup)}")
    return v
