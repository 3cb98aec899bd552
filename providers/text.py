"""Showing a value in a message, the one way: `clip` bounds a text (an
error's message, a reason, a probe's answer) and `show` describes a user's
value (repr when short, its size otherwise), both marking a cut with "…".
Everyone may import this module (it imports nothing of the project).
"""

from __future__ import annotations

import math
from typing import Any

ELLIPSIS = "…"
MAX_SHOWN = 60


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters (how the API server counts
    maxLength): cut, its last character "…"."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    """A bounded display of a user's value for messages: short strings and
    numbers as repr, long strings cut before repr (never repr an unbounded
    value), containers only by size. O(limit) time and memory."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return repr(value[:limit]) + f"{ELLIPSIS} ({len(value)} characters)"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return "[]" if not value else f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return "{}" if not value else f"a mapping of {len(value)} key(s)"
    return f"a {type(value).__name__}"
