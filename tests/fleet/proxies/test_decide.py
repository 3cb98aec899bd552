"""One row per branch of `fleet.proxies.decide` (its docstring's table)."""

from __future__ import annotations

import dataclasses

import pytest

from fleet.celery.calls import instance_dict
from fleet.proxies import decide as d
from fleet.proxies.decide import CREATE, DELETE, GET, Call, Env, Outcome, decide
from fleet.proxies.model import FINALIZER, SKIP_CLEANUP, Condition, Proxy, ProxySpec, ProxyStatus
from providers.base import ErrorClass, Instance, Placement, State, Transient

ENV = Env(now=1_000.0, configured=("p1",), spec_hash="h1")


def px(phase: str = "", pid: str = "", spec_hash: str = "h1", *, gen: int = 1, observed: int = 1, deleting=False,
       finalizer=True, skip=False, reason: str = "", ip: str = "", port: int = 3128) -> Proxy:
    conds = (Condition("Provisioned", "False", reason, "", observed),) if reason else ()
    status = ProxyStatus(phase=phase, provider_id=pid, spec_hash=spec_hash if pid else "", observed_generation=observed,
                         conditions=conds, ip=ip)
    return Proxy("ns", "a", "uid-1", gen, ProxySpec("p1", Placement(), port=port), status, deleting=deleting,
                 finalizers=(FINALIZER,) if finalizer else (), annotations={SKIP_CLEANUP: "true"} if skip else {})


def ok(op: str, result=None, **kw) -> Outcome:
    return Outcome(op, True, result, **kw)


def err(op: str, cls: str, retry_after: float | None = None, msg: str = "boom") -> Outcome:
    return Outcome(op, False, None, ErrorClass(cls), retry_after, msg)


RUNNING_INST = Instance("fake/x", State.RUNNING, "10.0.0.7", "uid-1")


def cond(status: ProxyStatus | None, t: str) -> tuple[str, str]:
    assert status is not None
    c = status.condition(t)
    assert c is not None
    return c.status, c.reason


# --- deletion ----------------------------------------------------------------------


def test_deleting_without_the_finalizer_does_nothing():
    assert decide(px("Running", "fake/x", deleting=True, finalizer=False), None, ENV) == d.Step()


def test_skip_cleanup_releases_without_a_backend_call():
    s = decide(px("Running", "fake/x", deleting=True, skip=True), None, ENV)
    assert (s.finalizer, s.call) == ("remove", None)


def test_deleting_without_an_id_releases():
    assert decide(px("", "", deleting=True), None, ENV).finalizer == "remove"


def test_a_create_answered_after_deletion_began_is_deleted():
    s = decide(px("", "", deleting=True), ok(CREATE, "fake/x"), ENV)
    assert s.call == Call(DELETE, "fake/x") and s.finalizer is None
    assert s.status is not None and s.status.provider_id == "fake/x" and s.status.phase == "Deleting"


def test_deletion_starts_with_delete_then_polls_get_until_not_found():
    first = decide(px("Running", "fake/x", deleting=True), None, ENV)
    assert first.call == Call(DELETE, "fake/x") and first.status is not None and first.status.phase == "Deleting"
    deleting = px("Deleting", "fake/x", deleting=True)
    after = decide(deleting, ok(DELETE), ENV)
    assert (after.call, after.requeue) == (None, d.POLL)
    assert decide(deleting, None, ENV).call == Call(GET, "fake/x")
    assert decide(deleting, ok(GET, RUNNING_INST), ENV).call == Call(DELETE, "fake/x")
    assert decide(deleting, err(GET, "not_found"), ENV).finalizer == "remove"


def test_a_permanent_get_while_deleting_tries_delete_and_releases_if_it_works():
    deleting = px("Deleting", "fake/x", deleting=True)
    s = decide(deleting, err(GET, "permanent"), ENV)
    assert s.call == Call(DELETE, "fake/x", release_on_success=True)
    assert decide(deleting, ok(DELETE, release_on_success=True), ENV).finalizer == "remove"


@pytest.mark.parametrize("cls, retry, want", [("transient", 4.0, 4.0), ("permanent", None, 2.0), ("quota_exceeded", None, 300.0)])
def test_failures_while_deleting_are_retried_never_latched(cls, retry, want):
    s = decide(px("Deleting", "fake/x", deleting=True), err(DELETE, cls, retry), dataclasses.replace(ENV, failures=1))
    assert s.requeue == want and s.finalizer is None and s.status is not None and s.status.phase == "Deleting"


