"""A provider without a backend: scripted check verdicts and an in-memory
instance table.

It drives the pipeline's own tests, the demo and the benchmarks through the
same registry, workers and queues as a real provider. `latencyMs` makes each
check take that long, honouring the deadline like a real backend would.

Results can vary between rounds, as a real backend's do, and stay
reproducible: a round is this provider instance's n-th check (0, 1, 2, …),
and what varies in round n is drawn from (`seed`, the provider's name, n)
only (`plan`), so the same config gives the same sequence in every process.

- `latencyJitterMs` (0–600000, default 0): each check takes `latencyMs` plus
  a jitter drawn per round, `latencyJitter` `uniform` (between 0 and
  `latencyJitterMs`) or `lognormal` (median `latencyJitterMs`, σ 0.5, capped
  at 10 × `latencyJitterMs`); the total is capped at 600000 ms. The targets'
  `latency` is the time the check really took, so it varies too.
- `flapRatio` (0–1, default 0): round(flapRatio × targets) targets, chosen
  once from (`seed`, name), flap: each is down (not ready, reason
  `Unreachable`, message `fake: flapping`) every other period of `flapEvery`
  rounds (1–10000, default 1), half of them starting down, so every
  `flapEvery` rounds all of them flip. With a ratio above 0 at least one
  target flaps. Off-phase a flapping target reports its configured verdict.
- `seed` (0–2^31−1, default 0).

With none of these set, every round of a provider reports the same verdicts.

Instances live in this process's memory, or with `stateFile` (an absolute
path) in a JSON file every process of the provider shares, locked while it is
read and written: the table then survives a killed worker, as a backend's
does, and a test can count instances after a crash. `idempotentCreate`
(default true, the contract's rule) answers a create for a name that exists
with that instance; false makes every create a new instance (`fake/<name>`,
then `fake/<name>-2`, …), as a backend without names would, so a test can
see a create the controller sent twice (`duplicates`).

`faultsFile` (an absolute path) is a backend's outage a test turns on and off
from outside the worker: while that file holds a JSON object naming an
operation (`create`, `get`, `delete`, `list`) with an error class
(`Transient`, `Permanent`, `QuotaExceeded`, `NotFound`), every call of that
operation fails so (message `fake: injected fault`). The file is read at each
call; absent or empty, nothing fails. A file that does not read as such an
object fails the call Permanent, saying why, rather than run it unfaulted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator

from providers import base, marks
from providers.base import Deadline, Instance, State, TargetStatus
from providers.blocks import Block

# Bounds (the file is validated before anything starts; a check must stay
# cheap): at most MAX_TARGETS listed targets and MAX_TARGET_COUNT generated
# ones, a latency of at most MAX_LATENCY_MS (10 minutes, past any check
# timeout: the check then reports Timeout), short strings, few details.
MAX_TARGETS = 1000
MAX_TARGET_COUNT = 10000
MAX_LATENCY_MS = 600_000
MAX_DETAILS = 32
MAX_FLAP_EVERY = 10000
MAX_SEED = 2**31 - 1
LOGNORMAL_SIGMA = 0.5
FLAP_MESSAGE = "fake: flapping"


class FakeTarget(Block):
    name: str = Field(min_length=1, max_length=253)
    ready: bool = True
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=1024)
    details: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict, max_length=MAX_DETAILS)


class FakeConfig(Block):
    targets: list[FakeTarget] = Field(default_factory=list, max_length=MAX_TARGETS)
    # Adds this many generated ready targets t0000, t0001, … (benchmarks).
    targetCount: int = Field(default=0, ge=0, le=MAX_TARGET_COUNT)
    latencyMs: int = Field(default=0, ge=0, le=MAX_LATENCY_MS)
    # A provider of this type that has no Checker: Ready=Unknown/ChecksNotImplemented.
    checks: bool = True
    # Round-to-round variation (module docstring): jitter added to latencyMs per check,
    # flapping targets, and the seed both are drawn from.
    latencyJitterMs: int = Field(default=0, ge=0, le=MAX_LATENCY_MS, strict=True)
    latencyJitter: Literal["uniform", "lognormal"] = "uniform"
    flapRatio: float = Field(default=0.0, ge=0.0, le=1.0, strict=True, allow_inf_nan=False)
    flapEvery: int = Field(default=1, ge=1, le=MAX_FLAP_EVERY, strict=True)
    seed: int = Field(default=0, ge=0, le=MAX_SEED, strict=True)
    # Each create takes this long (before the deadline), like a backend that is slow to answer.
    createLatencyMs: int = Field(default=0, ge=0, le=MAX_LATENCY_MS, strict=True)
    # The instance table in a file shared by every process (module docstring); "" keeps it in memory.
    stateFile: str = Field(default="", max_length=4096)
    # False: every create is a new instance, so a create sent twice shows as a duplicate.
    idempotentCreate: bool = True
    # Operations that fail while this file names them (module docstring); "" injects nothing.
    faultsFile: str = Field(default="", max_length=4096)

    @field_validator("stateFile", "faultsFile")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if v and (not os.path.isabs(v) or "\x00" in v):
            raise ValueError(f"must be an absolute path, got {v[:80]!r}")
        return v


@dataclass(frozen=True)
class Plan:
    """What round `round` of a provider does: how long its check takes (ms,
    before the deadline) and which targets flap down."""

    round: int
    latency_ms: float
    down: frozenset[str]


def target_names(cfg: FakeConfig) -> list[str]:
    """The provider's targets in check order: the listed ones, then t0000, t0001, …"""
    return [t.name for t in cfg.targets] + [f"t{i:04d}" for i in range(cfg.targetCount)]


