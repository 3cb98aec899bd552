"""A provider's check result: the message from worker to controller, the
value stored in Redis, and what `fleet check`/`fleet get ph` print."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.durations import parse_rfc3339, rfc3339
from providers.base import TargetStatus

__all__ = ["CheckResult", "Verdict", "parse_rfc3339", "rfc3339"]  # the times: fleet.durations


@dataclass(frozen=True)
class CheckResult:
    provider: str
    type: str
    supported: bool  # False: the provider has no Checker
    checked_at: float  # unix seconds, when the check finished
    targets: tuple[TargetStatus, ...] = ()
    scheduled_at: float | None = None  # the beat tick that asked for it
    worker: str = ""
    recorded_at: float | None = None  # when the controller stored it

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "type": self.type,
            "supported": self.supported,
            "checkedAt": self.checked_at,
            "targets": [t.to_dict() for t in self.targets],
            "scheduledAt": self.scheduled_at,
            "worker": self.worker,
            "recordedAt": self.recorded_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            provider=d["provider"],
            type=d.get("type", ""),
            supported=bool(d.get("supported", False)),
            checked_at=float(d["checkedAt"]),
            targets=tuple(TargetStatus.from_dict(t) for t in d.get("targets") or ()),
            scheduled_at=d.get("scheduledAt"),
            worker=d.get("worker", ""),
            recorded_at=d.get("recordedAt"),
        )

    @property
    def all_ready(self) -> bool:
        return self.supported and bool(self.targets) and all(t.ready for t in self.targets)


@dataclass(frozen=True)
class Verdict:
    """The Ready condition of a provider, as status and the CLI show it."""

    status: str  # True | False | Unknown
    reason: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)