def test_deleting_on_a_provider_no_longer_configured_says_how_to_release():
    s = decide(px("Running", "fake/x", deleting=True), None, dataclasses.replace(ENV, configured=()))
    assert s.call is None and s.requeue == d.POLL and s.status is not None and SKIP_CLEANUP in s.status.message


# --- normal reconciling ----------------------------------------------------------------


def test_a_new_proxy_gets_the_finalizer_with_its_create():
    s = decide(px(finalizer=False), None, ENV)
    assert (s.finalizer, s.call, s.status) == ("add", Call(CREATE), None)  # no status write before an answer


def test_an_unconfigured_provider_fails_and_is_released_when_it_appears():
    s = decide(px(), None, dataclasses.replace(ENV, configured=("other",)))
    assert s.status is not None and s.status.phase == "Failed" and "'p1'" in s.status.message and s.call is None
    latched = dataclasses.replace(px(), status=s.status)
    assert decide(latched, None, dataclasses.replace(ENV, configured=("other",))).call is None
    assert decide(latched, None, ENV).call == Call(CREATE)


def test_an_impossible_placement_fails_before_any_call():
    s = decide(px(), None, dataclasses.replace(ENV, placement_problem="placement.zone 'mars' is not a zone"))
    assert s.call is None and s.status is not None and s.status.phase == "Failed"
    assert cond(s.status, "Provisioned") == ("False", "InvalidPlacement") and "mars" in s.status.message


def test_failed_is_latched_until_the_generation_changes():
    latched = px("Failed", "", reason="PermanentError")
    assert decide(latched, None, ENV) == d.Step()
    assert decide(dataclasses.replace(latched, generation=2), None, ENV).call == Call(CREATE)


def test_unreadable_cloud_init_waits_pending_with_back_off():
    s = decide(px(), None, dataclasses.replace(ENV, spec_hash=None, cloud_init_problem="secret ns/s has no key k", failures=2))
    assert s.call is None and s.requeue == 4.0 and s.failures == 3
    assert s.status is not None and s.status.phase == "Pending" and "no key k" in s.status.message


def test_created_then_provisioning_then_running():
    created = decide(px(), ok(CREATE, "fake/x", spec_hash="h1"), ENV)
    assert created.status is not None and (created.status.phase, created.status.provider_id) == ("Provisioning", "fake/x")
    assert created.requeue == d.POLL and created.call is None
    prov = dataclasses.replace(px(), status=created.status)
    assert decide(prov, None, ENV).call == Call(GET, "fake/x")
    still = decide(prov, ok(GET, dataclasses.replace(RUNNING_INST, state=State.PROVISIONING, ip="")), ENV)
    assert (still.status, still.requeue, still.call) == (None, d.POLL, None)  # nothing new to write
    run = decide(prov, ok(GET, RUNNING_INST), ENV)
    assert run.status is not None and (run.status.phase, run.status.ip, run.status.port) == ("Running", "10.0.0.7", 3128)
    assert cond(run.status, "Provisioned") == ("True", "Running") and cond(run.status, "Ready") == ("True", "Running")
    assert cond(run.status, "Healthy") == ("Unknown", "NotProbed") and run.requeue == d.RESYNC


def test_running_with_nothing_new_writes_nothing():
    run = decide(dataclasses.replace(px(), status=decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), ENV).status),
                 ok(GET, RUNNING_INST), ENV)
    assert (run.status, run.call, run.requeue) == (None, None, d.RESYNC)


def test_an_unhealthy_verdict_makes_a_running_proxy_not_ready():
    running = decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), ENV).status
    assert running is not None
    sick = dataclasses.replace(running, conditions=tuple(
        dataclasses.replace(c, status="False", reason="ProbeFailed") if c.type == "Healthy" else c for c in running.conditions))
    s = decide(dataclasses.replace(px(), status=dataclasses.replace(sick, phase="Provisioning")), ok(GET, RUNNING_INST), ENV)
    assert cond(s.status, "Ready") == ("False", "Unhealthy")


@pytest.mark.parametrize("state", ["Stopped", "Terminated"])
def test_stopped_or_terminated_is_deleted_then_created(state):
    s = decide(px("Running", "fake/x"), ok(GET, dataclasses.replace(RUNNING_INST, state=State(state))), ENV)
    assert s.call == Call(DELETE, "fake/x") and s.status is not None and s.status.phase == "Replacing"


def test_not_found_clears_the_id_and_creates_again():
    s = decide(px("Running", "fake/x"), err(GET, "not_found"), ENV)
    assert s.call == Call(CREATE) and s.status is not None and s.status.provider_id == "" and s.status.phase == "Pending"


