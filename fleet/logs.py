"""The one logging setup: key=value lines by default, JSON on request.

Structured fields ride in `extra={"fields": {...}}`. Nothing here knows about
secrets: callers never put credentials or cloud-init in a log record (tests
check it with a sentinel).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any


def kv(**fields: Any) -> dict[str, Any]:
    """`log.info("msg", extra=kv(provider=...))`."""
    return {"fields": fields}


def _quote(v: Any) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ' ="\n'):
        return json.dumps(s)
    return s


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        parts = [f"time={ts}", f"level={record.levelname.lower()}", f"logger={record.name}", f"msg={_quote(record.getMessage())}"]
        for k, v in (getattr(record, "fields", None) or {}).items():
            parts.append(f"{k}={_quote(v)}")
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


PER_TASK_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


def setup(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Third-party chatter stays at warning unless we debug.
    for noisy in ("urllib3", "kubernetes", "kombu", "amqp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Celery's line per task received and per task finished (issue 11): only when debugging.
    for per_task in PER_TASK_LOGGERS:
        logging.getLogger(per_task).setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
