"""A provider's `fleet.list_instances` outcome, validated at the controller's
boundary (pure): it comes from a queue, so it is input, not a promise.

`parse(outcome, provider)` answers a `ListAnswer`:

- `failed`: the outcome says the list failed (`ok: false`): the provider is
  skipped for this sweep (`list-failed`), the error class and message kept
  for the log;
- `invalid`: not an outcome of this provider's list, `result` not a list, or
  more than `MAX_INSTANCES` entries: skipped (`invalid-answer`), nothing
  decided from a list we cannot vouch for;
- otherwise the instances, each field type-checked and bounded; an entry
  that fails is left out and counted in `malformed` (never deleted: an
  instance GC cannot read is an instance GC keeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleet.gc.decide import Listed, parse_created

MAX_INSTANCES = 100_000  # per provider and answer
MAX_ID = 1024  # as fleet.calls.MAX_ARG: a longer id could not be sent back in a delete
MAX_UID = 253
MAX_STATE = 64
MAX_IP = 64
MAX_CREATED = 64
MAX_INSTALLATION = 63
MAX_TEXT = 300  # error messages kept for the log


@dataclass(frozen=True)
class ListAnswer:
    instances: tuple[Listed, ...] = ()
    malformed: int = 0
    failed: str = ""  # "<error_class>: <message>" when the list failed
    invalid: str = ""  # why the answer itself is refused

    @property
    def usable(self) -> bool:
        return not self.failed and not self.invalid


def cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _text(value: Any, limit: int, *, required: bool = False) -> str | None:
    """The string if it is one of at most `limit` characters (non-empty when required), else None."""
    if not isinstance(value, str) or len(value) > limit or (required and not value):
        return None
    return value


def instance(raw: Any) -> Listed | None:
    """One entry of the list, or None when malformed."""
    if not isinstance(raw, dict):
        return None
    pid = _text(raw.get("id"), MAX_ID, required=True)
    uid = _text(raw.get("uid", ""), MAX_UID)
    state = _text(raw.get("state", ""), MAX_STATE)
    ip = _text(raw.get("ip", ""), MAX_IP)
    installation = _text(raw.get("installation", ""), MAX_INSTALLATION)
    namespace = _text(raw.get("namespace", ""), MAX_INSTALLATION)
    created_raw = raw.get("createdAt")
    if pid is None or uid is None or state is None or ip is None or installation is None or namespace is None:
        return None
    if created_raw is None:
        created = None
    elif isinstance(created_raw, str) and len(created_raw) <= MAX_CREATED:
        created = parse_created(created_raw)  # unparsable: unknown, counts as very old
    else:
        return None
    return Listed(id=pid, uid=uid, state=state, ip=ip, created_at=created, installation=installation,
                  namespace=namespace)


def parse(outcome: Any, provider: str, max_instances: int = MAX_INSTANCES) -> ListAnswer:
    if not isinstance(outcome, dict):
        return ListAnswer(invalid="the answer is not a provider-call outcome (a mapping)")
    if outcome.get("provider") != provider:
        return ListAnswer(invalid="the outcome is for another provider")
    if outcome.get("op") != "list":
        return ListAnswer(invalid="the outcome is not a list's")
    ok = outcome.get("ok")
    if ok is False:
        error_class = outcome.get("error_class")
        message = outcome.get("message")
        return ListAnswer(failed=cut(f"{error_class if isinstance(error_class, str) else '?'}: "
                                     f"{message if isinstance(message, str) else ''}"))
    if ok is not True:
        return ListAnswer(invalid="`ok` must be true or false")
    result = outcome.get("result")
    if not isinstance(result, list):
        return ListAnswer(invalid="`result` must be a list of instances")
    if len(result) > max_instances:
        return ListAnswer(invalid=f"{len(result)} instances, at most {max_instances} per provider")
    good = [i for raw in result if (i := instance(raw)) is not None]
    return ListAnswer(instances=tuple(good), malformed=len(result) - len(good))
