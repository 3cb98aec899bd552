"""How `fleet check` and `fleet get ph` print results: one summary row per
provider (the JSON shape), shown as a table, JSON or YAML (`fleet get ph -o
wide` adds the live workers and the verdict's message; `-o name` is
`providerhealth.crawl.example.com/NAME`, kubectl's form). Pure: rows in,
text out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from fleet.durations import age
from fleet.health.decide import REASON_ALL_TARGETS_READY, REASON_CHECK_OVERDUE
from fleet.health.results import CheckResult, Verdict, rfc3339


def summary(result: CheckResult | None, v: Verdict, name: str = "", type_name: str = "") -> dict[str, Any]:
    """The JSON shape of `fleet check` and `fleet get ph`."""
    return {
        "provider": result.provider if result else name,
        "type": result.type if result else type_name,
        "supported": result.supported if result else None,
        "checkedAt": rfc3339(result.checked_at) if result else None,
        "ready": v.status,
        "reason": v.reason,
        "message": v.message,
        "targetsReady": (
            f"{sum(t.ready for t in result.targets)}/{len(result.targets)}" if result and result.supported else ""
        ),
        "targets": [t.to_dict() for t in result.targets] if result else [],
    }


def grid(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's look)."""
    table = [tuple(head)] + [tuple(r) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)


PH_COLUMNS = ("NAME", "TYPE", "READY", "TARGETS", "LAST CHECK", "REASON")
PH_WIDE_COLUMNS = ("WORKERS", "MESSAGE")  # `fleet get ph -o wide`: the live workers serving it, the verdict's message
PH_NAME_PREFIX = "providerhealth.crawl.example.com"


def render_rows(rows: list[dict[str, Any]], fmt: str, now: float) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "yaml":
        return yaml.safe_dump(rows, sort_keys=False).rstrip()
    lines = grid(PH_COLUMNS, [ph_row(r, now) for r in rows]).split("\n")
    return "\n".join([*lines, *(n for r in rows for n in ph_notes(r))])


def ph_row(r: dict[str, Any], now: float, workers: int | None = None) -> list[Any]:
    """A summary's cells in PH_COLUMNS order; given `workers` (its live workers), PH_WIDE_COLUMNS's too."""
    cells: list[Any] = [r["provider"], r["type"], r["ready"], r["targetsReady"] or "-", age(r["checkedAt"], now, "<none>"),
                        r["reason"]]
    if workers is not None:
        cells += [workers, r["message"] or "<none>"]
    return cells


def ph_notes(r: dict[str, Any]) -> list[str]:
    """The lines under the table for a summary: its message when no target says it, each target's state."""
    lines = []
    if r["reason"] != REASON_ALL_TARGETS_READY and r["message"] and not r["targets"]:
        lines.append(f"  {r['provider']}: {r['message']}")
    for t in r["targets"]:
        state = "ready" if t["ready"] else "NOT READY"
        addr = f" ({t['address']})" if t["address"] else ""
        line = f"  {r['provider']}/{t['name']}{addr}: {state} {t['reason']} {t['latencyMillis']}ms"
        if t["message"]:
            line += f" - {t['message']}"
        if t["details"]:
            line += " [" + ", ".join(f"{k}={v}" for k, v in sorted(t["details"].items())) + "]"
        lines.append(line)
    if r["reason"] == REASON_CHECK_OVERDUE and r["targets"]:
        lines.append(f"  {r['provider']}: {r['message']}")
    return lines


def ph_sig(r: dict[str, Any]) -> str:
    """What a change of a summary is (`--watch`): its verdict and each target's, not the check's time or latency."""
    targets = [(t["name"], t["address"], t["ready"], t["reason"], t["message"]) for t in r["targets"]]
    return json.dumps([r["provider"], r["type"], r["supported"], r["ready"], r["reason"], r["message"],
                       r["targetsReady"], targets])
