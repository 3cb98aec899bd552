"""Which installation serves a namespace's Proxies: one claim per namespace,
so two installations never write the same Proxy.

A claim is the Lease `fleet-proxies` (coordination.k8s.io/v1) in the
namespace, labelled with the installation, `spec.holderIdentity` = the
installation id, `leaseDurationSeconds` = CLAIM_SECONDS, `renewTime` moved
by the holder's replicas every RENEW_EVERY seconds (several replicas of one
installation share it: same holder). Every write carries the
resourceVersion read, so two installations racing for a free namespace
cannot both win (a 409 is read again and judged again).

- **Scoped** (`--proxy-namespaces a,b`, or the default: the installation's
  own namespace): at start every namespace is judged first; if any is held
  by another installation whose claim is live, the controller refuses to
  start (`ScopeConflict`, naming each namespace, its holder and how long ago
  it renewed) and writes nothing; otherwise it claims them all (a race lost
  there releases what it wrote and refuses the same way).
- **`*`** (every namespace): at start it lists every `fleet-proxies` Lease
  (a cluster-wide list) and refuses on any live claim of another
  installation. It then claims a namespace when it first meets one of its
  Proxies, before reconciling it; a namespace another installation claimed
  meanwhile is left alone and logged as an overlap (an ERROR), and tried
  again each renewal.
- A claim not renewed for CLAIM_SECONDS lapses and may be taken (a stopped
  installation's namespace moves to another after at most that long;
  `kubectl -n NS delete lease fleet-proxies` frees it at once). A holder that
  finds its claim taken over (it could not renew for that long) stops
  serving that namespace and logs why; one that cannot reach the API keeps
  serving only until its own claim would have lapsed.

`judge` is the pure decision (a table test in tests/fleet/proxies/test_claims.py);
`Claims` does the reads and writes through `fleet.kube.Writer`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fleet import kube
from fleet.settings import ALL_NAMESPACES

log = logging.getLogger("fleet.proxies")

LEASE = kube.Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CLAIM_NAME = "fleet-proxies"
CLAIM_SECONDS = 60  # a claim not renewed for this long lapses
RENEW_EVERY = 15.0  # seconds between renewals (at most: replicas of one installation share the renewal)
RETRIES = 3

# what judge says to do
CREATE, RENEW, TAKE, KEEP, HELD = "create", "renew", "take", "keep", "held"


@dataclass(frozen=True)
class Judgement:
    action: str  # CREATE (no claim), RENEW (ours, due), KEEP (ours, fresh), TAKE (free or lapsed), HELD (another's, live)
    holder: str = ""  # who holds it now ("" when nobody)
    age: float | None = None  # seconds since its last renewal; None when unknown


def parse_time(value: Any) -> float | None:
    """A Lease's MicroTime (`2026-11-30T10:00:00.123456Z`) as Unix time; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt.timestamp() if dt.tzinfo is not None else None


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def judge(lease: Mapping[str, Any] | None, installation: str, now: float, renew_every: float = RENEW_EVERY) -> Judgement:
    """What to do with a namespace's claim Lease as read (None: there is
    none), for `installation` at `now` (pure). A claim whose renewal time
    cannot be read, or whose duration is missing, counts as lapsed: nothing
    vouches for it. A renewal time ahead of `now` (a skewed clock) is fresh."""
    if lease is None:
        return Judgement(CREATE)
    found = lease.get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    raw_holder = spec.get("holderIdentity")
    holder = raw_holder if isinstance(raw_holder, str) else ""
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    age = None if renewed is None else max(0.0, now - renewed)
    if holder == installation:
        return Judgement(KEEP if age is not None and age < renew_every else RENEW, holder, age)
    live = bool(holder) and age is not None and isinstance(duration, int) and not isinstance(duration, bool) and age < duration
    return Judgement(HELD if live else TAKE, holder, age)


def lease_body(namespace: str, installation: str, now: float, acquire: bool) -> dict[str, Any]:
    """The claim as created (`acquire`: holder, acquireTime and renewTime) or the renewal's patch body."""
    spec: dict[str, Any] = {"holderIdentity": installation, "leaseDurationSeconds": CLAIM_SECONDS,
                            "renewTime": micro_time(now)}
    if acquire:
        spec["acquireTime"] = micro_time(now)
    return {"apiVersion": LEASE.api_version, "kind": LEASE.kind,
            "metadata": {"name": CLAIM_NAME, "namespace": namespace, "labels": kube.labels_for(installation)},
            "spec": spec}


