"""`fleet render -c providers.yaml`: the Kubernetes objects of the provider
workers, generated from the providers file so the provider list has one
source.

For the file it prints the `fleet-providers` ConfigMap (mounted by every
process), and per provider a ServiceAccount, RBAC only when the provider
talks to this cluster, and a worker Deployment running `fleet worker -p
NAME` (which execs `commands.worker_argv`: queue `provider.<name>`, worker
name `<name>@%h`). What a provider needs mounted is declared once per type,
by its config block's `runtime()` (providers/blocks.py); this module only
turns that into volumes, environment and RBAC, and mounts a provider's
credentials in its own worker and nowhere else.

The static processes (controller, beat, Flower, the quickstart Redis) are in
deploy/ and rendered by kustomize; both share the envelope below: non-root,
read-only root filesystem, a 64Mi /tmp, the config at CONFIG_PATH, the broker
URL from the `fleet-broker` Secret.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import yaml

from fleet import commands, routing
from fleet.config import ProviderConfig, ProvidersConfig
from providers.blocks import Block, Runtime

NAMESPACE = "fleet-system"
IMAGE = "ghcr.io/example/fleet:0.1.0"
UID = 10001
CONFIG_MAP = "fleet-providers"
CONFIG_DIR = "/etc/fleet/config"
CONFIG_PATH = CONFIG_DIR + "/providers.yaml"
BROKER_SECRET, BROKER_KEY = "fleet-broker", "url"
TMP_SIZE = "64Mi"
PROVIDER_LABEL = "fleet.crawl.example.com/provider"
QUEUE_ANNOTATION = "fleet.crawl.example.com/queue"
NODE_ANNOTATION = "fleet.crawl.example.com/worker-name"
CONFIG_HASH_ANNOTATION = "fleet.crawl.example.com/config-sha256"
# Directories a credential mount may not cover (or sit inside).
RESERVED_DIRS = ("/tmp", CONFIG_DIR, "/opt/fleet", "/usr", "/etc/ssl")


class RenderError(ValueError):
    """The config cannot be deployed as is; the message names the provider and field."""


def worker_name(provider: str) -> str:
    return f"fleet-worker-{provider}"


def credentials_secret(provider: str) -> str:
    return f"fleet-{provider}-credentials"


def queue_and_node(provider: str) -> tuple[str, str]:
    """The queue and node name template, read back from the one command line."""
    argv = commands.worker_argv(provider)
    return argv[argv.index("-Q") + 1], argv[argv.index("-n") + 1]


def labels(component: str, provider: str | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/component": component}
    if provider:
        out[PROVIDER_LABEL] = provider
    return out


# --- the shared envelope ----------------------------------------------------------


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def base_env() -> list[dict[str, Any]]:
    return [
        {"name": "FLEET_PROVIDERS_CONFIG", "value": CONFIG_PATH},
        {"name": "FLEET_BROKER_URL", "valueFrom": {"secretKeyRef": {"name": BROKER_SECRET, "key": BROKER_KEY}}},
        {"name": "FLEET_LOG_FORMAT", "value": "json"},
    ]


def base_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes = [
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
        {"name": "config", "configMap": {"name": CONFIG_MAP}},
    ]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    return volumes, mounts


def exec_probe(argv: list[str], period: int, timeout: int, failures: int, **extra: int) -> dict[str, Any]:
    return {"exec": {"command": argv}, "periodSeconds": period, "timeoutSeconds": timeout, "failureThreshold": failures, **extra}


# --- per provider ---------------------------------------------------------------


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def credential_volumes(pc: ProviderConfig, rt: Runtime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One optional Secret volume per directory of the provider's files, all
    from the provider's Secret, keyed by file name."""
    by_dir: dict[str, list[str]] = {}
    keys: dict[str, str] = {}
    for f in rt.files:
        where = f"providers[{pc.name}].{pc.type}: credential file {f!r}"
        if not posixpath.isabs(f) or posixpath.normpath(f) != f:
            raise RenderError(f"{where} must be an absolute, normalised path to be mounted in the worker")
        d, base = posixpath.split(f)
        if d.count("/") < 2 or any(_inside(d, r) or _inside(r, d) for r in RESERVED_DIRS):
            raise RenderError(
                f"{where}: its directory {d} would be hidden by the mount; use a directory of its own, e.g. /etc/fleet/{pc.name}"
            )
        if base in keys and keys[base] != f:
            raise RenderError(f"{where}: {keys[base]!r} has the same file name; the Secret keys them by name")
        keys[base] = f
        by_dir.setdefault(d, []).append(base)
    volumes, mounts = [], []
    for i, (d, names) in enumerate(sorted(by_dir.items())):
        vol = f"credentials-{i}"
        volumes.append({
            "name": vol,
            "secret": {
                "secretName": credentials_secret(pc.name),
                "optional": True,
                "defaultMode": 0o440,
                "items": [{"key": n, "path": n} for n in sorted(names)],
            },
        })
        mounts.append({"name": vol, "mountPath": d, "readOnly": True})
    return volumes, mounts


