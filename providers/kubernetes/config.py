"""The `kubernetes:` block of a provider entry."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from providers.blocks import Block, Runtime

DEFAULT_IMAGE = "ubuntu/squid:6.6-24.04_edge"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Every Kubernetes API call the provider makes (provider.py, check.py), in
# the narrowest scope that serves it: managed pods across all namespaces
# (list, for ListByTag, GC and the health check) cluster-wide; pods in the
# proxies' namespace (create, get, delete) there only. Nothing else.
CLUSTER_POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},)
NAMESPACED_POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get"]},)


class KubernetesConfig(Block):
    """With neither kubeconfig nor context: in-cluster config, then
    $KUBECONFIG or ~/.kube/config.

    `namespace`: where proxy pods are created. Unset: in-cluster, the
    worker's own namespace (where `fleet render` grants it create/get/delete
    on pods); with a kubeconfig or context, the Proxy's namespace.
    """

    image: str = Field(default=DEFAULT_IMAGE, min_length=1)
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = Field(default=None, min_length=1)
    namespace: str | None = None

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and not DNS1123_LABEL.match(v):
            raise ValueError("namespace must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63)")
        return v

    @property
    def uses_own_account(self) -> bool:
        """In-cluster, with the worker pod's ServiceAccount."""
        return not self.kubeconfig and not self.context

    def runtime(self) -> Runtime:
        """With a kubeconfig: that file, mounted, and no token of this
        cluster. Without: the worker's own ServiceAccount, with the
        cluster-wide pod list and create/get/delete in `namespace` (None: the
        worker's namespace)."""
        if self.kubeconfig:
            return Runtime(files=(self.kubeconfig,))
        return Runtime(
            in_cluster=True,
            cluster_rules=CLUSTER_POD_RULES,
            namespaced_rules=NAMESPACED_POD_RULES,
            rules_namespace=self.namespace,
        )
