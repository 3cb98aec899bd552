"""Durations as users write them (`15s`, `1m`, `1m30s`, `500ms`, `0`) and as
the seed's messages print them (Go's `1m0s`)."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds. Raises ValueError naming the text."""
    s = str(text).strip()
    if s in ("0", "0s"):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"invalid duration {text!r}: write it like 15s, 1m, 1m30s, 500ms or 0")
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String(): 10s, 1m0s, 1h0m0s, 500ms, 0s."""
    if seconds == 0:
        return "0s"
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