def service_account(pc: ProviderConfig, rt: Runtime, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": worker_name(pc.name), "namespace": namespace, "labels": labels("worker", pc.name)},
        "automountServiceAccountToken": rt.in_cluster,
    }


def rbac(pc: ProviderConfig, rt: Runtime, namespace: str) -> list[dict[str, Any]]:
    if not rt.cluster_rules:
        return []
    name = worker_name(pc.name)
    meta = {"name": name, "labels": labels("worker", pc.name)}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [dict(r) for r in rt.cluster_rules],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def deployment(pc: ProviderConfig, rt: Runtime, image: str, namespace: str, config_hash: str) -> dict[str, Any]:
    queue, node = queue_and_node(pc.name)
    volumes, mounts = base_volumes()
    cv, cm = credential_volumes(pc, rt)
    env = base_env() + [{"name": k, "value": v} for k, v in rt.env]
    live = ["fleet", "probe", "live", "-p", pc.name]
    container = {
        "name": "worker",
        "image": image,
        "command": ["fleet", "worker", "-p", pc.name],
        "env": env,
        # Ready: this worker reaches the broker. Alive: its heartbeat is
        # fresh whenever the broker answers. The backend never enters into it.
        "readinessProbe": exec_probe(["fleet", "probe", "ready"], 15, 5, 2),
        "livenessProbe": exec_probe(live, 30, 10, 3),
        "startupProbe": exec_probe(live, 5, 10, 36),
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": container_security(),
        "volumeMounts": mounts + cm,
    }
    sel = labels("worker", pc.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": worker_name(pc.name),
            "namespace": namespace,
            "labels": sel,
            "annotations": {QUEUE_ANNOTATION: queue, NODE_ANNOTATION: node},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": sel},
            "template": {
                "metadata": {"labels": dict(sel), "annotations": {CONFIG_HASH_ANNOTATION: config_hash}},
                "spec": {
                    "serviceAccountName": worker_name(pc.name),
                    "automountServiceAccountToken": rt.in_cluster,
                    "securityContext": pod_security(),
                    "terminationGracePeriodSeconds": 60,
                    "containers": [container],
                    "volumes": volumes + cv,
                },
            },
        },
    }


def config_map(text: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": namespace, "labels": labels("config")},
        "data": {"providers.yaml": text},
    }


def render(config: ProvidersConfig, text: str, image: str = IMAGE, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The ConfigMap, then per provider its ServiceAccount, RBAC and Deployment."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    out = [config_map(text, namespace)]
    for pc in config.providers:
        rt = pc.block.runtime() if isinstance(pc.block, Block) else Runtime()
        assert routing.provider_queue(pc.name) == queue_and_node(pc.name)[0]
        out.append(service_account(pc, rt, namespace))
        out.extend(rbac(pc, rt, namespace))
        out.append(deployment(pc, rt, image, namespace, digest))
    return out


class _Dumper(yaml.SafeDumper):
    """No anchors/aliases (kubectl reads them, people don't); multi-line
    strings (the ConfigMap's file) as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
