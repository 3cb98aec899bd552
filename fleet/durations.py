"""Durations as users write them (`15s`, `1m`, `1m30s`, `500ms`, `0`) and as
the seed's messages print them (Go's `1m0s`).

Parsing is strict and bounded: ASCII digits only (Python's `\\d` and
`float()` also take Arabic-Indic and other Unicode digits), at most
`MAX_TEXT` characters, and a value of at most `MAX_DURATION` (24h) either
way, so no interval or timeout can overflow a datetime or a timer later.

Times as the Kubernetes API prints them: `rfc3339`, `parse_rfc3339`.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(ms|s|m|h)", re.ASCII)
MAX_TEXT = 32
MAX_DURATION = 24 * 3600.0
_HINT = "write it like 15s, 1m, 1m30s, 500ms or 0"


def _shown(text: str) -> str:
    return repr(text) if len(text) <= MAX_TEXT else repr(text[:MAX_TEXT]) + f"... ({len(text)} characters)"


def parse_duration(text: str, maximum: float = MAX_DURATION) -> float:
    """Seconds, at most `maximum` in magnitude. Raises ValueError naming the
    (shortened) text."""
    raw = str(text)
    s = raw.strip()
    if len(s) > MAX_TEXT or not s.isascii():
        raise ValueError(f"invalid duration {_shown(raw)}: {_HINT} (ASCII digits, at most {MAX_TEXT} characters)")
    if s in ("0", "0s"):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    body = s[1:] if s[:1] in "+-" else s
    pos, total = 0, 0.0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"invalid duration {_shown(raw)}: {_HINT}")
    if not math.isfinite(total) or total > maximum:
        raise ValueError(f"duration {_shown(raw)} is too long: at most {format_duration(maximum)}")
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String(): 10s, 1m0s, 1h0m0s, 500ms, 0s."""
    if seconds == 0:
        return "0s"
    if not math.isfinite(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        ms = s * 1000
        return f"{sign}{ms:g}ms"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    secs = f"{sec:g}s"
    if h:
        return f"{sign}{int(h)}h{int(m)}m{secs}"
    if m:
        return f"{sign}{int(m)}m{secs}"
    return f"{sign}{secs}"


def rfc3339(ts: float) -> str:
    """Second precision, as metav1.Time serializes."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
