"""A provider's list answer crosses Redis compressed, under a bound it can meet.

A `link` message is one bulk string in Redis, and the deployed Redis refuses
a bulk string over `proto-max-bulk-len 2mb` (deploy/redis, compose). An
instance is ~300 bytes of it as JSON in base64, so one provider's list of
~8,000 instances was the most that could be answered at all (issue 24).
zlib makes it ~62 bytes (ids and UIDs are random, the rest repeats), so a
list's answer (`fleet.record_proxy_list`, `fleet.record_gc_list`) is
compressed with `CODEC`, which its sender asks for on the link
(`link_options`), and a worker measures the answer before it sends it
(`answer_problem`: at most `MAX_WIRE` in Redis, `MAX_INFLATED` as JSON;
some 30,000-40,000 instances): a larger one is a `calls.ListTooLarge`
failure its controller can act on, never a publish Redis refuses and
nobody hears of.

The decoder is bounded (`MAX_INFLATED`): a message that inflates past it,
or is cut short, is an error kombu reports and Celery's consumer logs and
acks; nothing is inflated past the bound first.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from kombu import compression

from fleet.celery import routing

CODEC = "application/x-fleet-zlib"
ALIAS = "fleet-zlib"
MAX_INFLATED = 8 << 20  # bytes one compressed message may inflate to: ~35,000 instances of JSON, decoded once a minute
ENVELOPE = 64 << 10  # room left in each bound for what Celery's message wraps around the answer
MAX_WIRE = (2 << 20) - ENVELOPE  # bytes of one answer in Redis (base64 counted), under the deployed 2mb
LEVEL = 6  # zlib's default: level 1 is 13% larger, 9 only 2% smaller


class InflateError(ValueError):
    """An answer that inflates past `MAX_INFLATED`, or is not whole."""


def link_options(task: str) -> dict[str, str]:
    """The options of the link signature of a call to `task`: a list's answer is compressed."""
    return {"compression": ALIAS} if task == routing.LIST_INSTANCES else {}


def compress(body: bytes) -> bytes:
    return zlib.compress(body, LEVEL)


def decompress(body: bytes) -> bytes:
    """`body` inflated, never past `MAX_INFLATED` bytes."""
    inflate = zlib.decompressobj()
    try:
        out = inflate.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        raise InflateError(f"not a zlib stream: {exc}") from None
    if inflate.unconsumed_tail:
        raise InflateError(f"a compressed message inflates past {MAX_INFLATED} bytes")
    if not inflate.eof:
        raise InflateError("a compressed message is cut short")
    return out


def wire_size(body: bytes) -> int:
    """Bytes `body` takes in Redis compressed (in base64, as kombu's Redis transport sends a body)."""
    return 4 * math.ceil(len(compress(body)) / 3)


def answer_problem(value: Any) -> str | None:
    """Why `value` cannot travel as one compressed answer, or None: its JSON
    must inflate within `MAX_INFLATED` and take at most `MAX_WIRE` in Redis."""
    body = json.dumps(value).encode()
    if len(body) > MAX_INFLATED - ENVELOPE:
        return f"{len(body)} bytes of JSON, more than the {MAX_INFLATED - ENVELOPE} a controller inflates"
    wire = wire_size(body)
    if wire > MAX_WIRE:
        return f"{wire} bytes compressed, more than the {MAX_WIRE} one answer may take in Redis"
    return None


def install() -> None:
    """Make `CODEC` known to kombu in this process (the app does, for workers and the controller alike)."""
    compression.register(compress, decompress, CODEC, aliases=[ALIAS])
