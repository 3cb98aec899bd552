"""The provider contract as tests (docs/providers.md §2, §3, §5 and the
§6 checklist).

Three mixins, one per part of the contract; a provider's test module
subclasses each that applies:

- `ProviderConformance`: the four verbs, and the marks they write and
  read back (the UID, the installation). Supply a `provider` fixture
  (against the provider's fake or lab) and, if needed, `make_request`.
  Rules that depend on a backend's timing (Running needs an IP) are checked
  on whatever state the backend reports.
- `CheckerConformance`: the Checker rules (never raises, returns at the
  deadline, one target per entry in a stable order, reasons from the shared
  set or the provider's documented own set, sane names and latencies).
  Supply a `make_checker` fixture: a function from a backend state (`HEALTHY`,
  `UNREACHABLE`, …) to a Checker whose backend is in that state, and list
  the states it can build in `checker_states`.
- `FaultConformance`: every backend failure leaves an operation as one of
  the four contract errors, with the backend's exception as `__cause__`
  (httpx's "every backend error mapped at one boundary"). Supply a
  `fault_backend` fixture (a `FaultBackend`) and list its `faults`; each
  fault is injected at every backend request an operation makes, in turn.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Instance, State, TargetStatus

DEADLINE = 30.0


class ProviderConformance:
    # Ids the provider can never resolve: each must be Permanent on get.
    malformed_ids: tuple[str, ...] = ("", "not-an-id")

    def make_request(self, uid: str) -> CreateRequest:
        return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", cloud_init="#cloud-config\n")

    def deadline(self) -> Deadline:
        return Deadline.after(DEADLINE)

    def _create(self, provider) -> tuple[str, CreateRequest]:
        req = self.make_request(str(uuid.uuid4()))
        return provider.create(req, self.deadline()), req

    def test_create_is_idempotent_by_name(self, provider):
        pid, req = self._create(provider)
        assert provider.create(req, self.deadline()) == pid

    def test_uid_and_created_at_are_read_back(self, provider):
        pid, req = self._create(provider)
        inst = provider.get(pid, self.deadline())
        assert isinstance(inst, Instance)
        assert inst.id == pid
        assert inst.uid == req.uid
        assert inst.created_at is not None

    def test_running_only_with_an_ip(self, provider):
        pid, _ = self._create(provider)
        inst = provider.get(pid, self.deadline())
        assert inst.state in State
        if inst.state is State.RUNNING:
            assert inst.ip

    def test_get_after_delete_is_not_found(self, provider):
        pid, _ = self._create(provider)
        provider.delete(pid, self.deadline())
        with pytest.raises(base.NotFound) as err:
            provider.get(pid, self.deadline())
        assert err.value.op == "get"
        assert err.value.id == pid

    def test_delete_twice_is_fine(self, provider):
        pid, _ = self._create(provider)
        provider.delete(pid, self.deadline())
        provider.delete(pid, self.deadline())

    def test_malformed_id_is_permanent(self, provider):
        for bad in self.malformed_ids:
            with pytest.raises(base.Permanent):
                provider.get(bad, self.deadline())

    def test_list_by_tag_lists_created_with_uid(self, provider):
        pid, req = self._create(provider)
        listed = {i.id: i for i in provider.list_by_tag(self.deadline())}
        assert pid in listed
        assert listed[pid].uid == req.uid
        assert listed[pid].created_at is not None

    # --- the installation mark (docs/providers.md §2, §4): GC deletes only
    # its own installation's orphans, so every provider marks and reads it back.

    installation = "inst-a"

    def test_installation_is_marked_and_read_back(self, provider):
        req = dataclasses.replace(self.make_request(str(uuid.uuid4())), installation=self.installation)
        pid = provider.create(req, self.deadline())
        assert provider.create(req, self.deadline()) == pid
        inst = provider.get(pid, self.deadline())
        assert (inst.uid, inst.installation) == (req.uid, self.installation)
        listed = {i.id: i for i in provider.list_by_tag(self.deadline())}
        assert pid in listed
        assert (listed[pid].uid, listed[pid].installation) == (req.uid, self.installation)

    def test_no_installation_writes_no_mark(self, provider):
        """An instance without the mark (one created before it existed)
        reads back as installation "": GC never takes it for its own."""
        req = dataclasses.replace(self.make_request(str(uuid.uuid4())), installation="")
        pid = provider.create(req, self.deadline())
        assert provider.get(pid, self.deadline()).installation == ""
        listed = {i.id: i for i in provider.list_by_tag(self.deadline())}
        assert listed[pid].installation == "" and listed[pid].uid == req.uid

    def test_installations_are_told_apart(self, provider):
        """Two installations sharing one backend: each instance keeps its own mark."""
        a = dataclasses.replace(self.make_request(str(uuid.uuid4())), installation="inst-a")
        b = dataclasses.replace(self.make_request(str(uuid.uuid4())), installation="inst-b")
        pa, pb = provider.create(a, self.deadline()), provider.create(b, self.deadline())
        listed = {i.id: i.installation for i in provider.list_by_tag(self.deadline())}
        assert (listed[pa], listed[pb]) == ("inst-a", "inst-b")

    def test_the_namespace_mark_is_written_and_read_back(self, provider):
        """GC's namespace guard (fleet/gc/decide.py, rule 4) reads the Proxy's
        namespace back from the backend: every provider marks it at create."""
        a = dataclasses.replace(self.make_request(str(uuid.uuid4())), namespace="team-a", installation="inst-a")
        b = dataclasses.replace(self.make_request(str(uuid.uuid4())), namespace="team-b", installation="inst-a")
        pa, pb = provider.create(a, self.deadline()), provider.create(b, self.deadline())
        assert provider.get(pa, self.deadline()).namespace == "team-a"
        listed = {i.id: i.namespace for i in provider.list_by_tag(self.deadline())}
        assert (listed[pa], listed[pb]) == ("team-a", "team-b")

    @pytest.mark.parametrize("bad", ["Inst-A", "inst_a", "-inst", "x" * 64, "a/b", "inst a"])
    def test_malformed_installation_is_permanent(self, provider, bad):
        req = dataclasses.replace(self.make_request(str(uuid.uuid4())), installation=bad)
        with pytest.raises(base.Permanent) as err:
            provider.create(req, self.deadline())
        assert err.value.op == "create"

    def test_errors_carry_the_configured_name(self, provider):
        with pytest.raises(base.ProviderError) as err:
            provider.get(self.malformed_ids[-1], self.deadline())
        assert err.value.provider == self.provider_name

    provider_name = "conformance"


# --- the Checker (docs/providers.md §5) -------------------------------------------------

HEALTHY = "healthy"
UNREACHABLE = "unreachable"  # nothing listens
MALFORMED = "malformed"  # answers garbage: not the protocol, or not JSON
SERVER_ERROR = "server-error"  # answers an error (a 500, a libvirt internal error)
DROPPED = "dropped"  # closes the connection without an answer
HANGS = "hangs"  # accepts and never answers
CHECK_STATES = (HEALTHY, UNREACHABLE, MALFORMED, SERVER_ERROR, DROPPED, HANGS)
# States in which no target may read ready. MALFORMED is left out: a check
# that proves only that the backend answers (kubernetes reads the body
# without parsing it) may call a garbage answer reachable.
FAILING_STATES = (UNREACHABLE, SERVER_ERROR, DROPPED, HANGS)

CHECK_DEADLINE = 5.0
HANG_DEADLINE = 0.5
# How far past its deadline a check may return: fleet.health.checking.run_check
# abandons a checker at deadline + 2 s, so this stays well inside it.
SLACK = 1.0


def assert_valid_targets(got: Any, allowed_reasons: tuple[str, ...]) -> None:
    """The shape rules every verdict list obeys, whatever the backend did."""
    assert isinstance(got, list), f"check returned {type(got).__name__}, want a list"
    for t in got:
        assert isinstance(t, TargetStatus), f"not a TargetStatus: {t!r}"
        assert isinstance(t.name, str) and t.name, f"a target needs a name: {t!r}"
        assert t.reason in allowed_reasons, f"reason {t.reason!r} of {t.name} is not in {allowed_reasons}"
        assert isinstance(t.latency, int | float) and math.isfinite(t.latency) and t.latency >= 0, t
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in t.details.items()), t.details
        assert TargetStatus.from_dict(json.loads(json.dumps(t.to_dict()))).name == t.name  # travels as JSON
    names = [t.name for t in got]
    assert len(names) == len(set(names)), f"one entry per target, got {names}"


class CheckerConformance:
    # The states `make_checker` can put the backend in; HEALTHY first.
    checker_states: tuple[str, ...] = CHECK_STATES
    # Reasons of the provider's own, documented next to its checker.
    own_reasons: tuple[str, ...] = ()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "backend_state" in metafunc.fixturenames:
            metafunc.parametrize("backend_state", self.checker_states)

    @property
    def allowed_reasons(self) -> tuple[str, ...]:
        return base.SHARED_REASONS + tuple(r for r in self.own_reasons if r not in base.SHARED_REASONS)

    def timed_check(self, checker: Any, seconds: float) -> tuple[list[TargetStatus], float]:
        start = time.monotonic()
        got = checker.check(Deadline.after(seconds))  # raising fails the test: the first rule
        return got, time.monotonic() - start

    def test_check_never_raises_and_keeps_the_rules(self, make_checker, backend_state):
        checker = make_checker(backend_state)
        assert isinstance(checker, base.Checker)
        seconds = HANG_DEADLINE if backend_state == HANGS else CHECK_DEADLINE
        got, took = self.timed_check(checker, seconds)
        assert took <= seconds + SLACK, f"{backend_state}: returned after {took:.2f}s, deadline {seconds}s"
        assert_valid_targets(got, self.allowed_reasons)
        assert got, "at least one target"
        if backend_state == HEALTHY:
            assert all(t.ready for t in got), [(t.name, t.reason, t.message) for t in got]
            assert all(t.reason == base.REASON_REACHABLE for t in got), [t.reason for t in got]
        if backend_state in FAILING_STATES:
            assert not any(t.ready for t in got), [(t.name, t.reason) for t in got]

    def test_check_returns_at_the_deadline_when_the_backend_hangs(self, make_checker):
        if HANGS not in self.checker_states:
            pytest.skip("this backend cannot hang")
        got, took = self.timed_check(make_checker(HANGS), HANG_DEADLINE)
        assert took <= HANG_DEADLINE + SLACK, f"returned after {took:.2f}s"
        assert got and not any(t.ready for t in got)

    def test_check_with_an_expired_deadline_returns_at_once(self, make_checker):
        got, took = self.timed_check(make_checker(HEALTHY), -1)
        assert took <= SLACK, f"returned after {took:.2f}s"
        assert_valid_targets(got, self.allowed_reasons)

    def test_targets_keep_their_names_and_order(self, make_checker):
        """The same targets, in the same order, across calls and whatever
        the backend does: callers key metrics and conditions by position
        and name."""
        checker = make_checker(HEALTHY)
        first = [t.name for t in self.timed_check(checker, CHECK_DEADLINE)[0]]
        assert [t.name for t in self.timed_check(checker, CHECK_DEADLINE)[0]] == first
        for state in self.checker_states:
            seconds = HANG_DEADLINE if state == HANGS else CHECK_DEADLINE
            names = [t.name for t in self.timed_check(make_checker(state), seconds)[0]]
            assert names == first, f"{state}: {names}, healthy: {first}"


# --- errors at the one boundary (docs/providers.md §3) -----------------------------------

OPERATIONS = ("create", "get", "delete", "list_by_tag")


class FaultBackend(Protocol):
    """A provider and a handle on its backend that fails on request."""

    provider: Any

    def inject(self, fault: str | None, nth: int = -1) -> None:
        """The `nth` backend request from now (0-based; -1 every one) fails
        with `fault`; None: no faults."""

    def fired(self) -> int:
        """How many requests got the fault since `inject`."""

    def release(self) -> None:
        """End any request the backend holds (a hang)."""


def assert_contract_error(
    op: str,
    provider_name: str,
    outcome: BaseException | None,
    may_be_gone: bool,
) -> None:
    """What an operation may do when its backend failed: return (a fault
    can be an answer, e.g. a 404 on delete), or raise exactly one of the
    four classes, naming the op and the configured provider, from the
    backend's exception. Never NotFound from create (§2, SHOULD NOT), nor
    from get unless the backend said "gone" (a false NotFound during an
    outage creates a duplicate)."""
    if outcome is None:
        return
    if not isinstance(outcome, base.ProviderError) or type(outcome) not in base.ERROR_CLASSES:
        raise AssertionError(f"{op}: {type(outcome).__module__}.{type(outcome).__name__} escaped: {outcome!r}") from outcome
    assert outcome.__cause__ is not None, f"{op}: {outcome!r} carries no __cause__"
    assert outcome.op == ("list" if op == "list_by_tag" else op), outcome.op
    assert outcome.provider == provider_name, outcome.provider
    if op == "create" or (op == "get" and not may_be_gone):
        assert not isinstance(outcome, base.NotFound), f"{op}: a false NotFound: {outcome!r}"


class FaultConformance:
    # The faults `fault_backend` can inject; those that mean "no such
    # instance"; those that only some requests can get (garbage XML needs an
    # XML answer), so an operation may never meet them.
    faults: tuple[str, ...] = ()
    gone_faults: tuple[str, ...] = ()
    partial_faults: tuple[str, ...] = ()
    provider_name = "conformance"
    # An operation making more backend requests than this fails the test.
    max_requests = 40
    # The deadline of a faulted call: a hung request costs this much, for
    # every request an operation makes.
    fault_deadline = 1.0

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "fault" in metafunc.fixturenames:
            metafunc.parametrize("fault", self.faults)
        if "operation" in metafunc.fixturenames:
            metafunc.parametrize("operation", OPERATIONS)

    def make_request(self, uid: str) -> CreateRequest:
        return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", cloud_init="#cloud-config\n")

    def prepare(self, backend: FaultBackend, operation: str) -> tuple[Callable[[Deadline], Any], Callable[[], None]]:
        """With the backend healthy: whatever the operation needs to go its
        full way (an existing instance), the call to make, and the clean-up
        that leaves the backend as it was (so every round makes the same
        requests)."""
        p = backend.provider
        req = self.make_request(str(uuid.uuid4()))

        def cleanup() -> None:
            backend.inject(None)
            p.delete(p.create(req, Deadline.after(30)), Deadline.after(30))

        if operation == "create":
            return (lambda d: p.create(req, d)), cleanup
        pid = p.create(req, Deadline.after(30))
        if operation == "get":
            return (lambda d: p.get(pid, d)), cleanup
        if operation == "delete":
            return (lambda d: p.delete(pid, d)), cleanup
        return (lambda d: p.list_by_tag(d)), cleanup

    def test_backend_failures_leave_as_contract_errors(self, fault_backend, operation, fault):
        """The fault at the first backend request the operation makes, then
        at the second, and so on until the operation gets through untouched."""
        for nth in range(self.max_requests):
            fault_backend.inject(None)
            call, cleanup = self.prepare(fault_backend, operation)
            fault_backend.inject(fault, nth)
            start = time.monotonic()
            try:
                call(Deadline.after(self.fault_deadline))
                outcome: BaseException | None = None
            except Exception as exc:
                outcome = exc
            took = time.monotonic() - start
            fired = fault_backend.fired()
            fault_backend.inject(None)
            fault_backend.release()
            cleanup()
            if not fired:
                assert nth > 0 or fault in self.partial_faults, f"{operation} made no backend request"
                return
            assert took <= self.fault_deadline + SLACK, f"{operation} with {fault} at request {nth}: {took:.2f}s"
            assert_contract_error(operation, self.provider_name, outcome, fault in self.gone_faults)
        raise AssertionError(f"{operation} made more than {self.max_requests} backend requests")