def test_a_changed_spec_replaces_under_the_same_name():
    s = decide(px("Running", "fake/x", spec_hash="old"), None, ENV)
    assert s.call == Call(DELETE, "fake/x") and s.status is not None and s.status.phase == "Replacing"
    replacing = px("Replacing", "fake/x", spec_hash="old")
    assert decide(replacing, ok(DELETE), ENV).requeue == d.POLL
    assert decide(replacing, None, ENV).call == Call(GET, "fake/x")
    assert decide(replacing, ok(GET, RUNNING_INST), ENV).call == Call(DELETE, "fake/x")
    gone = decide(replacing, err(GET, "not_found"), ENV)
    assert gone.call == Call(CREATE) and gone.status is not None and gone.status.phase == "Replacing"
    created = decide(dataclasses.replace(replacing, status=gone.status), ok(CREATE, "fake/x", spec_hash="h1"), ENV)
    assert created.status is not None and (created.status.phase, created.status.spec_hash) == ("Provisioning", "h1")


def test_transient_backs_off_with_the_calls_own_step():
    s = decide(px("Provisioning", "fake/x"), err(GET, "transient", 8.0), dataclasses.replace(ENV, failures=3))
    assert (s.requeue, s.failures, s.call) == (8.0, 4, None)
    assert cond(s.status, "Provisioned") == ("False", "ProviderError")


def test_a_transient_error_on_a_running_proxy_keeps_it_ready():
    running = decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), ENV).status
    assert running is not None
    s = decide(dataclasses.replace(px(), status=running), err(GET, "transient", 1.0, "connection reset"), ENV)
    assert s.status is not None and s.status.phase == "Running" and s.status.message == "connection reset"
    assert cond(s.status, "Ready") == ("True", "Running")


def test_quota_waits_five_minutes_and_is_not_counted():
    s = decide(px(), err(CREATE, "quota_exceeded", 300.0), dataclasses.replace(ENV, failures=2))
    assert (s.requeue, s.failures, s.call) == (300.0, 2, None)
    assert cond(s.status, "Provisioned") == ("False", "QuotaExceeded")


@pytest.mark.parametrize("cls", ["permanent", "invalid"])
def test_permanent_latches_failed(cls):
    s = decide(px(), err(CREATE, cls, msg="zone mars: no such zone"), ENV)
    assert s.call is None and s.requeue is None and s.status is not None and s.status.phase == "Failed"
    assert cond(s.status, "Provisioned") == ("False", "PermanentError") and s.status.observed_generation == 1


def test_not_found_from_create_is_an_error_not_a_gone_instance():
    s = decide(px(), err(CREATE, "not_found", 1.0), ENV)
    assert s.call is None and s.requeue == 1.0 and s.failures == 1


def test_a_stale_create_for_another_instance_is_ignored():
    s = decide(px("Running", "fake/x", ip="10.0.0.7"), ok(CREATE, "fake/other"), ENV)
    assert s.status is None and s.requeue == d.RESYNC


def test_last_transition_time_moves_only_when_the_status_flips():
    a = d.set_condition((), Condition("Ready", "True", "Running"), 0.0)
    b = d.set_condition(a, Condition("Ready", "True", "Running", "x"), 100.0)
    c = d.set_condition(b, Condition("Ready", "False", "NotRunning"), 200.0)
    assert a[0].last_transition_time == b[0].last_transition_time != c[0].last_transition_time


def test_the_spec_hash_covers_placement_cloud_init_and_port():
    base = ProxySpec("p1", Placement(zone="z"), port=3128)
    h = d.spec_hash(base, "ci")
    assert h == d.spec_hash(base, "ci")
    assert h != d.spec_hash(base, "ci2")
    assert h != d.spec_hash(dataclasses.replace(base, port=3129), "ci")
    assert h != d.spec_hash(dataclasses.replace(base, placement=Placement(zone="y")), "ci")


def test_a_probe_verdict_on_a_running_proxy_moves_healthy_and_ready_only():
    running = decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), ENV).status
    assert running is not None
    p = dataclasses.replace(px(), status=running)
    env = dataclasses.replace(ENV, probe=d.Probe(False, "refused", "203.0.113.9"))
    sick = decide(p, None, env)
    assert cond(sick.status, "Healthy") == ("False", "ProbeFailed") and cond(sick.status, "Ready") == ("False", "Unhealthy")
    assert sick.status.phase == "Running" and sick.status.egress_ip == "203.0.113.9" and sick.call == Call(GET, "fake/x")
    same = decide(dataclasses.replace(p, status=sick.status), None, env)
    assert same.status is None  # an unchanged verdict writes nothing


def test_a_verdict_does_not_touch_a_proxy_that_is_not_running():
    s = decide(px("Provisioning", "fake/x"), None, dataclasses.replace(ENV, probe=d.Probe(False, "refused")))
    assert s.status is None and s.call == Call(GET, "fake/x")


