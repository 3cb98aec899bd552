"""`fleet render -c providers.yaml`: every fleet process that reads the
providers file, generated from that file so the provider list has one
source and a change to it rolls every process that reads it.

It prints, for one installation (default: the namespace):

- the `fleet-providers` ConfigMap: the file, mounted by every process below,
  with any secret field (a block's `secret_fields`, e.g. kvm `vendorData`)
  moved out into a Secret `fleet-<provider>-secrets` mounted by that
  provider's worker only, and the field replaced by its `<field>File` path;
- the controller: ServiceAccount, a ClusterRole on ProviderHealth (a
  cluster-scoped kind) and its binding, and per namespace of
  `--proxy-namespaces` (default: the installation's namespace) a Role and
  RoleBinding on that namespace's Proxies, their status, `get` on its
  Secrets (a Proxy's cloudInit.secretRef) and its claim Lease
  (`fleet.proxies.claims`); with `*` those are ClusterRoles instead (the
  widest grant: every namespace's Secrets). Then the Deployment (told its
  namespaces in FLEET_PROXY_NAMESPACES) and the `fleet-controller-metrics`
  Service;
- beat: ServiceAccount (no token) and the Deployment;
- the prober: ServiceAccount (no token, no RBAC: it needs Redis only), the
  Deployment running `fleet prober` and the `fleet-prober` Service (:8081);
- per provider, a ServiceAccount, RBAC only when the provider talks to this
  cluster, and a worker Deployment running `fleet worker -p NAME` (which
  execs `commands.worker_argv`: queue `provider.<name>` from `fleet.celery.routing`,
  worker name `<name>@%h`). What a provider needs mounted or granted is declared once per
  type, by its config block's `runtime()` (providers/blocks.py); this module
  only turns that into volumes, environment and RBAC, and mounts a provider's
  credentials in its own worker and nowhere else.

Every pod template carries the ConfigMap's sha256, so `kubectl apply` of a
changed file rolls the controller, beat and every worker. RBAC objects are
named `fleet:<installation>:<role>` (':' cannot occur in a DNS label, so two
installations never share a name) and everything carries the installation
label. What does not read the providers file stays in deploy/ (kustomize):
the CRDs, the people's roles, Flower, the quickstart Redis. Both share the
envelope below: non-root, read-only root filesystem, a 64Mi /tmp, the broker
URL from the `fleet-broker` Secret.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Any

import yaml

from fleet.celery import routing
from fleet.cli import commands
from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies.claims import CLAIM_NAME, LEASE
from fleet.settings import ALL_NAMESPACES, OPTIONS, Settings, SettingsError, parse_bind_address
from providers import names
from providers.blocks import Block, Runtime

NAMESPACE = "fleet-system"
IMAGE = "ghcr.io/example/fleet:0.1.0"
UID = 10001
CONFIG_MAP = "fleet-providers"
CONFIG_DIR = "/etc/fleet/config"
CONFIG_PATH = CONFIG_DIR + "/providers.yaml"
SECRETS_DIR = "/etc/fleet/secrets"
BROKER_SECRET, BROKER_KEY = "fleet-broker", "url"
TMP_SIZE = "64Mi"
PROVIDER_LABEL = "fleet.crawl.example.com/provider"
INSTALLATION_LABEL = "fleet.crawl.example.com/installation"
QUEUE_ANNOTATION = "fleet.crawl.example.com/queue"
NODE_ANNOTATION = "fleet.crawl.example.com/worker-name"
CONFIG_HASH_ANNOTATION = "fleet.crawl.example.com/config-sha256"
CONTROLLER, BEAT = "fleet-controller", "fleet-beat"
PROBER, PROBER_PORT = "fleet-prober", 8081  # the Deployment, its ServiceAccount and its /metrics Service share the name
# The lease API (issue 14): Deployment, ServiceAccount and Service share the name; its token is key `token` of a
# Secret the operator creates (`kubectl create secret generic fleet-api-token --from-literal=token=...`).
API, API_PORT, API_REPLICAS, API_TOKEN_SECRET, API_TOKEN_KEY = "fleet-api", 8090, 2, "fleet-api-token", "token"
# `fleet gateway` (issue 23): the crawlers' forward proxy, its /metrics on a port of its own; the clients file is
# the Secret the operator creates (`kubectl create secret generic fleet-gateway-clients --from-file=clients.yaml`).
GATEWAY, GATEWAY_PORT, GATEWAY_METRICS_PORT, GATEWAY_REPLICAS = "fleet-gateway", 8888, 8083, 2
GATEWAY_CLIENTS_SECRET, GATEWAY_CLIENTS_KEY, GATEWAY_CLIENTS_DIR = "fleet-gateway-clients", "clients.yaml", "/etc/fleet/gateway"
# Its TLS listener, when `fleet render --gateway-tls-bind-address :PORT` asks for one: the certificate and key are the
# `kubernetes.io/tls` Secret the operator creates (`kubectl create secret tls fleet-gateway-tls --cert=... --key=...`).
GATEWAY_TLS_SECRET, GATEWAY_TLS_DIR, GATEWAY_TLS_CERT, GATEWAY_TLS_KEY = (
    "fleet-gateway-tls", "/etc/fleet/gateway-tls", "tls.crt", "tls.key")
# The names of the gateway's optional listeners' ports (container and Service), when `fleet render` is given
# --gateway-socks-bind-address or --gateway-tls-bind-address: deploy/network's `fleet-gateway` policy admits them by
# these names, so it admits nothing more until a rendering declares them.
GATEWAY_SOCKS_PORT_NAME, GATEWAY_TLS_PORT_NAME = "socks5", "proxy-tls"
BEAT_REPLICAS = 2  # one active (the Redis lock's holder), one standby
METRICS_SERVICE, METRICS_PORT = "fleet-controller-metrics", 8080
# Provider workers serve their provider-call series (requests_total,
# request_duration_seconds) here; off by default outside a cluster.
WORKER_METRICS_PORT = 9090
RBAC_API = "rbac.authorization.k8s.io"
# Directories a credential mount may not cover (or sit inside).
# Where the gateway and the prober find the credentials of bought proxies: one Secret mount per provider whose
# members they dial with credentials (Runtime.dial_files), at UPSTREAM_SECRETS_DIR/<provider>/.
UPSTREAM_SECRETS_DIR = "/etc/fleet/upstreams"
RESERVED_DIRS = ("/tmp", CONFIG_DIR, SECRETS_DIR, UPSTREAM_SECRETS_DIR, "/opt/fleet", "/usr", "/etc/ssl")

# The controller's rights on fleet's own kinds. ProviderHealth (cluster-
# scoped, so a ClusterRole whatever the Proxy scope): uncached get, create
# when missing, list (with the managed-by label) and delete at start-up
# cleanup, status merge-patch; never watched.
CONTROLLER_RULES = (
    {"apiGroups": ["crawl.example.com"], "resources": ["providerhealths"], "verbs": ["create", "delete", "get", "list"]},
    {"apiGroups": ["crawl.example.com"], "resources": ["providerhealths/status"], "verbs": ["get", "patch"]},
)
# Proxy: list and watch in each namespace of the scope (fleet.kube.watch),
# get, patch and update of the object for its finalizer, and of its status;
# create and delete for a ProxyPool's members (fleet.pools.cluster: RBAC
# cannot tell a member from a Proxy people made, so the grant is the
# namespace's). ProxyPool: list, get, patch (spec.replicas, the path the
# scale subresource names, when autoscaling moves it) and its status; the
# scale subresource is for people and HPA-style tools, not fleet. Its claim
# on the namespace (fleet.proxies.claims): create the Lease, get and patch
# only that one by name (RBAC cannot name the object of a create).
CONTROLLER_PROXY_RULES = (
    {"apiGroups": ["crawl.example.com"], "resources": ["proxies"],
     "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": ["crawl.example.com"], "resources": ["proxies/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["crawl.example.com"], "resources": ["proxypools"], "verbs": ["get", "list", "patch", "watch"]},
    {"apiGroups": ["crawl.example.com"], "resources": ["proxypools/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [LEASE.group], "resources": [LEASE.plural], "verbs": ["create"]},
    {"apiGroups": [LEASE.group], "resources": [LEASE.plural], "resourceNames": [CLAIM_NAME], "verbs": ["get", "patch"]},
)
# With `*` the controller also lists every namespace's claim at start, to
# refuse when another installation serves one.
CONTROLLER_ALL_NAMESPACES_RULES = ({"apiGroups": [LEASE.group], "resources": [LEASE.plural], "verbs": ["list"]},)
# A Proxy's cloudInit.secretRef names a Secret in the Proxy's own namespace,
# which the controller reads (`fleet.kube.Writer.read_secret_key`) when it
# creates the instance. Only `get`: without list or watch it can read a
# Secret only by a name some Proxy gives, never enumerate them, and it never
# writes one. In the scope's namespaces only (the same Role as the Proxy
# rules); a cluster-wide ClusterRole `fleet:<installation>:controller:secrets`
# only with `--proxy-namespaces '*'`.
CONTROLLER_SECRET_RULES = ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},)


class RenderError(ValueError):
    """The config cannot be deployed as is; the message names the provider and field."""


@dataclass(frozen=True)
class Target:
    """Where and as what the objects are rendered."""

    namespace: str = NAMESPACE
    installation: str = NAMESPACE
    image: str = IMAGE
    config_hash: str = ""
    proxy_namespaces: tuple[str, ...] = (NAMESPACE,)  # whose Proxies the controller serves; ("*",): every namespace
    prober_env: tuple[tuple[str, str], ...] = ()  # the prober's settings given to `fleet render` (FLEET_PROBE_TARGET, ...)
    gateway_socks_port: int = 0  # the gateway's SOCKS5 listener (--gateway-socks-bind-address given to `fleet render`); 0: none
    gateway_tls_port: int = 0  # the gateway's TLS listener (--gateway-tls-bind-address given to `fleet render`); 0: none

    @property
    def every_namespace(self) -> bool:
        return self.proxy_namespaces == (ALL_NAMESPACES,)


def worker_name(provider: str) -> str:
    return f"fleet-worker-{provider}"


def credentials_secret(provider: str) -> str:
    return f"fleet-{provider}-credentials"


def secrets_secret(provider: str) -> str:
    """The Secret `fleet render` writes: the provider's secret config fields."""
    return f"fleet-{provider}-secrets"


