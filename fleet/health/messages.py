"""Validating a check result at the controller's boundary (issue 9), pure.

`validate_message(raw, now, limits)` turns the decoded `fleet.record_check`
argument (or a value read back from Redis) into a `CheckResult`, or says why
not with a `Rejection(reason, field, detail)`; the reasons are the
`proxy_operator_results_dropped_total` labels in `fleet.serving`. It never
raises on any JSON value and looks at no more than `limits.max_message_bytes`
of it before giving up (or, with `body_bounded`, trusts the task's Strategy
to have refused a larger encoded body), so one crafted or clock-skewed message is dropped and
counted instead of freezing a provider (a `checkedAt` in year 5024 won every
later compare-and-set) or crashing readers (`Infinity`, `1e12`).

Identifiers (provider, type, target names, reasons, details keys) are refused
when malformed; free text (messages, addresses, details values, the worker)
is cut to length. Unknown keys are ignored and never stored: the stored value
is rebuilt from the validated fields.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fleet.config import validate_name
from fleet.health.limits import LIMITS, Limits
from fleet.health.results import CheckResult
from fleet.serving import DROP_FUTURE, DROP_INVALID, DROP_TOO_LARGE
from providers.base import TargetStatus
from providers.text import clip, show


@dataclass(frozen=True)
class Rejection:
    reason: str  # one of metrics.DROP_REASONS
    field: str  # where: "checkedAt", "targets[3].name", "" for the whole message
    detail: str  # bounded; never the offending value in full


class _Rejected(Exception):
    def __init__(self, reason: str, field: str, detail: str) -> None:
        super().__init__(reason, field, detail)
        self.rejection = Rejection(reason, field, detail)


def _show(value: Any) -> str:
    """A short description of a value for a rejection: type, and a prefix of strings."""
    if isinstance(value, str):
        return show(value, 40)
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        return _number_repr(value)
    return type(value).__name__


def _number_repr(value: int | float) -> str:
    if isinstance(value, int) and abs(value) >= 10**20:
        return "an integer of more than 20 digits"
    return repr(value)


def unpack_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The result argument of a `fleet.record_check` call, or a Rejection for
    any other call shape (a crafted message is not a TypeError to retry)."""
    if len(args) == 1 and not kwargs:
        return args[0]
    if not args and list(kwargs) == ["result"]:
        return kwargs["result"]
    return Rejection(DROP_INVALID, "args", f"expected one result argument, got {len(args)} positional and "
                                           f"{len(kwargs)} keyword arguments")


def provider_of(raw: Any) -> str:
    """The provider a message claims, if it is a valid name, for logs; else '?'."""
    name = raw.get("provider") if isinstance(raw, dict) else None
    return name if isinstance(name, str) and validate_name(name) is None else "?"


def oversized(value: Any, limits: Limits = LIMITS) -> Rejection | None:
    """A bounded walk of a decoded JSON value: too_large once its approximate
    encoded size passes max_message_bytes, invalid when nested deeper than
    max_depth or holding a non-JSON type. Stops at the first excess, so its
    cost is bounded by the limit, not by the value."""
    size = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        try:
            v = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        if isinstance(v, str):
            size += len(v) + 3
        elif isinstance(v, dict | list | tuple):
            size += 2
            if len(stack) >= limits.max_depth:
                return Rejection(DROP_INVALID, "", f"nested deeper than {limits.max_depth}")
            stack.append(itertools.chain.from_iterable(v.items()) if isinstance(v, dict) else iter(v))
        elif v is None or isinstance(v, bool | int | float):
            size += 8
        else:
            return Rejection(DROP_INVALID, "", f"not a JSON value: {type(v).__name__}")
        if size > limits.max_message_bytes:
            return Rejection(DROP_TOO_LARGE, "", f"more than {limits.max_message_bytes} bytes")
    return None


def _get(d: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, field: str) -> Any:
    v = d.get(key, default)
    if v is default:
        return v
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise _Rejected(DROP_INVALID, field, f"must be {names}, got {_show(v)}")
    return v


