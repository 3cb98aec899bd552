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

from providers.text import show

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(ms|s|m|h)", re.ASCII)
MAX_TEXT = 32
MAX_DURATION = 24 * 3600.0
_HINT = "write it like 15s, 1m, 1m30s, 500ms or 0"


def parse_duration(text: str, maximum: float = MAX_DURATION) -> float:
    """Seconds, at most `maximum` in magnitude. Raises ValueError naming the
    (shortened) text."""
    raw = str(text)
    s = raw.strip()
    if len(s) > MAX_TEXT or not s.isascii():
        raise ValueError(f"invalid duration {show(raw, MAX_TEXT)}: {_HINT} (ASCII digits, at most {MAX_TEXT} characters)")
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
        raise ValueError(f"invalid duration {show(raw, MAX_TEXT)}: {_HINT}")
    if not math.isfinite(total) or total > maximum:
        raise ValueError(f"duration {show(raw, MAX_TEXT)} is too long: at most {format_duration(maximum)}")
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


# --- ages, as kubectl prints them ---------------------------------------------------


def age(created: str | None, now: float, unknown: str = "<unknown>") -> str:
    """kubectl's AGE for an RFC 3339 time (`fleet get px`, `fleet get ph`);
    `unknown` without one, or for one that does not parse."""
    if not created:
        return unknown
    try:
        then = datetime.fromisoformat(created.upper()).timestamp()
    except ValueError:
        return unknown
    return human_duration(now - then)


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's duration.HumanDuration: precise when young,
    coarser with age (2m0s is "120s", 9m59s, 10m, 3h, 7h59m, 47h, 2d3h,
    8d, 2y3d, 9y). Up to 2 s in the future is clock skew ("0s")."""
    whole = int(seconds)  # toward zero, like Go's int(d.Seconds())
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        s = whole % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"