def rbac_name(installation: str, *role: str) -> str:
    """`fleet:<installation>:<role...>`, for Roles, ClusterRoles and their bindings."""
    return ":".join(("fleet", installation, *role))


def queue_and_node(provider: str) -> tuple[str, str]:
    """The provider's queue (`fleet.celery.routing`) and worker name template
    (`commands.worker_node`), the same two `commands.worker_argv` runs with."""
    return routing.provider_queue(provider), commands.worker_node(provider)


def selector(component: str, provider: str | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/component": component}
    if provider:
        out[PROVIDER_LABEL] = provider
    return out


def labels(component: str, provider: str | None = None, installation: str | None = None) -> dict[str, str]:
    """The selector labels, plus the installation (kept out of selectors, which are immutable)."""
    out = selector(component, provider)
    if installation:
        out[INSTALLATION_LABEL] = installation
    return out


def _meta(name: str, t: Target, component: str, provider: str | None = None, namespace: str | None = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace or t.namespace
    meta["labels"] = labels(component, provider, t.installation)
    return meta


# --- the shared envelope ----------------------------------------------------------


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def base_env(installation: str | None = None) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "FLEET_PROVIDERS_CONFIG", "value": CONFIG_PATH},
        {"name": "FLEET_BROKER_URL", "valueFrom": {"secretKeyRef": {"name": BROKER_SECRET, "key": BROKER_KEY}}},
        {"name": "FLEET_LOG_FORMAT", "value": "json"},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    if installation:
        env.append({"name": "FLEET_INSTALLATION", "value": installation})
    return env


def base_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
        {"name": "config", "configMap": {"name": CONFIG_MAP}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    return volumes, mounts


def exec_probe(argv: list[str], period: int, timeout: int, failures: int, **extra: int) -> dict[str, Any]:
    return {"exec": {"command": argv}, "periodSeconds": period, "timeoutSeconds": timeout, "failureThreshold": failures, **extra}


def http_probe(path: str, port: str, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "timeoutSeconds": timeout, "failureThreshold": failures}


def service_account(name: str, t: Target, component: str, token: bool, provider: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, t, component, provider),
        "automountServiceAccountToken": token,
    }


def binding_pair(
    kind: str, name: str, rules: tuple[dict[str, Any], ...], account: str, t: Target, component: str,
    provider: str | None = None, namespace: str | None = None,
) -> list[dict[str, Any]]:
    """A Role/ClusterRole with `rules` and its binding to `account` (in t.namespace)."""
    ns = namespace if kind == "Role" else None
    return [
        {
            "apiVersion": f"{RBAC_API}/v1",
            "kind": kind,
            "metadata": _meta(name, t, component, provider, ns),
            "rules": [dict(r) for r in rules],
        },
        {
            "apiVersion": f"{RBAC_API}/v1",
            "kind": kind + "Binding",
            "metadata": _meta(name, t, component, provider, ns),
            "roleRef": {"apiGroup": RBAC_API, "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": t.namespace}],
        },
    ]