# --- issue 18: failures in a row, resync answers, lifted latches ---------------------------


def test_a_due_retry_keeps_the_count_of_failures():
    for p in (px(), px("Provisioning", "fake/x"), px("Running", "fake/x", ip="10.0.0.7")):
        assert decide(p, None, dataclasses.replace(ENV, failures=5)).failures is None


def test_any_success_ends_the_run_of_failures():
    env = dataclasses.replace(ENV, failures=5)
    assert decide(px(), ok(CREATE, "fake/x", spec_hash="h1"), env).failures == 0
    assert decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), env).failures == 0
    assert decide(px("Deleting", "fake/x", deleting=True), ok(DELETE), env).failures == 0


def test_a_due_retry_while_deleting_or_replacing_deletes_again_without_a_get_between():
    env = dataclasses.replace(ENV, failures=2)
    assert decide(px("Deleting", "fake/x", deleting=True), None, env).call == Call(DELETE, "fake/x")
    assert decide(px("Replacing", "fake/x", spec_hash="old"), None, env).call == Call(DELETE, "fake/x")
    assert decide(px("Deleting", "fake/x", deleting=True), None, ENV).call == Call(GET, "fake/x")  # a poll


def test_a_worker_without_the_provider_is_retried_as_not_configured():
    s = decide(px(), err(CREATE, ErrorClass.NOT_CONFIGURED, msg="provider 'p1' is not configured on this worker"),
               dataclasses.replace(ENV, failures=2))
    assert s.status is not None and s.status.phase == "Pending" and (s.requeue, s.failures) == (4.0, 3)
    assert cond(s.status, "Provisioned") == ("False", "ProviderNotConfigured")


def test_a_permanent_answer_to_a_running_proxys_get_keeps_it_running():
    running = decide(px("Provisioning", "fake/x"), ok(GET, RUNNING_INST), ENV).status
    assert running is not None
    s = decide(dataclasses.replace(px(), status=running), err(GET, "permanent", msg="401 Unauthorized"),
               dataclasses.replace(ENV, failures=1))
    assert s.status is not None and (s.status.phase, s.status.ip) == ("Running", "10.0.0.7")
    assert cond(s.status, "Provisioned") == ("False", "PermanentError") and s.status.message == "401 Unauthorized"
    assert (s.requeue, s.failures, s.call) == (2.0, 2, None)


def test_a_lifted_latch_starts_afresh_with_no_failed_conditions():
    latched = decide(px(), err(CREATE, "permanent", msg="zone mars"), ENV).status
    assert latched is not None and latched.phase == "Failed"
    edited = dataclasses.replace(px(gen=2), status=latched)
    s = decide(edited, None, ENV)
    assert s.call == Call(CREATE) and s.status is not None and (s.status.phase, s.status.message) == ("Pending", "")
    assert {c.reason for c in s.status.conditions} & {"PermanentError"} == set()
    assert {c.observed_generation for c in s.status.conditions} == {2}


# --- reading an answer back (the reconciler's boundary) -----------------------------


def test_an_answer_reads_back_typed():
    from fleet.celery import calls
    from fleet.proxies.reconciler import outcome_of

    got = outcome_of(calls.succeeded("p1", GET, 1, calls.instance_dict(RUNNING_INST)), spec_hash="h1")
    assert got == Outcome(GET, True, RUNNING_INST, spec_hash="h1")
    failed = outcome_of(calls.failed("p1", GET, 3, Transient("get", "p1", "x", "boom")))
    assert (failed.error_class, failed.retry_after) == (ErrorClass.TRANSIENT, 4.0)


@pytest.mark.parametrize("raw", [
    {"ok": "yes", "op": GET},
    {"ok": False, "provider": "p1", "op": GET, "attempt": 1, "error_class": "Gone", "message": "?"},
    # a state the contract does not know: refused, never taken for Running
    {"ok": True, "provider": "p1", "op": GET, "attempt": 1, "result": {**instance_dict(RUNNING_INST), "state": "running"}},
])
def test_an_unreadable_answer_is_a_transient_failure_saying_why(raw):
    from fleet.proxies.reconciler import outcome_of

    out = outcome_of(raw)
    assert (out.ok, out.error_class, out.retry_after) == (False, ErrorClass.TRANSIENT, None)
    assert out.message.startswith("an unreadable answer: ")
    s = decide(px("Provisioning", "fake/x"), out, dataclasses.replace(ENV, failures=2))
    assert (s.failures, s.requeue, s.status.phase if s.status else None) == (3, 4.0, "Provisioning")
