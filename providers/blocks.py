"""Shared base for provider config blocks: strict, so a typo is an error."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict


@dataclass(frozen=True)
class Runtime:
    """What a provider's worker needs from where it runs: `fleet render`
    turns it into that worker's mounts, environment and RBAC, and nothing
    else gets them.

    - `files`: absolute paths the provider reads at run time (keys, known
      hosts, kubeconfigs); mounted read-only from the provider's own Secret,
      marked optional so the worker starts (and reports why) without it.
    - `env`: plain, non-secret environment variables.
    - `dial_files`: the files the gateway and the prober dial its members
      with (bought proxies' credentials), by the name they read them as.
    - `in_cluster`: it talks to the cluster it runs in with its pod's
      ServiceAccount token. Its RBAC rules come in two scopes:
      `cluster_rules` (a ClusterRole: only what must span every namespace)
      and `namespaced_rules` (a Role in `rules_namespace`; None means the
      namespace the worker is deployed to).
    """

    files: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    in_cluster: bool = False
    cluster_rules: tuple[dict[str, Any], ...] = ()
    namespaced_rules: tuple[dict[str, Any], ...] = ()
    rules_namespace: str | None = None
    # What whoever dials the provider's members (the gateway, the prober) reads: (name, path of one of `files`),
    # mounted from the same Secret at <their secrets dir>/<provider>/<name>; the worker's mounts are unchanged.
    dial_files: tuple[tuple[str, str], ...] = ()


class Block(BaseModel):
    """A provider's config block. Unknown keys fail; values are immutable.

    `secret_fields` names fields whose values are redacted wherever the
    effective config is shown (paths to key files are not secret; keys are).
    Each such field `F` has a sibling `FFile` (`secret_file_field`), a path
    read at run time: `fleet render` moves an inline value out of the
    ConfigMap every process mounts into a Secret mounted by that provider's
    worker only, and points `FFile` at it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret_fields: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def secret_file_field(name: str) -> str:
        """The field holding the path of the file that may replace secret field `name`."""
        return name + "File"

    def runtime(self) -> Runtime:
        """What this provider's worker needs mounted or granted; nothing by default."""
        return Runtime()


def _source_range(v: str) -> str:
    """A network clients may come from, in CIDR notation, strictly: the prefix
    length given, no host bits set, never /0 (an open proxy)."""
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError as exc:
        raise ValueError(f"must be a network in CIDR notation such as 10.0.0.0/8 ({exc})") from None
    if net.prefixlen == 0:
        raise ValueError("must not be /0: the proxy would be open to every address")
    if "/" not in v:
        raise ValueError("must give the prefix length, e.g. 10.1.2.3/32")
    return str(net)


# An entry of a provider's `allowedSources`: who may use its proxies.
SourceRange = Annotated[str, AfterValidator(_source_range)]