def describe(conflicts: Mapping[str, Judgement]) -> str:
    """`crawl (installation 'b', renewed 3s ago), team (installation 'c', renewed 40s ago)`."""
    parts = []
    for ns, j in sorted(conflicts.items()):
        when = f"renewed {j.age:.0f}s ago" if j.age is not None else "renewal time unknown"
        parts.append(f"{ns} (installation {j.holder!r}, {when})")
    return ", ".join(parts)


class ScopeConflict(Exception):
    """Another installation serves a namespace this one was told to serve."""


def conflict_message(installation: str, conflicts: Mapping[str, Judgement]) -> str:
    return (
        f"installation {installation!r} cannot serve the Proxies of {len(conflicts)} namespace(s) another installation "
        f"serves: {describe(conflicts)}. Two installations must not serve the same namespace: give them "
        f"--proxy-namespaces that do not overlap. A claim (Lease {CLAIM_NAME} in the namespace) that is no longer renewed "
        f"lapses after {CLAIM_SECONDS}s; `kubectl -n NAMESPACE delete lease {CLAIM_NAME}` frees it at once"
    )


class MissingNamespace(Exception):
    """A namespace of --proxy-namespaces does not exist."""


class Claims:
    """This installation's claims on its namespaces (see the module docstring)."""

    def __init__(self, writer: kube.Writer, installation: str, scope: tuple[str, ...],
                 clock: Callable[[], float] = time.time, renew_every: float = RENEW_EVERY) -> None:
        self.writer, self.installation, self.scope = writer, installation, scope
        self.clock, self.renew_every = clock, renew_every
        self.everywhere = scope == (ALL_NAMESPACES,)
        self._held: dict[str, float] = {}  # namespace -> when our claim was last seen renewed
        self._refused: dict[str, tuple[float, Judgement]] = {}  # namespace -> (when judged, by whom it is held)
        self._lock = threading.Lock()
        self.on_gained: Callable[[str], None] = lambda ns: None  # a namespace became ours (again)

    # -- the claims ---------------------------------------------------------------------------

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def allowed(self, namespace: str) -> bool:
        """Whether this installation may write `namespace`'s Proxies now. With
        `*`, a namespace met for the first time is claimed here (and one refused
        is tried again after a renewal period)."""
        now = self.clock()
        with self._lock:
            renewed = self._held.get(namespace)
            refused = self._refused.get(namespace)
        if renewed is not None:
            return now - renewed < CLAIM_SECONDS
        if not self.everywhere or (refused is not None and now - refused[0] < self.renew_every):
            return False
        try:
            return self._claim(namespace) is None
        except kube.KubeError as exc:
            log.warning("cannot claim a namespace's Proxies yet", extra={"fields": {"namespace": namespace, "error": str(exc)}})
            with self._lock:
                self._refused[namespace] = (now, Judgement(HELD, "?"))
            return False

    def acquire(self) -> None:
        """At start: claim the scope, or raise ScopeConflict (writing nothing
        when a conflict is seen before any write)."""
        if self.everywhere:
            conflicts = self._foreign_claims()
            if conflicts:
                raise ScopeConflict(conflict_message(self.installation, conflicts))
            log.info("Proxies of every namespace: each claimed when first met", extra={"fields": {
                "installation": self.installation, "claim": f"Lease {CLAIM_NAME}"}})
            return
        now = self.clock()
        seen = {ns: judge(self.writer.read(LEASE, ns, CLAIM_NAME), self.installation, now, self.renew_every)
                for ns in self.scope}
        conflicts = {ns: j for ns, j in seen.items() if j.action == HELD}
        if conflicts:
            raise ScopeConflict(conflict_message(self.installation, conflicts))
        lost: dict[str, Judgement] = {}
        for ns in self.scope:
            refused = self._claim(ns)
            if refused is not None:
                lost[ns] = refused
        if lost:
            for ns in self.held():
                self._release(ns)
            raise ScopeConflict(conflict_message(self.installation, lost))
        log.info("claimed the Proxies of its namespaces", extra={"fields": {
            "installation": self.installation, "namespaces": ",".join(self.scope), "claim": f"Lease {CLAIM_NAME}"}})

    def _foreign_claims(self) -> dict[str, Judgement]:
        """Every live claim of another installation, cluster-wide (for `*`)."""
        now, out, token = self.clock(), {}, ""
        for _ in range(10_000):
            page = kube.list_page(self.writer.api_client, LEASE, limit=500, continue_token=token,
                                  field_selector=f"metadata.name={CLAIM_NAME}")
            for item in page.get("items") or ():
                ns = (item.get("metadata") or {}).get("namespace") if isinstance(item, dict) else None
                if isinstance(ns, str):
                    j = judge(item, self.installation, now, self.renew_every)
                    if j.action == HELD:
                        out[ns] = j
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                break
        return out

    def _claim(self, namespace: str) -> Judgement | None:
        """Claim or renew `namespace`: None when it is ours now, else the
        judgement of the other installation's live claim."""
        for _ in range(RETRIES):
            now = self.clock()
            lease = self.writer.read(LEASE, namespace, CLAIM_NAME)
            j = judge(lease, self.installation, now, self.renew_every)
            try:
                if j.action == HELD:
                    self._lose(namespace, j, now)
                    return j
                if j.action == CREATE:
                    try:
                        self.writer.create(LEASE, namespace, lease_body(namespace, self.installation, now, acquire=True))
                    except kube.ClusterAccessError as exc:
                        if exc.status != 404:
                            raise
                        raise MissingNamespace(
                            f"namespace {namespace!r} of --proxy-namespaces does not exist: create it first "
                            f"(kubectl create namespace {namespace}) or leave it out of --proxy-namespaces") from None
                elif j.action in (RENEW, TAKE):
                    assert lease is not None
                    body = lease_body(namespace, self.installation, now, acquire=j.action == TAKE)
                    body["metadata"] = {"resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
                                        "labels": body["metadata"]["labels"]}
                    self.writer.patch(LEASE, namespace, CLAIM_NAME, body)
                    if j.action == TAKE and j.holder:
                        log.warning("took over a lapsed claim", extra={"fields": {
                            "namespace": namespace, "from": j.holder, "age": None if j.age is None else round(j.age)}})
            except (kube.Conflict, kube.NotFound):
                continue  # someone wrote it between our read and write: read again
            self._gain(namespace, now if j.action != KEEP else now - (j.age or 0.0))
            return None
        raise kube.ApiUnavailable(f"Lease {namespace}/{CLAIM_NAME} kept changing under {RETRIES} attempts")

    def _release(self, namespace: str) -> None:
        """Give up our claim on `namespace` (best effort: it lapses anyway)."""
        with self._lock:
            self._held.pop(namespace, None)
        try:
            lease = self.writer.read(LEASE, namespace, CLAIM_NAME)
            spec = (lease or {}).get("spec") or {}
            if lease is not None and spec.get("holderIdentity") == self.installation:
                self.writer.patch(LEASE, namespace, CLAIM_NAME, {
                    "metadata": {"resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")},
                    "spec": {"holderIdentity": None, "renewTime": None, "acquireTime": None}})
        except kube.KubeError as exc:
            log.debug("releasing a claim failed", extra={"fields": {"namespace": namespace, "error": str(exc)}})

    def _gain(self, namespace: str, renewed: float) -> None:
        with self._lock:
            new = namespace not in self._held
            self._held[namespace] = renewed
            self._refused.pop(namespace, None)
        if new:
            self.on_gained(namespace)

    def _lose(self, namespace: str, j: Judgement, now: float) -> None:
        with self._lock:
            had = self._held.pop(namespace, None) is not None
            first = namespace not in self._refused
            self._refused[namespace] = (now, j)
        if had or first:
            log.error("namespace served by another installation: its Proxies are left alone", extra={"fields": {
                "namespace": namespace, "installation": self.installation, "overlap": describe({namespace: j})}})

    # -- renewal ---------------------------------------------------------------------------------

    def renew(self) -> None:
        """One round: renew what is held, try again what was refused (scoped:
        the whole scope; `*`: the namespaces met and refused)."""
        with self._lock:
            names = set(self._held) | set(self._refused)
        if not self.everywhere:
            names |= set(self.scope)
        for ns in sorted(names):
            try:
                self._claim(ns)
            except kube.KubeError as exc:
                log.warning("claim renewal failed", extra={"fields": {"namespace": ns, "error": str(exc)}})

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.renew_every):
            self.renew()