def flappers(cfg: FakeConfig, name: str) -> dict[str, int]:
    """The targets that flap, each with its phase offset (0: up in the first period, 1: down)."""
    names = target_names(cfg)
    if cfg.flapRatio <= 0 or not names:
        return {}
    k = min(len(names), max(1, round(cfg.flapRatio * len(names))))
    rng = random.Random(f"fake:{cfg.seed}:{name}:flappers")
    chosen = rng.sample(range(len(names)), k)
    return {names[i]: j % 2 for j, i in enumerate(chosen)}  # sample's order is random: half start down


def jitter_ms(cfg: FakeConfig, name: str, round_no: int) -> float:
    if not cfg.latencyJitterMs:
        return 0.0
    rng = random.Random(f"fake:{cfg.seed}:{name}:{round_no}:latency")
    j = cfg.latencyJitterMs
    if cfg.latencyJitter == "uniform":
        return rng.uniform(0, j)
    return min(10.0 * j, j * rng.lognormvariate(0.0, LOGNORMAL_SIGMA))


def plan(cfg: FakeConfig, name: str, round_no: int, _flappers: dict[str, int] | None = None) -> Plan:
    """Round `round_no` (0-based) of provider `name`: a pure function of the
    config, the name and the round, so a benchmark can know what the
    provider's worker will do."""
    latency = min(float(MAX_LATENCY_MS), cfg.latencyMs + jitter_ms(cfg, name, round_no))
    flap = flappers(cfg, name) if _flappers is None else _flappers
    phase = round_no // cfg.flapEvery
    down = frozenset(t for t, offset in flap.items() if (phase + offset) % 2 == 1)
    return Plan(round_no, latency, down)


def _to_json(i: Instance) -> dict[str, object]:
    return {"id": i.id, "state": i.state.value, "ip": i.ip, "uid": i.uid,
            "createdAt": i.created_at.isoformat() if i.created_at else None, "installation": i.installation,
            "namespace": i.namespace}


def _from_json(d: dict[str, object]) -> Instance:
    created = d.get("createdAt")
    return Instance(str(d["id"]), State(str(d["state"])), str(d.get("ip") or ""), str(d.get("uid") or ""),
                    datetime.fromisoformat(created) if isinstance(created, str) else None, str(d.get("installation") or ""),
                    str(d.get("namespace") or ""))


FAULTS: dict[str, type[base.ProviderError]] = {"Transient": base.Transient, "Permanent": base.Permanent,
                                               "QuotaExceeded": base.QuotaExceeded, "NotFound": base.NotFound}
MAX_FAULTS_FILE = 4096


