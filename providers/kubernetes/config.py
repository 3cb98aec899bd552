"""The `kubernetes:` block of a provider entry."""

from __future__ import annotations

from pydantic import Field

from providers.blocks import Block, Runtime

DEFAULT_IMAGE = "ubuntu/squid:6.6-24.04_edge"

# Every Kubernetes API call the provider makes (provider.py, check.py): pods
# in the Proxy's namespace (create, get, delete) and managed pods across all
# namespaces (list, for ListByTag and the health check). Nothing else.
POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get", "list"]},)


class KubernetesConfig(Block):
    """With neither kubeconfig nor context: in-cluster config, then
    $KUBECONFIG or ~/.kube/config."""

    image: str = Field(default=DEFAULT_IMAGE, min_length=1)
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = Field(default=None, min_length=1)

    def runtime(self) -> Runtime:
        """With a kubeconfig: that file, mounted, and no token of this
        cluster. Without: the worker's own ServiceAccount with POD_RULES."""
        if self.kubeconfig:
            return Runtime(files=(self.kubeconfig,))
        return Runtime(in_cluster=True, cluster_rules=POD_RULES)
