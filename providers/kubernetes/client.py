"""Loading cluster credentials into a private `Configuration` (never the
client's global default), shared by this provider and the controller's writer.
"""

from __future__ import annotations

import os

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from providers.watchdog import WATCHED_POOL_CLASSES, watch_pool_manager

__all__ = ["ConfigException", "default_kubeconfig", "in_cluster", "load_configuration", "watch_sockets"]

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(SERVICE_ACCOUNT_TOKEN)


def default_kubeconfig() -> str:
    # Read at call time: the client reads $KUBECONFIG once, at import.
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """Explicit kubeconfig/context first; else in-cluster; else the default
    kubeconfig. Raises ConfigException (or OSError) when none works."""
    cfg = client.Configuration()
    if kubeconfig is None and context is None and in_cluster():
        config.load_incluster_config(client_configuration=cfg)
        return cfg
    config.load_kube_config(
        config_file=kubeconfig or default_kubeconfig(), context=context, client_configuration=cfg
    )
    return cfg


def watch_sockets(api: client.ApiClient) -> None:
    """Let `providers.watchdog.guard` cut this client's connections at a
    deadline (the read timeout alone never ends a slow-drip answer).
    Idempotent; a pool built before is dropped once, idle connections only."""
    pm = api.rest_client.pool_manager
    if pm.pool_classes_by_scheme != WATCHED_POOL_CLASSES:
        watch_pool_manager(pm)