def fault(path: str, op: str) -> tuple[type[base.ProviderError], str] | None:
    """The error `op` fails with now by the faults file at `path` (module docstring), and its message; None: it runs."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FAULTS_FILE + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return base.Permanent, f"fake: faultsFile {path}: {exc.strerror or exc}"
    if not raw.strip():
        return None
    try:
        doc = json.loads(raw) if len(raw) <= MAX_FAULTS_FILE else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not all(k in base.OPS and v in FAULTS for k, v in doc.items()):
        return base.Permanent, (f"fake: faultsFile {path}: want a JSON object of at most {MAX_FAULTS_FILE} bytes mapping "
                                f"{'/'.join(base.OPS)} to {'/'.join(FAULTS)}")
    name = doc.get(op)
    return (FAULTS[name], "fake: injected fault") if name else None


class Table:
    """The instance table: a dict in memory, or a JSON file under an flock
    (`path`), read and written whole inside `open()`."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._memory: dict[str, Instance] = {}

    @contextlib.contextmanager
    def open(self) -> Iterator[dict[str, Instance]]:
        with self._lock:
            if not self.path:
                yield self._memory
                return
            with open(self.path + ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    with open(self.path) as f:
                        table = {k: _from_json(v) for k, v in json.load(f).items()}
                except FileNotFoundError:
                    table = {}
                before = dict(table)
                yield table
                if table != before:
                    tmp = f"{self.path}.{os.getpid()}.tmp"
                    with open(tmp, "w") as f:
                        json.dump({k: _to_json(v) for k, v in table.items()}, f)
                    os.replace(tmp, self.path)


def duplicates(instances: list[Instance]) -> dict[str, list[str]]:
    """UIDs held by more than one instance, with their ids (a test's check for a create sent twice)."""
    by_uid: dict[str, list[str]] = {}
    for i in instances:
        by_uid.setdefault(i.uid, []).append(i.id)
    return {uid: ids for uid, ids in by_uid.items() if len(ids) > 1}


class FakeProvider:
    def __init__(self, name: str, cfg: FakeConfig) -> None:
        self.name = name
        self.cfg = cfg
        self._lock = threading.Lock()
        self._table = Table(cfg.stateFile)
        self._round = 0  # checks started by this instance: the next check's round
        self._flappers = flappers(cfg, name)

    # -- Checker ---------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        with self._lock:
            round_no, self._round = self._round, self._round + 1
        p = plan(self.cfg, self.name, round_no, self._flappers)
        latency = p.latency_ms / 1000
        start = time.monotonic()
        timed_out = latency > deadline.remaining()
        time.sleep(min(latency, deadline.remaining()))
        took = time.monotonic() - start
        out = []
        for t in self._targets():
            if timed_out:
                out.append(TargetStatus(t.name, "fake", False, base.REASON_TIMEOUT, "deadline passed", took))
                continue
            if t.name in p.down:
                out.append(TargetStatus(t.name, "fake", False, base.REASON_UNREACHABLE, FLAP_MESSAGE, took))
                continue
            reason = t.reason or (base.REASON_REACHABLE if t.ready else base.REASON_UNREACHABLE)
            out.append(TargetStatus(t.name, "fake", t.ready, reason, t.message, took, dict(t.details)))
        return out

    def _targets(self) -> list[FakeTarget]:
        generated = [FakeTarget(name=f"t{i:04d}") for i in range(self.cfg.targetCount)]
        return list(self.cfg.targets) + generated

    # -- Provider ---------------------------------------------------------------

    def _fault(self, op: str, provider_id: str = "") -> None:
        got = fault(self.cfg.faultsFile, op)
        if got is not None:
            raise base.wrap(got[0], op, self.name, provider_id, got[1])

    def create(self, request: base.CreateRequest, deadline: Deadline) -> str:
        pid = f"fake/{request.name}"
        self._fault("create", pid)
        if self.cfg.createLatencyMs:
            wait = self.cfg.createLatencyMs / 1000
            timed_out = wait > deadline.remaining()
            time.sleep(min(wait, deadline.remaining()))
            if timed_out:
                raise base.wrap(base.Transient, "create", self.name, pid, "deadline passed")
        problem = marks.problem(request)
        if problem:
            raise base.wrap(base.Permanent, "create", self.name, pid, problem)
        with self._table.open() as table:
            if pid in table and not self.cfg.idempotentCreate:
                n = 2
                while f"{pid}-{n}" in table:
                    n += 1
                pid = f"{pid}-{n}"
            if pid not in table:
                # The table is this backend: the mark lives in it, as a label would.
                table[pid] = Instance(pid, State.RUNNING, "127.0.0.1", request.uid, datetime.now(UTC), request.installation,
                                      base.namespace_mark(request))
        return pid

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        self._check_id("get", provider_id)
        self._fault("get", provider_id)
        with self._table.open() as table:
            try:
                return table[provider_id]
            except KeyError:
                raise base.wrap(base.NotFound, "get", self.name, provider_id, "no such instance") from None

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        self._check_id("delete", provider_id)
        self._fault("delete", provider_id)
        with self._table.open() as table:
            table.pop(provider_id, None)

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        self._fault("list")
        with self._table.open() as table:
            return list(table.values())

    def _check_id(self, op: str, provider_id: str) -> None:
        prefix, _, name = provider_id.partition("/")
        if prefix != "fake" or not name or "/" in name:
            raise base.wrap(base.Permanent, op, self.name, provider_id, "malformed id, want fake/<name>")


class _NoChecks:
    """The same provider without the optional Checker interface."""

    def __init__(self, inner: FakeProvider) -> None:
        self.create, self.get, self.delete, self.list_by_tag = (
            inner.create,
            inner.get,
            inner.delete,
            inner.list_by_tag,
        )


def new(name: str, cfg: FakeConfig) -> base.Provider:
    p = FakeProvider(name, cfg)
    return p if cfg.checks else _NoChecks(p)
