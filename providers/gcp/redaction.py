"""Keeping request and response payloads out of the SDK's debug logs.

google-cloud-compute logs every REST request and response at DEBUG
(`httpRequest`/`httpResponse` extras with the full JSON payload) when its
loggers are enabled. An insert body and every instances.get answer carry the
`user-data` metadata, i.e. the cloud-init, which may hold secrets. The
filter below replaces each payload with its size; method, URL, headers
(the SDK's, not the Authorization header, which the session adds later) and
status stay, so the wire log is still useful.

A filter on a logger only sees records created on that very logger, so it is
installed on each transport and client module logger of the services used.
"""

from __future__ import annotations

import logging
from typing import Any

SDK_LOGGERS = (
    "google.cloud.compute_v1.services.instances.transports.rest",
    "google.cloud.compute_v1.services.instances.client",
    "google.cloud.compute_v1.services.zone_operations.transports.rest",
    "google.cloud.compute_v1.services.zone_operations.client",
)
_PAYLOAD_KEYS = ("httpRequest", "httpResponse")


class PayloadRedactor(logging.Filter):
    """Replaces `payload` in the SDK's structured extras by its size."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in _PAYLOAD_KEYS:
            value: Any = record.__dict__.get(key)
            if isinstance(value, dict) and value.get("payload") is not None:
                payload = value["payload"]
                size = len(payload) if isinstance(payload, str | bytes) else len(repr(payload))
                record.__dict__[key] = {**value, "payload": f"<{size} bytes elided>"}
        return True


_REDACTOR = PayloadRedactor()


def install() -> None:
    """Idempotent: adding the same filter object twice is a no-op."""
    for name in SDK_LOGGERS:
        logging.getLogger(name).addFilter(_REDACTOR)