def _finite(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _Rejected(DROP_INVALID, field, f"must be a number, got {_show(v)}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise _Rejected(DROP_INVALID, field, f"must be a finite number, got {_number_repr(v)}")
    return f


def _identifier(v: Any, field: str, maximum: int, required: bool = False) -> str:
    if not isinstance(v, str):
        raise _Rejected(DROP_INVALID, field, f"must be a string, got {_show(v)}")
    if required and not v:
        raise _Rejected(DROP_INVALID, field, "must not be empty")
    if len(v) > maximum:
        raise _Rejected(DROP_INVALID, field, f"must be at most {maximum} characters, has {len(v)}")
    if not v.isprintable():
        raise _Rejected(DROP_INVALID, field, "must not hold control characters")
    return v


def _text(v: Any, field: str, maximum: int) -> str:
    if not isinstance(v, str):
        raise _Rejected(DROP_INVALID, field, f"must be a string, got {_show(v)}")
    return clip(v, maximum)


def _timestamp(v: Any, field: str, now: float, limits: Limits, latest: float, late_reason: str) -> float:
    f = _finite(v, field)
    if f < limits.earliest:
        raise _Rejected(DROP_INVALID, field, f"{_number_repr(v)} is before 2020-01-01")
    if f > latest:
        raise _Rejected(late_reason, field, f"{_number_repr(v)} is {f - now:.0f}s after the controller's clock "
                                            f"(allowed: {latest - now:.0f}s)")
    return f


def _info_time(d: dict[str, Any], key: str, now: float, limits: Limits) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    return _timestamp(v, key, now, limits, now + limits.info_horizon, DROP_INVALID)


def _target(raw: Any, at: str, limits: Limits) -> TargetStatus:
    """A target: the common case (every field of its type, within its bounds,
    no details) on one test, else `_checked_target`, which also says what is
    wrong. Both accept exactly the same targets (a table test holds them to it)."""
    if type(raw) is dict:
        name, address, ready = raw.get("name"), raw.get("address", ""), raw.get("ready", False)
        reason, message, lat, details = raw.get("reason", ""), raw.get("message", ""), raw.get("latencyMillis", 0), raw.get("details")
        if (type(name) is str and 0 < len(name) <= limits.max_name and name.isprintable()
                and type(reason) is str and len(reason) <= limits.max_reason and reason.isprintable()
                and type(address) is str and len(address) <= limits.max_address
                and type(message) is str and len(message) <= limits.max_text
                and type(ready) is bool and type(lat) in (int, float) and 0 <= lat <= limits.max_latency_ms
                and (details is None or (type(details) is dict and not details))):
            return TargetStatus(name, address, ready, reason, message, lat / 1000, {})
    return _checked_target(raw, at, limits)


def _checked_target(raw: Any, at: str, limits: Limits) -> TargetStatus:
    if not isinstance(raw, dict):
        raise _Rejected(DROP_INVALID, at, f"must be an object, got {_show(raw)}")
    name = _identifier(raw.get("name"), f"{at}.name", limits.max_name, required=True)
    details_raw = _get(raw, "details", dict, None, f"{at}.details") or {}
    if len(details_raw) > limits.max_details:
        raise _Rejected(DROP_TOO_LARGE, f"{at}.details", f"{len(details_raw)} entries, at most {limits.max_details}")
    details = {}
    for k, v in details_raw.items():
        key = _identifier(k, f"{at}.details", limits.max_detail_key, required=True)
        details[key] = _text(v, f"{at}.details.{key}", limits.max_text)
    latency_ms = _finite(raw.get("latencyMillis", 0), f"{at}.latencyMillis")
    if not 0 <= latency_ms <= limits.max_latency_ms:
        raise _Rejected(DROP_INVALID, f"{at}.latencyMillis", f"must be in [0, {limits.max_latency_ms:.0f}], "
                                                            f"got {_number_repr(latency_ms)}")
    return TargetStatus(
        name=name,
        address=_text(raw.get("address", ""), f"{at}.address", limits.max_address),
        ready=_get(raw, "ready", bool, False, f"{at}.ready"),
        reason=_identifier(raw.get("reason", ""), f"{at}.reason", limits.max_reason),
        message=_text(raw.get("message", ""), f"{at}.message", limits.max_text),
        latency=latency_ms / 1000,
        details=details,
    )


def _validate(raw: Any, now: float, limits: Limits, body_bounded: bool) -> CheckResult:
    if not isinstance(raw, dict):
        raise _Rejected(DROP_INVALID, "", f"must be an object, got {_show(raw)}")
    too_big = None if body_bounded else oversized(raw, limits)
    if too_big is not None:
        raise _Rejected(too_big.reason, too_big.field, too_big.detail)
    provider: Any = raw.get("provider")  # a str once validate_name passes it
    problem = validate_name(provider)
    if problem is not None:
        raise _Rejected(DROP_INVALID, "provider", f"{problem} (got {_show(provider)})")
    if "checkedAt" not in raw:
        raise _Rejected(DROP_INVALID, "checkedAt", "is required")
    checked_at = _timestamp(raw["checkedAt"], "checkedAt", now, limits, now + limits.clock_skew, DROP_FUTURE)
    targets_raw = _get(raw, "targets", list, None, "targets") or []
    if len(targets_raw) > limits.max_targets:
        raise _Rejected(DROP_TOO_LARGE, "targets", f"{len(targets_raw)} targets, at most {limits.max_targets}")
    targets = tuple(_target(t, f"targets[{i}]", limits) for i, t in enumerate(targets_raw))
    seen: set[str] = set()
    for i, t in enumerate(targets):
        if t.name in seen:
            raise _Rejected(DROP_INVALID, f"targets[{i}].name", f"{_show(t.name)} appears more than once")
        seen.add(t.name)
    return CheckResult(
        provider=provider,
        type=_identifier(raw.get("type", ""), "type", limits.max_type),
        supported=_get(raw, "supported", bool, False, "supported"),
        checked_at=checked_at,
        targets=targets,
        scheduled_at=_info_time(raw, "scheduledAt", now, limits),
        worker=_text(raw.get("worker", ""), "worker", limits.max_worker),
        recorded_at=_info_time(raw, "recordedAt", now, limits),
    )


def validate_message(raw: Any, now: float, limits: Limits = LIMITS, *, body_bounded: bool = False) -> CheckResult | Rejection:
    """The result `raw` describes, validated against `limits` at time `now`
    (the controller's clock), or why it is refused. Never raises.

    `body_bounded`: the caller refused an encoded message over
    `max_message_bytes` before decoding it (the record task's Strategy), so
    the walk bounding the decoded value's size (`oversized`, half of the
    validation's cost at 50 targets) is skipped. The validation still looks
    only at known fields, each bounded in count (`max_targets`,
    `max_details`) and length, and the result is rebuilt from them, so
    neither its cost nor what is stored grows with the rest of the value."""
    try:
        return _validate(raw, now, limits, body_bounded)
    except _Rejected as exc:
        return exc.rejection
