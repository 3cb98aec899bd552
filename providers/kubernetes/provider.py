"""The kubernetes provider: each proxy is a Squid pod.

Ignores `cloud_init` and all of `placement` (a pod has no cloud-init); the
pod, its Squid config (only `allowedSources` may use it), its security
settings and its ownerReference are built by `pod.build_pod`. The client is
built lazily on first use, so missing credentials are a verdict of the first
check, not a crash of the worker.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from providers import base, marks
from providers.base import CreateRequest, Deadline, Instance, State
from providers.boundary import Boundary
from providers.kubernetes.check import MANAGED_SELECTOR, check_apiserver
from providers.kubernetes.client import in_cluster, load_configuration
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.errors import classify
from providers.kubernetes.placement import placement_problem
from providers.kubernetes.pod import build_pod

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class KubernetesProvider:
    def __init__(self, name: str, cfg: KubernetesConfig) -> None:
        self.name = name
        self.cfg = cfg
        self._lock = threading.Lock()
        self._api: client.ApiClient | None = None
        self.boundary = Boundary(provider=name, classify=classify)

    # -- plumbing ------------------------------------------------------------------

    def api_client(self) -> client.ApiClient:
        with self._lock:
            if self._api is None:
                cfg = load_configuration(self.cfg.kubeconfig, self.cfg.context)
                cfg.retries = 0  # one attempt per call: the deadline is the caller's, retries are the caller's
                self._api = client.ApiClient(cfg)
            return self._api

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client())

    def _call(self, op: str, pid: str, deadline: Deadline, fn: Any) -> Any:
        """Run fn(core, timeout) at the boundary: the request, reading the
        body and parsing it all happen inside fn, so a truncated or malformed
        answer is classified like an HTTP error."""
        return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda remaining: fn(self.core(), remaining))

    # -- Checker ---------------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[base.TargetStatus]:
        return check_apiserver(self, deadline)

    # -- Provider ----------------------------------------------------------------------

    def namespace(self, request: CreateRequest) -> str:
        """`namespace:` if set; in-cluster, the worker's own (where its Role
        grants create/get/delete); else the Proxy's."""
        if self.cfg.namespace:
            return self.cfg.namespace
        own = own_namespace() if self.cfg.uses_own_account and in_cluster() else None
        return own or request.namespace or "default"

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        ns = self.namespace(request)
        pid = f"{ns}/{request.name}"
        problem = placement_problem(self.cfg, request.placement) or marks.problem(request)
        if problem:
            raise base.wrap(base.Permanent, "create", self.name, pid, problem)
        pod = build_pod(request, self.cfg, ns)

        def create(core: client.CoreV1Api, timeout: float) -> None:
            try:
                core.create_namespaced_pod(ns, pod, _request_timeout=timeout)
            except ApiException as exc:
                if exc.status != 409:  # AlreadyExists: idempotent by name
                    raise

        self._call("create", pid, deadline, create)
        return pid

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        ns, name = self._parse("get", provider_id)
        return self._call(
            "get",
            provider_id,
            deadline,
            lambda core, t: _instance(
                provider_id, _json(core.read_namespaced_pod(name, ns, _request_timeout=t, _preload_content=False))
            ),
        )

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        ns, name = self._parse("delete", provider_id)

        def delete(core: client.CoreV1Api, timeout: float) -> None:
            try:
                core.delete_namespaced_pod(name, ns, _request_timeout=timeout)
            except ApiException as exc:
                if exc.status != 404:  # already gone
                    raise

        self._call("delete", provider_id, deadline, delete)

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        def list_pods(core: client.CoreV1Api, timeout: float) -> list[Instance]:
            raw = core.list_pod_for_all_namespaces(
                label_selector=MANAGED_SELECTOR, _request_timeout=timeout, _preload_content=False
            )
            pods = _json(raw).get("items") or []
            return [_instance(f"{p['metadata']['namespace']}/{p['metadata']['name']}", p) for p in pods]

        return self._call("list", "", deadline, list_pods)

    def _parse(self, op: str, provider_id: str) -> tuple[str, str]:
        ns, sep, name = provider_id.partition("/")
        if not sep or not ns or not name or "/" in name:
            raise base.wrap(base.Permanent, op, self.name, provider_id, "malformed id, want <namespace>/<name>")
        return ns, name


def own_namespace() -> str | None:
    """This pod's namespace: $POD_NAMESPACE (downward API), else its ServiceAccount's."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _json(resp: Any) -> dict[str, Any]:
    """The body as a JSON object; reading it may fail too (a truncated
    answer), so this runs inside `_call`. Anything but an object is a
    ValueError, classified like any unreadable answer."""
    data = json.loads(resp.data)
    if not isinstance(data, dict):
        raise ValueError(f"the API answered a JSON {type(data).__name__}, not an object")
    return data


def _instance(pid: str, pod: dict[str, Any]) -> Instance:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase", "")
    ip = status.get("podIP") or ""
    if phase == "Running" and ip:
        state = State.RUNNING
    elif phase in ("Pending", "Running", ""):
        state = State.PROVISIONING
    else:  # Succeeded, Failed, Unknown
        state = State.TERMINATED
    created = meta.get("creationTimestamp")
    try:
        created_at = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None
    except ValueError:
        created_at = None
    labels = meta.get("labels") or {}
    uid, installation = labels.get(base.LABEL_UID, ""), labels.get(base.LABEL_INSTALLATION, "")
    return Instance(pid, state, ip if state is State.RUNNING else "", uid, created_at, installation,
                    labels.get(base.LABEL_NAMESPACE, ""))


def new(name: str, cfg: KubernetesConfig) -> KubernetesProvider:
    return KubernetesProvider(name, cfg)
