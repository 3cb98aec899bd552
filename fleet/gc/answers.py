"""A provider's `fleet.list_instances` outcome, validated at the controller's
boundary (pure): it comes from a queue, so it is input, not a promise.

`parse(outcome, provider)` answers a `ListAnswer`:

- `failed`: the outcome says the list failed (`ok: false`): the provider is
  skipped for this sweep (`list-failed`), the error class and message kept
  for the log;
- `invalid`: not an outcome (`fleet.celery.calls.CallOutcome.from_message` refuses
  it), not this provider's list's, or more than `MAX_INSTANCES` entries:
  skipped (`invalid-answer`), nothing decided from a list we cannot vouch for;
- otherwise the instances, each read by `fleet.celery.calls.instance_from_dict`
  (type-checked and bounded); an entry that fails is left out and counted in
  `malformed` (never deleted: an instance GC cannot read is an instance GC keeps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet.celery.calls import CallOutcome, OutcomeError, instance_from_dict
from fleet.gc.decide import Listed, timestamp
from providers.text import clip

MAX_INSTANCES = 100_000  # per provider and answer
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
    return clip(text, limit)


def instance(raw: Any) -> Listed | None:
    """One entry of the list, or None when malformed."""
    try:
        i = instance_from_dict(raw)
    except OutcomeError:
        return None
    return Listed(id=i.id, uid=i.uid, state=i.state.value, ip=i.ip, created_at=timestamp(i.created_at),
                  installation=i.installation, namespace=i.namespace)


def parse(outcome: Any, provider: str, max_instances: int = MAX_INSTANCES) -> ListAnswer:
    if not isinstance(outcome, Mapping):
        return ListAnswer(invalid="the answer is not a provider-call outcome (a mapping)")
    if outcome.get("provider") != provider:
        return ListAnswer(invalid="the outcome is for another provider")
    if outcome.get("op") != "list":
        return ListAnswer(invalid="the outcome is not a list's")
    try:
        out = CallOutcome.from_message(outcome)
    except OutcomeError as exc:
        return ListAnswer(invalid=f"not a provider-call outcome: {cut(str(exc))}")
    if not out.ok:
        return ListAnswer(failed=cut(f"{out.error_class}: {out.message}"))
    if len(out.result) > max_instances:
        return ListAnswer(invalid=f"{len(out.result)} instances, at most {max_instances} per provider")
    good = [i for raw in out.result if (i := instance(raw)) is not None]
    return ListAnswer(instances=tuple(good), malformed=len(out.result) - len(good))