def deployment(
    name: str, t: Target, component: str, pod_spec: dict[str, Any], provider: str | None = None,
    annotations: dict[str, str] | None = None, strategy: dict[str, Any] | None = None, replicas: int = 1,
) -> dict[str, Any]:
    """A Deployment (one replica unless told) whose pod template carries the config hash."""
    meta = _meta(name, t, component, provider)
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"replicas": replicas}
    if strategy:
        spec["strategy"] = strategy
    spec["selector"] = {"matchLabels": selector(component, provider)}
    spec["template"] = {
        "metadata": {"labels": labels(component, provider, t.installation), "annotations": {CONFIG_HASH_ANNOTATION: t.config_hash}},
        "spec": {"securityContext": pod_security(), **pod_spec},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


# --- controller and beat ------------------------------------------------------------


def controller(t: Target) -> list[dict[str, Any]]:
    """Consumes fleet.controller, writes ProviderHealth, serves /metrics on
    :8080. Replicas share Redis safely (compare-and-set). Its probes are
    HTTP on the metrics port (fleet/serving.py), not `fleet probe`: an
    exec'd Python would count against the seed's 128Mi. Ready while Redis
    answers PING; alive while the process serves, so a Redis outage never
    restarts it. Tune checks with FLEET_PROVIDER_CHECK_INTERVAL and
    FLEET_PROVIDER_CHECK_TIMEOUT here and in beat (the overdue sweep uses them)."""
    volumes, mounts = base_volumes()
    container = {
        "name": "controller",
        "image": t.image,
        "command": ["fleet", "controller"],
        "env": base_env(t.installation) + [{"name": "FLEET_METRICS_BIND_ADDRESS", "value": f":{METRICS_PORT}"},
                                           {"name": "FLEET_PROXY_NAMESPACES", "value": ",".join(t.proxy_namespaces)}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": http_probe("/readyz", "metrics", 15, 5, 2),
        "livenessProbe": http_probe("/livez", "metrics", 30, 5, 3),
        "startupProbe": http_probe("/livez", "metrics", 5, 5, 60),
        "resources": {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    pod_spec = {
        "serviceAccountName": CONTROLLER,
        "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": volumes,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(METRICS_SERVICE, t, "controller"),
        "spec": {"selector": selector("controller"), "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]},
    }
    return [
        service_account(CONTROLLER, t, "controller", token=True),
        *controller_rbac(t),
        deployment(CONTROLLER, t, "controller", pod_spec),
        service,
    ]


def controller_rbac(t: Target) -> list[dict[str, Any]]:
    """ProviderHealth cluster-wide; Proxies, their Secrets and claims per
    namespace of the scope (Roles), or everywhere with `*` (ClusterRoles)."""
    name = rbac_name(t.installation, "controller")
    if t.every_namespace:
        return [
            *binding_pair("ClusterRole", name, CONTROLLER_RULES + CONTROLLER_PROXY_RULES + CONTROLLER_ALL_NAMESPACES_RULES,
                          CONTROLLER, t, "controller"),
            *binding_pair("ClusterRole", rbac_name(t.installation, "controller", "secrets"), CONTROLLER_SECRET_RULES,
                          CONTROLLER, t, "controller"),
        ]
    out = binding_pair("ClusterRole", name, CONTROLLER_RULES, CONTROLLER, t, "controller")
    for ns in t.proxy_namespaces:
        out += binding_pair("Role", name, CONTROLLER_PROXY_RULES + CONTROLLER_SECRET_RULES, CONTROLLER, t, "controller",
                            namespace=ns)
    return out


def beat(t: Target) -> list[dict[str, Any]]:
    """Two replicas, one active: only the holder of a Redis lock sends
    (fleet.celery.beat), the other takes over within the lock's TTL, so a
    rolling update is safe (a stopping beat releases the lock). Its schedule is built from the
    file at start; the config hash restarts it when the file changes. No
    Kubernetes rights, no token. Ready while the broker answers; no liveness
    probe (no heartbeat to check; if it exits the container restarts)."""
    volumes, mounts = base_volumes()
    container = {
        "name": "beat",
        "image": t.image,
        "command": ["fleet", "beat"],
        "env": base_env(t.installation),
        "readinessProbe": exec_probe(["fleet", "probe", "ready"], 15, 5, 2),
        "resources": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}},
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    pod_spec = {"serviceAccountName": BEAT, "automountServiceAccountToken": False, "containers": [container], "volumes": volumes}
    return [
        service_account(BEAT, t, "beat", token=False),
        deployment(BEAT, t, "beat", pod_spec, strategy={"type": "RollingUpdate"}, replicas=BEAT_REPLICAS),
    ]


def prober(t: Target) -> list[dict[str, Any]]:
    """`fleet prober` (issue 13): probes every Running proxy through a real
    CONNECT and writes verdicts to Redis; it needs Redis only: no
    Kubernetes rights and no ServiceAccount token (the controller writes the
    Healthy condition). Idle until FLEET_PROBE_TARGET is set: the prober
    settings given to `fleet render` (`--probe-target`, `--probe-interval`, ...)
    are written into its environment (`prober_env`). One
    replica; scale with `kubectl scale deploy/fleet-prober --replicas=N`:
    replicas split the proxies through Redis membership, and a dead one's
    share moves within two probe intervals. /metrics, /readyz (Redis
    answers) and /livez on :8081, behind the `fleet-prober` Service. It reads
    no providers file, so a change to it does not roll the prober."""
    return _redis_only(
        t, PROBER, "prober", ["fleet", "prober"], "metrics", PROBER_PORT,
        [{"name": "FLEET_PROBER_METRICS_BIND_ADDRESS", "value": f":{PROBER_PORT}"},
         *({"name": k, "value": v} for k, v in t.prober_env)],
        {"readinessProbe": http_probe("/readyz", "metrics", 15, 5, 2),
         "livenessProbe": http_probe("/livez", "metrics", 30, 5, 3),
         "startupProbe": http_probe("/livez", "metrics", 5, 5, 60)},
        {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}},
    )


def api(t: Target) -> list[dict[str, Any]]:
    """`fleet api` (issue 14): the discovery and lease API on :8090 behind the
    `fleet-api` Service. Two replicas (they share every lease through Redis).
    The bearer token comes from the Secret `fleet-api-token` (key `token`),
    not optional: without it the pod does not start, as `fleet api` refuses
    to run without a token. Needs Redis only: no Kubernetes rights, no
    ServiceAccount token, no providers file. Ready while /healthz answers 200
    (Redis reachable); live while the port accepts connections."""
    return _redis_only(
        t, API, "api", ["fleet", "api"], "http", API_PORT,
        [{"name": "FLEET_API_BIND_ADDRESS", "value": f":{API_PORT}"},
         {"name": "FLEET_API_TOKEN", "valueFrom": {"secretKeyRef": {"name": API_TOKEN_SECRET, "key": API_TOKEN_KEY}}}],
        {"readinessProbe": http_probe("/healthz", "http", 10, 5, 2),
         "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3}},
        {"requests": {"cpu": "250m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
        strategy={"type": "RollingUpdate"}, replicas=API_REPLICAS,
    )


def gateway(t: Target) -> list[dict[str, Any]]:
    """`fleet gateway` (issue 23): the forward proxy on :8888 (port `proxy`) and /metrics, /readyz, /livez on
    :8083 (port `metrics`) behind the `fleet-gateway` Service; two replicas (they share every lease through
    Redis). The clients file is the Secret `fleet-gateway-clients` (key `clients.yaml`) mounted read-only; the
    gateway re-reads it when the kubelet updates the mount. Redis only: no Kubernetes rights. With a SOCKS5 port,
    the SOCKS5 listener there (port `socks5`). With a TLS port, the same proxy over TLS there too (port
    `proxy-tls`): the Secret `fleet-gateway-tls` (tls.crt, tls.key) mounted read-only with defaultMode 0400 (the
    kubelet adds group read for the pod's fsGroup, the gateway's own group), re-read when the kubelet updates it.
    Each listener's port is on the pods and the Service only when asked for."""
    objs = _redis_only(
        t, GATEWAY, "gateway", ["fleet", "gateway"], "metrics", GATEWAY_METRICS_PORT,
        [{"name": "FLEET_GATEWAY_BIND_ADDRESS", "value": f":{GATEWAY_PORT}"},
         {"name": "FLEET_GATEWAY_METRICS_BIND_ADDRESS", "value": f":{GATEWAY_METRICS_PORT}"},
         {"name": "FLEET_GATEWAY_CLIENTS_FILE", "value": f"{GATEWAY_CLIENTS_DIR}/{GATEWAY_CLIENTS_KEY}"}],
        {"readinessProbe": http_probe("/readyz", "metrics", 10, 5, 2),
         "livenessProbe": {"tcpSocket": {"port": "proxy"}, "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3}},
        {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        strategy={"type": "RollingUpdate"}, replicas=GATEWAY_REPLICAS,
    )
    listeners = [("proxy", GATEWAY_PORT)] + [(name, port) for name, port in (
        (GATEWAY_SOCKS_PORT_NAME, t.gateway_socks_port), (GATEWAY_TLS_PORT_NAME, t.gateway_tls_port)) if port]
    for obj in objs:
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            container["ports"][:0] = [{"name": name, "containerPort": port} for name, port in listeners]
            container["volumeMounts"].append({"name": "clients", "mountPath": GATEWAY_CLIENTS_DIR, "readOnly": True})
            pod["volumes"].append({"name": "clients", "secret": {"secretName": GATEWAY_CLIENTS_SECRET,
                                                                "items": [{"key": GATEWAY_CLIENTS_KEY,
                                                                           "path": GATEWAY_CLIENTS_KEY}]}})
            if t.gateway_socks_port:
                container["env"].append({"name": "FLEET_GATEWAY_SOCKS_BIND_ADDRESS", "value": f":{t.gateway_socks_port}"})
            if t.gateway_tls_port:
                container["env"] += [
                    {"name": "FLEET_GATEWAY_TLS_BIND_ADDRESS", "value": f":{t.gateway_tls_port}"},
                    {"name": "FLEET_GATEWAY_TLS_CERT_FILE", "value": f"{GATEWAY_TLS_DIR}/{GATEWAY_TLS_CERT}"},
                    {"name": "FLEET_GATEWAY_TLS_KEY_FILE", "value": f"{GATEWAY_TLS_DIR}/{GATEWAY_TLS_KEY}"}]
                container["volumeMounts"].append({"name": "tls", "mountPath": GATEWAY_TLS_DIR, "readOnly": True})
                pod["volumes"].append({"name": "tls", "secret": {
                    "secretName": GATEWAY_TLS_SECRET, "defaultMode": 0o400,
                    "items": [{"key": k, "path": k} for k in (GATEWAY_TLS_CERT, GATEWAY_TLS_KEY)]}})
        elif obj["kind"] == "Service":
            obj["spec"]["ports"][:0] = [{"name": name, "port": port, "targetPort": name} for name, port in listeners]
    return objs


def _redis_only(t: Target, name: str, component: str, command: list[str], port_name: str, port: int,
                env: list[dict[str, Any]], probes: dict[str, Any], resources: dict[str, Any],
                **deploy: Any) -> list[dict[str, Any]]:
    """A role that needs Redis only (the prober, the API): no Kubernetes rights,
    no ServiceAccount token, no providers file (the variable set empty, no
    ConfigMap, no config hash to roll it), one port behind a Service."""
    container = {
        "name": component,
        "image": t.image,
        "command": command,
        "env": [{"name": "FLEET_PROVIDERS_CONFIG", "value": ""}]
        + [e for e in base_env(t.installation) if e["name"] != "FLEET_PROVIDERS_CONFIG"] + env,
        "ports": [{"name": port_name, "containerPort": port}],
        **probes,
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}],
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, t, component),
        "spec": {"selector": selector(component), "ports": [{"name": port_name, "port": port, "targetPort": port_name}]},
    }
    d = deployment(name, t, component, pod_spec, **deploy)
    del d["spec"]["template"]["metadata"]["annotations"]
    return [service_account(name, t, component, token=False), d, service]


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
    for i, (d, files) in enumerate(sorted(by_dir.items())):
        vol = f"credentials-{i}"
        volumes.append({
            "name": vol,
            "secret": {
                "secretName": credentials_secret(pc.name),
                "optional": True,
                "defaultMode": 0o440,
                "items": [{"key": n, "path": n} for n in sorted(files)],
            },
        })
        mounts.append({"name": vol, "mountPath": d, "readOnly": True})
    return volumes, mounts


def upstream_volumes(config: ProvidersConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The gateway's and the prober's mounts of the providers whose members they dial with credentials
    (`Runtime.dial_files`): each one's credentials Secret at UPSTREAM_SECRETS_DIR/<provider>/, its keys renamed to
    what fleet.credentials reads. None for other providers: the gateway never holds a worker's keys."""
    volumes, mounts = [], []
    for pc in config.providers:
        rt = pc.block.runtime() if isinstance(pc.block, Block) else Runtime()
        if not rt.dial_files:
            continue
        vol = f"upstream-{pc.name}"[:63]
        volumes.append({"name": vol, "secret": {
            "secretName": credentials_secret(pc.name), "optional": True, "defaultMode": 0o440,
            "items": [{"key": posixpath.basename(path), "path": name} for name, path in rt.dial_files]}})
        mounts.append({"name": vol, "mountPath": f"{UPSTREAM_SECRETS_DIR}/{pc.name}", "readOnly": True})
    return volumes, mounts


def secret_volume(provider: str, keys: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The provider's moved secret fields, at SECRETS_DIR/<field>. Not
    optional: the config points at these files and the Secret is rendered
    with it."""
    if not keys:
        return [], []
    volume = {
        "name": "secrets",
        "secret": {"secretName": secrets_secret(provider), "defaultMode": 0o440, "items": [{"key": k, "path": k} for k in sorted(keys)]},
    }
    return [volume], [{"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}]


def worker_rbac(pc: ProviderConfig, rt: Runtime, t: Target) -> list[dict[str, Any]]:
    """A ClusterRole for what must span namespaces (the pod list), a Role in
    the proxies' namespace for the rest; nothing when the provider does not
    talk to this cluster."""
    name, account = rbac_name(t.installation, "worker", pc.name), worker_name(pc.name)
    out: list[dict[str, Any]] = []
    if rt.cluster_rules:
        out += binding_pair("ClusterRole", name, rt.cluster_rules, account, t, "worker", pc.name)
    if rt.namespaced_rules:
        out += binding_pair("Role", name, rt.namespaced_rules, account, t, "worker", pc.name, rt.rules_namespace or t.namespace)
    return out


def worker(pc: ProviderConfig, rt: Runtime, t: Target, secret_keys: list[str]) -> dict[str, Any]:
    queue, node = queue_and_node(pc.name)
    volumes, mounts = base_volumes()
    cv, cm = credential_volumes(pc, rt)
    sv, sm = secret_volume(pc.name, secret_keys)
    env = base_env(t.installation) + [{"name": k, "value": v} for k, v in rt.env]
    env.append({"name": "FLEET_WORKER_METRICS_BIND_ADDRESS", "value": f":{WORKER_METRICS_PORT}"})
    live = ["fleet", "probe", "live", "-p", pc.name]
    container = {
        "name": "worker",
        "image": t.image,
        "command": ["fleet", "worker", "-p", pc.name],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": WORKER_METRICS_PORT}],
        # Ready: this worker reaches the broker. Alive: its heartbeat is
        # fresh whenever the broker answers. The backend never enters into it.
        "readinessProbe": exec_probe(["fleet", "probe", "ready"], 15, 5, 2),
        "livenessProbe": exec_probe(live, 30, 10, 3),
        "startupProbe": exec_probe(live, 5, 10, 36),
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": container_security(),
        "volumeMounts": mounts + cm + sm,
    }
    pod_spec = {
        "serviceAccountName": worker_name(pc.name),
        "automountServiceAccountToken": rt.in_cluster,
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": volumes + cv + sv,
    }
    return deployment(
        worker_name(pc.name), t, "worker", pod_spec, pc.name, annotations={QUEUE_ANNOTATION: queue, NODE_ANNOTATION: node}
    )


# --- the providers file -------------------------------------------------------------


def split_secrets(config: ProvidersConfig, text: str) -> tuple[str, dict[str, dict[str, str]]]:
    """The ConfigMap's copy of the file, and per provider the secret field
    values moved out of it. Without secret values the copy is the file as
    written; otherwise it is re-serialised (comments are lost) with each
    moved field `F` replaced by `FFile: SECRETS_DIR/F`."""
    moved: dict[str, dict[str, str]] = {}
    for pc in config.providers:
        for field in getattr(type(pc.block), "secret_fields", ()):
            value = getattr(pc.block, field, None)
            if not value:
                continue
            file_field = Block.secret_file_field(field)
            if file_field not in type(pc.block).model_fields:
                raise RenderError(f"providers[{pc.name}].{pc.type}.{field} is secret but has no {file_field} to be mounted from")
            moved.setdefault(pc.name, {})[field] = str(value)
    if not moved:
        return text, {}
    doc = yaml.safe_load(text)
    for entry in doc["providers"]:
        block = entry[entry["type"]]
        for field in moved.get(entry["name"], {}):
            del block[field]
            block[Block.secret_file_field(field)] = posixpath.join(SECRETS_DIR, field)
    header = (
        "# Written by `fleet render`: secret fields are in the Secrets fleet-<provider>-secrets,\n"
        f"# mounted at {SECRETS_DIR} in that provider's worker only.\n"
    )
    return header + to_yaml([doc]), moved


def config_map(text: str, t: Target) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(CONFIG_MAP, t, "config"), "data": {"providers.yaml": text}}


def secret(provider: str, values: dict[str, str], t: Target) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(secrets_secret(provider), t, "worker", provider),
        "type": "Opaque",
        "stringData": dict(values),
    }


def prober_env(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The `prober` group's settings that differ from the defaults, as the
    variables that set them (the port of /metrics is the Service's, set apart)."""
    given = settings.to_env()
    defaults = Settings().to_env()
    return tuple((o.env, given[o.env]) for o in OPTIONS
                 if o.group == "prober" and o.flag != "prober-metrics-bind-address" and given[o.env] != defaults[o.env])


def gateway_listener_ports(settings: Settings) -> tuple[int, int]:
    """The ports of --gateway-socks-bind-address and --gateway-tls-bind-address given to `fleet render` (their
    host is the pod's: any), 0 for one that is off; the TLS certificate files are the mounted Secret's, whatever
    the flags say."""
    taken = {GATEWAY_PORT: "the gateway's proxy port", GATEWAY_METRICS_PORT: "the gateway's metrics port"}
    ports = []
    for address, flag in ((settings.gateway_socks_bind_address, "--gateway-socks-bind-address"),
                          (settings.gateway_tls_bind_address, "--gateway-tls-bind-address")):
        try:
            bind = parse_bind_address(address, flag)
        except SettingsError as exc:
            raise RenderError(str(exc)) from None
        port = bind[1] if bind else 0
        if port in taken:
            raise RenderError(f"{flag}: port {port} is {taken[port]}")
        if port:
            taken[port] = f"the port of {flag}"
        ports.append(port)
    return ports[0], ports[1]


def render(
    config: ProvidersConfig, text: str, image: str = IMAGE, namespace: str = NAMESPACE, installation: str | None = None,
    proxy_namespaces: tuple[str, ...] | None = None, settings: Settings | None = None,
) -> list[dict[str, Any]]:
    """The ConfigMap, the controller, beat, the prober, then per provider its
    ServiceAccount, secrets, RBAC and worker. `installation` defaults to
    the namespace, `proxy_namespaces` (as `fleet.settings.parse_namespaces`
    reads them) to that namespace; the prober's settings that `settings` sets
    otherwise than the defaults go into its environment (`prober_env`), and --gateway-socks-bind-address and
    --gateway-tls-bind-address add the gateway's SOCKS5 and TLS listeners (`gateway_listener_ports`)."""
    for what, value in (("namespace", namespace), ("installation", installation or namespace)):
        if not names.is_label(value):
            raise RenderError(f"--{what} must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63), got {value!r}")
    scope = proxy_namespaces or (namespace,)
    for ns in scope:
        if ns != ALL_NAMESPACES and not names.is_label(ns):
            raise RenderError(f"--proxy-namespaces: {ns!r} is not a namespace name (a DNS-1123 label)")
    copy, moved = split_secrets(config, text)
    socks_port, tls_port = gateway_listener_ports(settings) if settings else (0, 0)
    t = Target(namespace, installation or namespace, image, hashlib.sha256(copy.encode()).hexdigest(), scope,
               prober_env(settings) if settings else (), socks_port, tls_port)
    out = [config_map(copy, t), *controller(t), *beat(t), *prober(t), *api(t), *gateway(t)]
    dialing = upstream_volumes(config)
    for obj in out:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] in (GATEWAY, PROBER) and dialing[0]:
            pod = obj["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            pod["volumes"] += dialing[0]
            container["volumeMounts"] += dialing[1]
            var = "FLEET_GATEWAY_UPSTREAM_SECRETS_DIR" if obj["metadata"]["name"] == GATEWAY else "FLEET_PROBER_UPSTREAM_SECRETS_DIR"
            container["env"] = [e for e in container["env"] if e["name"] != var] + [{"name": var, "value": UPSTREAM_SECRETS_DIR}]
    for pc in config.providers:
        rt = pc.block.runtime() if isinstance(pc.block, Block) else Runtime()
        out.append(service_account(worker_name(pc.name), t, "worker", rt.in_cluster, pc.name))
        if pc.name in moved:
            out.append(secret(pc.name, moved[pc.name], t))
        out.extend(worker_rbac(pc, rt, t))
        out.append(worker(pc, rt, t, sorted(moved.get(pc.name, {}))))
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
