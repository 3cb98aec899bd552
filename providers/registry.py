"""The one list of provider types: type name → config model and constructor.

Both are named by import path and imported on demand (libcloud's
`get_driver`), so validating a config never imports an SDK, and a worker for
one provider never imports another provider's SDK. The config allow-list, the
`fleet` CLI and the docs all derive from `TYPES`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from providers.base import Placement, Provider


@dataclass(frozen=True)
class ProviderType:
    config: str  # "module:Class", a pydantic model of the type's config block
    factory: str  # "module:function", new(name, block) -> Provider
    summary: str
    # "module:function", problem(block, Placement) -> str | None: why a Proxy's
    # placement can never be satisfied (naming the field and value), judged on
    # the controller before any backend call; pure, imports no SDK. "" = any.
    placement: str = ""
    # "module:function", problem(block) -> str | None: why this host cannot run
    # the type's worker (a program it starts is missing), asked where a worker
    # starts (`fleet worker`, `fleet up`) and nowhere else: the controller, the
    # API or `fleet render` may run where the worker's programs are not. "" = none.
    host: str = ""
    # "module:function", dial(name, block, provider_id) -> dict | None: the
    # fields of a member's endpoint (as the gateway and prober read it) that
    # differ from a fleet-made proxy's `status.ip` and `spec.port`: `ip` and
    # `port` of the upstream, `scheme`, `credentials` (a reference: the
    # provider's name, never a secret) and `username` (a template whose only
    # placeholder left is `{user}`); pure, reads no file. "" = none.
    dial: str = ""


TYPES: dict[str, ProviderType] = {
    "kubernetes": ProviderType(
        "providers.kubernetes.config:KubernetesConfig",
        "providers.kubernetes.provider:new",
        "Squid pods in a Kubernetes cluster",
        placement="providers.kubernetes.placement:placement_problem",
    ),
    "kvm": ProviderType(
        "providers.kvm.config:KvmConfig",
        "providers.kvm.provider:new",
        "libvirt VMs on your own hypervisors over SSH",
        placement="providers.kvm.placement:placement_problem",
    ),
    "aws": ProviderType(
        "providers.aws.config:AwsConfig",
        "providers.aws.provider:new",
        "EC2 instances, each with a security group of its own",
        placement="providers.aws.placement:placement_problem",
    ),
    "hetzner": ProviderType(
        "providers.hetzner.config:HetznerConfig",
        "providers.hetzner.provider:new",
        "Hetzner Cloud servers, each with a firewall of its own",
        placement="providers.hetzner.placement:placement_problem",
    ),
    "gcp": ProviderType(
        "providers.gcp.config:GcpConfig",
        "providers.gcp.provider:new",
        "Compute Engine VMs with an ephemeral external IP",
        placement="providers.gcp.placement:placement_problem",
    ),
    "local": ProviderType(
        "providers.local.config:LocalConfig",
        "providers.local.provider:new",
        "Squid processes on this host, one per instance, for demos and tests",
        host="providers.local.check:host_problem",
    ),
    "upstream": ProviderType(
        "providers.upstream.config:UpstreamConfig",
        "providers.upstream.provider:new",
        "proxies fleet did not create: a list of URLs, or a vendor's sessions of one endpoint",
        placement="providers.upstream.placement:placement_problem",
        dial="providers.upstream.ids:dial_facts",
    ),
    "fake": ProviderType(
        "providers.fake:FakeConfig",
        "providers.fake:new",
        "scripted verdicts without a backend, for demos, tests and benchmarks",
    ),
}


def _load(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def config_model(type_name: str) -> Any:
    """The pydantic model of a type's config block."""
    return _load(TYPES[type_name].config)


def placement_problem(type_name: str, block: Any, placement: Placement) -> str | None:
    """Why no instance of this type could ever have `placement`, or None."""
    ref = TYPES[type_name].placement
    return _load(ref)(block, placement) if ref else None


def host_problem(type_name: str, block: Any) -> str | None:
    """Why a worker of this type cannot run on this host, or None."""
    ref = TYPES[type_name].host
    return _load(ref)(block) if ref else None


def dial_facts(type_name: str, name: str, block: Any, provider_id: str) -> dict[str, Any] | None:
    """What a dialer needs of a member beyond its IP and the Proxy's port, or None (dial those, an open proxy)."""
    ref = TYPES[type_name].dial
    return _load(ref)(name, block, provider_id) if ref else None


def build(name: str, type_name: str, block: Any) -> Provider:
    """Construct a provider. Must not dial its backend: one dead backend may
    not stop the process from serving the others."""
    return _load(TYPES[type_name].factory)(name, block)
