"""The orphan matrix, pure: what one sweep does with each instance a
provider listed. One row per rule, first match wins (the table test in
tests/fleet/gc/test_decide.py has a case for each):

| # | the listed instance                                   | verdict | why                                        |
|---|-------------------------------------------------------|---------|--------------------------------------------|
| 1 | its UID is empty                                      | keep    | no UID: never collected                    |
| 2 | it carries no installation mark                       | keep    | no installation mark: never collected      |
| 3 | its mark is another installation's                    | keep    | another installation's (<mark>)            |
| 4 | its namespace mark is outside the scope (none: too)   | keep    | namespace <ns> not in --proxy-namespaces   |
| 5 | a Proxy with its UID exists                           | keep    | its Proxy exists                           |
| 6 | created less than min-age ago (or in the future)      | keep    | younger than <min-age>                     |
| 7 | this sweep already deletes `max_deletes` of it        | keep    | delete limit of one sweep reached (<n>)    |
| 8 | creation time unknown or unparsable                   | delete  | orphan, age unknown (counts as very old)   |
| 9 | otherwise                                             | delete  | orphan: no Proxy has its UID, older than … |

Rule 2 is ours (docs/architecture.md, Decisions): an instance made before
installation marks existed, or by hand, is not known to be this fleet's, so
GC leaves it alone, as the Kubernetes writer treats unlabelled objects as
foreign. Rule 4 is the namespace guard: the live UIDs come from the
namespaces of `--proxy-namespaces` only, so an instance of a Proxy in
another namespace (the scope narrowed, or the namespace another
installation's) would look orphaned; it is kept, and so is one without a
namespace mark (made before the mark existed). With `*` (every namespace,
and standalone mode, whose live set is every manifest) rule 4 never applies.
Rule 6 compares with `now` passed in (an injected clock), and a
creation time ahead of `now` (a skewed backend clock) is young, not old.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from fleet.celery.calls import created_from_iso
from fleet.settings import ALL_NAMESPACES

KEEP, DELETE = "keep", "delete"
NO_UID = "no UID: never collected"
NO_MARK = "no installation mark: never collected"
LIVE = "its Proxy exists"
AGE_UNKNOWN = "orphan, age unknown (counts as very old)"
DEFAULT_MAX_DELETES = 1000


@dataclass(frozen=True)
class Listed:
    """One instance of a provider's list answer, validated (`fleet.gc.answers`)."""

    id: str
    uid: str
    state: str = ""
    ip: str = ""
    created_at: float | None = None  # Unix time; None: unknown or unparsable
    installation: str = ""
    namespace: str = ""  # the Proxy's namespace mark; "" when none


EVERY_NAMESPACE: tuple[str, ...] = (ALL_NAMESPACES,)


def out_of_scope(inst: Listed, namespaces: Collection[str]) -> str | None:
    """Rule 4's reason when `inst` is outside the namespaces GC's live set covers, else None."""
    if ALL_NAMESPACES in namespaces or inst.namespace in namespaces:
        return None
    if not inst.namespace:
        return "no namespace mark: outside --proxy-namespaces, never collected"
    return f"namespace {inst.namespace} not in --proxy-namespaces"


@dataclass(frozen=True)
class Verdict:
    instance: Listed
    verdict: str  # KEEP or DELETE
    why: str
    age: float | None  # seconds at `now`; None when the creation time is unknown

    @property
    def delete(self) -> bool:
        return self.verdict == DELETE


def short_duration(seconds: float) -> str:
    """`600` → `10m`, `5400` → `1h30m`, `45` → `45s`, `0` → `0s` (whole seconds)."""
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    parts = [f"{h}h" if h else "", f"{m}m" if m else "", f"{sec}s" if sec else ""]
    return "".join(parts) or "0s"


def age_of(inst: Listed, now: float) -> float | None:
    return None if inst.created_at is None else now - inst.created_at


def decide(inst: Listed, live: Collection[str], installation: str, min_age: float, now: float,
           namespaces: Collection[str] = EVERY_NAMESPACE) -> Verdict:
    """Rules 1-6, 8, 9 of the module's table for one instance (rule 7 is `decide_all`'s)."""
    age = age_of(inst, now)
    if not inst.uid:
        return Verdict(inst, KEEP, NO_UID, age)
    if not inst.installation:
        return Verdict(inst, KEEP, NO_MARK, age)
    if inst.installation != installation:
        return Verdict(inst, KEEP, f"another installation's ({inst.installation})", age)
    scope = out_of_scope(inst, namespaces)
    if scope:
        return Verdict(inst, KEEP, scope, age)
    if inst.uid in live:
        return Verdict(inst, KEEP, LIVE, age)
    if age is not None and age < min_age:
        return Verdict(inst, KEEP, f"younger than {short_duration(min_age)}", age)
    if age is None:
        return Verdict(inst, DELETE, AGE_UNKNOWN, age)
    return Verdict(inst, DELETE, f"orphan: no Proxy has its UID, older than {short_duration(min_age)}", age)


def decide_all(instances: Iterable[Listed], live: Collection[str], installation: str, min_age: float, now: float,
               max_deletes: int = DEFAULT_MAX_DELETES, namespaces: Collection[str] = EVERY_NAMESPACE) -> list[Verdict]:
    """Every instance's verdict, in the order listed. At most `max_deletes`
    deletes (rule 7): a sweep must not flood its provider's queue, whose
    workers also serve the Proxy reconciler; the next sweep takes the rest.
    The same instance id listed twice is decided once."""
    out: list[Verdict] = []
    seen: set[str] = set()
    deletes = 0
    for inst in instances:
        if inst.id in seen:
            continue
        seen.add(inst.id)
        v = decide(inst, live, installation, min_age, now, namespaces)
        if v.delete:
            if deletes >= max_deletes:
                v = Verdict(inst, KEEP, f"delete limit of one sweep reached ({max_deletes})", v.age)
            else:
                deletes += 1
        out.append(v)
    return out


def parse_created(text: str) -> float | None:
    """An ISO 8601 creation time as Unix time; None when unparsable or without
    a time zone (both count as very old)."""
    return timestamp(created_from_iso(text))


def timestamp(dt: datetime | None) -> float | None:
    """`dt` as Unix time; None for None or a time out of range."""
    if dt is None:
        return None
    try:
        return dt.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
