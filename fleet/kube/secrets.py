"""Secrets: one key of one (a Proxy's cloudInit.secretRef), bounded, never
logged; and the install's own, created when absent.

`create_secret` (`fleet secrets ensure`) creates a Secret unless one of its
name exists, and never reads or replaces one.

`read_secret_key` answers the key's UTF-8 text or raises the tree's errors
(`fleet.kube`): SecretError (a missing Secret or key, an oversized or
undecodable value: the message names namespace, Secret and key, never the
value), ClusterAccessError (RBAC), ApiUnavailable (the rest). These are the
requests on the core API: their errors are translated here, with the
Secret's own words, and chained to nothing (`from None`) so no answer body
(nor the body sent) travels.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleet.kube.connection import CONNECTION_ERRORS, REQUEST_TIMEOUT, Client, server_message
from fleet.kube.errors import ApiUnavailable, ClusterAccessError, Rejected, SecretError

MAX_SECRET_VALUE = 64 * 1024  # bytes of one Secret key read_secret_key accepts (decoded)
SECRETS_ROLE = ("the Role fleet:<installation>:controller that `fleet render` writes in each namespace of "
                "--proxy-namespaces (with '*': the ClusterRole fleet:<installation>:controller:secrets)")


class Secrets(Client):
    """`Writer`'s Secret reads."""

    def read_secret_key(self, namespace: str, name: str, key: str) -> str:
        """The UTF-8 text under `key` of Secret `namespace/name` (a Proxy's
        cloudInit.secretRef), at most MAX_SECRET_VALUE bytes. A missing Secret
        or key, an oversized or undecodable value: SecretError naming
        namespace, name and key; never the value, which is not logged."""
        where = f"Secret {namespace}/{name}"
        resp: Any  # with _preload_content=False: the urllib3 response, read here (no model, no copies)
        try:
            resp = self.core.read_namespaced_secret(name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            raw = resp.data
        except ApiException as exc:
            said, status = server_message(exc), exc.status or 0
            if status == 404:
                raise SecretError(f"{where} not found (key {key!r} wanted)") from None
            if status in (401, 403):
                raise ClusterAccessError(
                    f"cannot get {where}: {'forbidden' if status == 403 else 'credentials rejected'} ({status}). The "
                    f"controller's ServiceAccount needs verb 'get' on resource 'secrets' in API group '' in namespace "
                    f"{namespace!r} ({SECRETS_ROLE}) (API server: {said})",
                    "get", "secrets", status) from None
            raise ApiUnavailable(f"get {where}: the API server answered ({status})") from None
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"get {where}: {exc}") from None
        try:
            data = json.loads(raw).get("data") or {}
        except (ValueError, AttributeError):
            raise ApiUnavailable(f"get {where}: the answer is not a Secret") from None
        encoded = data.get(key) if isinstance(data, dict) else None
        if encoded is None:
            keys = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else ""
            raise SecretError(f"{where} has no key {key!r} (keys: {keys or 'none'})")
        if not isinstance(encoded, str) or len(encoded) > 4 * (MAX_SECRET_VALUE // 3 + 1):
            raise SecretError(f"{where} key {key!r}: larger than {MAX_SECRET_VALUE} bytes")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SecretError(f"{where} key {key!r}: not base64 (as the API server sends it)") from None
        if len(value) > MAX_SECRET_VALUE:
            raise SecretError(f"{where} key {key!r}: larger than {MAX_SECRET_VALUE} bytes")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError(f"{where} key {key!r}: not UTF-8 text") from None



def create_secret(api_client: Any, secret: dict[str, Any]) -> bool:
    """Create `secret` (a v1 Secret, with its namespace) unless one of that
    name exists: True when created, False when it was there (409; it is
    left as it is, unread). Needs only `create` on secrets. Raises
    ClusterAccessError (RBAC), ApiUnavailable or Rejected; no message holds
    a value of the Secret or the server's answer about it."""
    namespace, name = secret["metadata"]["namespace"], secret["metadata"]["name"]
    where = f"Secret {namespace}/{name}"
    try:
        body: Any = secret  # the SDK sends a plain dict as it is (no model, so no copy of the values in its types)
        # Not preloaded: the answer (the Secret, values included) is never decoded, nor logged by the SDK at debug.
        resp: Any = client.CoreV1Api(api_client).create_namespaced_secret(namespace, body, _preload_content=False,
                                                                         _request_timeout=REQUEST_TIMEOUT)
        resp.drain_conn()
        resp.release_conn()
    except ApiException as exc:
        status = exc.status or 0
        if status == 409:
            return False
        if status in (401, 403):
            raise ClusterAccessError(
                f"cannot create {where}: {'forbidden' if status == 403 else 'credentials rejected'} ({status}); the "
                f"ServiceAccount needs verb 'create' on resource 'secrets' in namespace {namespace!r} (the Role "
                "fleet-secrets of deploy/secrets)", "create", "secrets", status) from None
        if status in (400, 404, 422):
            raise Rejected(f"create {where}: the API server refused it ({status})") from None
        raise ApiUnavailable(f"create {where}: the API server answered ({status})") from None
    except CONNECTION_ERRORS as exc:
        raise ApiUnavailable(f"create {where}: {type(exc).__name__}") from None
    return True
