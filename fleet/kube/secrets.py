"""One key of a Secret (a Proxy's cloudInit.secretRef), bounded, never logged.

`read_secret_key` answers the key's UTF-8 text or raises the tree's errors
(`fleet.kube`): SecretError (a missing Secret or key, an oversized or
undecodable value: the message names namespace, Secret and key, never the
value), ClusterAccessError (RBAC), ApiUnavailable (the rest). It is the one
request on the core API: its errors are translated here, with the Secret's
own words, and chained to nothing (`from None`) so no answer body travels.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from fleet.kube.connection import CONNECTION_ERRORS, REQUEST_TIMEOUT, Client, server_message
from fleet.kube.errors import ApiUnavailable, ClusterAccessError, SecretError

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

