"""The `kubernetes:` block of a provider entry."""

from __future__ import annotations

from pydantic import Field

from providers.blocks import Block

DEFAULT_IMAGE = "ubuntu/squid:6.6-24.04_edge"


class KubernetesConfig(Block):
    """With neither kubeconfig nor context: in-cluster config, then
    $KUBECONFIG or ~/.kube/config."""

    image: str = Field(default=DEFAULT_IMAGE, min_length=1)
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = Field(default=None, min_length=1)
