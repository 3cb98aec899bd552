"""Keeping request and response payloads out of botocore's debug logs.

At DEBUG botocore logs every request's parameters and prepared request
(endpoint: the UserData, i.e. the cloud-init, and headers such as
`X-Amz-Security-Token`), the canonical request it signs (auth: the session
token header again) and every response body (parsers). The filter below
replaces each argument of those records with its size: the message
templates (which operation, which step) stay, so the wire log is still
useful. A filter on a logger only sees records created on that logger, so
it goes on each one.
"""

from __future__ import annotations

import logging

SDK_LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.parsers", "botocore.httpsession", "botocore.awsrequest",
               "botocore.hooks", "botocore.retryhandler", "botocore.regions", "botocore.client")


class ArgsRedactor(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(f"<{len(str(a))} chars elided>" for a in args)
        return True


_REDACTOR = ArgsRedactor()


def install() -> None:
    """Idempotent: adding the same filter object twice is a no-op."""
    for name in SDK_LOGGERS:
        logging.getLogger(name).addFilter(_REDACTOR)
