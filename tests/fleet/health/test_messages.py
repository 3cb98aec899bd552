"""The record_check validator (issue 9, item 1), a pure function: table tests."""

from __future__ import annotations

import json
import math

import pytest

from fleet.health.limits import LIMITS, Limits
from fleet.health.messages import Rejection, oversized, provider_of, unpack_args, validate_message
from fleet.health.results import CheckResult, rfc3339
from providers.base import TargetStatus

NOW = 1_795_000_000.0  # 2026-11-18


def msg(**over):
    base = {
        "provider": "kvm-home", "type": "kvm", "supported": True, "checkedAt": NOW - 1,
        "targets": [{"name": "nas1", "address": "nas1:22", "ready": True, "reason": "Reachable", "message": "",
                     "latencyMillis": 84, "details": {"pool": "default"}}],
        "scheduledAt": NOW - 2, "worker": "kvm-home@h", "recordedAt": None,
    }
    base.update(over)
    return base


def target(**over):
    t = {"name": "nas1", "ready": True, "reason": "Reachable", "latencyMillis": 1}
    t.update(over)
    return t


def test_a_real_result_round_trips():
    r = CheckResult("kvm-home", "kvm", True, NOW - 1, (TargetStatus("nas1", "nas1:22", True, "Reachable", "", 0.084,
                                                                    {"pool": "default"}),), NOW - 2, "kvm-home@h")
    assert validate_message(r.to_dict(), NOW) == r
    assert validate_message(msg(), NOW) == r


REFUSED = [
    # checkedAt: the clock
    (msg(checkedAt=95_000_000_000.0), "future", "checkedAt"),  # year 5024
    (msg(checkedAt=NOW + LIMITS.clock_skew + 1), "future", "checkedAt"),  # a fast worker clock
    (msg(checkedAt=math.inf), "invalid", "checkedAt"),
    (msg(checkedAt=-math.inf), "invalid", "checkedAt"),
    (msg(checkedAt=math.nan), "invalid", "checkedAt"),
    (msg(checkedAt=1e12), "future", "checkedAt"),  # year 33658
    (msg(checkedAt=10**400), "invalid", "checkedAt"),  # does not fit a float
    (msg(checkedAt=0), "invalid", "checkedAt"),  # before 2020
    (msg(checkedAt=-1e9), "invalid", "checkedAt"),
    (msg(checkedAt="2026-11-18T00:00:00Z"), "invalid", "checkedAt"),
    (msg(checkedAt=True), "invalid", "checkedAt"),
    (msg(checkedAt=None), "invalid", "checkedAt"),
    ({k: v for k, v in msg().items() if k != "checkedAt"}, "invalid", "checkedAt"),
    # informational times
    (msg(scheduledAt=math.inf), "invalid", "scheduledAt"),
    (msg(scheduledAt=NOW + 2 * LIMITS.info_horizon), "invalid", "scheduledAt"),
    (msg(scheduledAt="soon"), "invalid", "scheduledAt"),
    (msg(recordedAt=math.nan), "invalid", "recordedAt"),
    # the whole message
    (None, "invalid", ""),
    ([msg()], "invalid", ""),
    ("kvm-home", "invalid", ""),
    (msg(extra={"a": {"b": {"c": {"d": {"e": {"f": {"g": {}}}}}}}}), "invalid", ""),  # nested too deep
    (msg(blob="x" * (LIMITS.max_message_bytes + 1)), "too_large", ""),
    # provider
    (msg(provider=None), "invalid", "provider"),
    (msg(provider=7), "invalid", "provider"),
    (msg(provider="Kvm_Home"), "invalid", "provider"),
    (msg(provider="a" * 64), "invalid", "provider"),
    (msg(provider=""), "invalid", "provider"),
    # other fields' types
    (msg(supported="yes"), "invalid", "supported"),
    (msg(supported=1), "invalid", "supported"),
    (msg(type=["kvm"]), "invalid", "type"),
    (msg(type="k" * 64), "invalid", "type"),
    (msg(worker=5), "invalid", "worker"),
    (msg(targets={"nas1": {}}), "invalid", "targets"),
    (msg(targets="nas1"), "invalid", "targets"),
    # targets
    (msg(targets=[target(name=f"t{i}") for i in range(LIMITS.max_targets + 1)]), "too_large", "targets"),
    (msg(targets=["nas1"]), "invalid", "targets[0]"),
    (msg(targets=[target(name="")]), "invalid", "targets[0].name"),
    (msg(targets=[target(name=None)]), "invalid", "targets[0].name"),
    (msg(targets=[target(name="n" * 254)]), "invalid", "targets[0].name"),
    (msg(targets=[target(name="a\nb")]), "invalid", "targets[0].name"),
    (msg(targets=[target(), target()]), "invalid", "targets[1].name"),  # one verdict per target
    (msg(targets=[target(ready="true")]), "invalid", "targets[0].ready"),
    (msg(targets=[target(ready=None)]), "invalid", "targets[0].ready"),
    (msg(targets=[target(reason="R" * 129)]), "invalid", "targets[0].reason"),
    (msg(targets=[target(reason=3)]), "invalid", "targets[0].reason"),
    (msg(targets=[target(message=["x"])]), "invalid", "targets[0].message"),
    (msg(targets=[target(address={})]), "invalid", "targets[0].address"),
    (msg(targets=[target(latencyMillis=math.nan)]), "invalid", "targets[0].latencyMillis"),
    (msg(targets=[target(latencyMillis=math.inf)]), "invalid", "targets[0].latencyMillis"),
    (msg(targets=[target(latencyMillis=-1)]), "invalid", "targets[0].latencyMillis"),
    (msg(targets=[target(latencyMillis=1e300)]), "invalid", "targets[0].latencyMillis"),
    (msg(targets=[target(latencyMillis="84")]), "invalid", "targets[0].latencyMillis"),
    (msg(targets=[target(details=["a"])]), "invalid", "targets[0].details"),
    (msg(targets=[target(details={f"k{i}": "v" for i in range(LIMITS.max_details + 1)})]), "too_large", "targets[0].details"),
    (msg(targets=[target(details={"k" * 129: "v"})]), "invalid", "targets[0].details"),
    (msg(targets=[target(details={"": "v"})]), "invalid", "targets[0].details"),
    (msg(targets=[target(details={"k": 1})]), "invalid", "targets[0].details.k"),
]
# what only the walk over the whole decoded value (`oversized`) refuses: unknown keys, never stored
SIZE_WALK_ONLY = (msg(extra={"a": {"b": {"c": {"d": {"e": {"f": {"g": {}}}}}}}}), msg(blob="x" * (LIMITS.max_message_bytes + 1)))


@pytest.mark.parametrize("raw, reason, field, body_bounded", [(*row, False) for row in REFUSED] +
                         [(*row, True) for row in REFUSED if row[0] not in SIZE_WALK_ONLY])
def test_refused(raw, reason, field, body_bounded):
    """The same refusals when the task's Strategy bounded the encoded body
    (`body_bounded`: no walk over the decoded value), but for what only that
    walk sees (unknown keys, dropped anyway: `test_the_size_walk_only_guards_unknown_keys`)."""
    got = validate_message(raw, NOW, body_bounded=body_bounded)
    assert isinstance(got, Rejection), got
    assert (got.reason, got.field) == (reason, field), got
    assert len(got.detail) < 200  # bounded: never the offending value in full


def test_the_size_walk_only_guards_unknown_keys():
    for raw in SIZE_WALK_ONLY:
        assert isinstance(validate_message(raw, NOW), Rejection)
        got = validate_message(raw, NOW, body_bounded=True)
        assert got == validate_message(msg(), NOW), "the unknown key is dropped, the rest validated"


@pytest.mark.parametrize("t", [
    target(), target(details={}), target(details=None), target(details={"k": "v"}), target(details=[]), target(details=""),
    target(name=""), target(name="n" * 253), target(name="n" * 254), target(name="a\tb"), target(name=3),
    target(reason="R" * 128), target(reason="R" * 129), target(reason="a\x00"), target(reason=None),
    target(address="a" * 512), target(address="a" * 513), target(address=1), target(message="m" * 1024),
    target(message="m" * 1025), target(message=None), target(ready=1), target(ready=False), target(ready=None),
    target(latencyMillis=0), target(latencyMillis=LIMITS.max_latency_ms), target(latencyMillis=LIMITS.max_latency_ms + 1),
    target(latencyMillis=-0.5), target(latencyMillis=True), target(latencyMillis=math.nan), target(latencyMillis=10**400),
    target(latencyMillis=2.5), {"name": "bare"}, {}, [], "nas1",
])
def test_the_targets_fast_path_accepts_what_the_checked_one_does(t):
    from fleet.health import messages

    def outcome(fn):
        try:
            return fn(t, "targets[0]", LIMITS)
        except messages._Rejected as exc:
            return exc.rejection

    assert outcome(messages._target) == outcome(messages._checked_target)


@pytest.mark.parametrize("raw, check", [
    (msg(checkedAt=NOW + LIMITS.clock_skew), lambda r: r.checked_at == NOW + LIMITS.clock_skew),  # within the skew
    (msg(checkedAt=int(NOW)), lambda r: r.checked_at == NOW and isinstance(r.checked_at, float)),
    (msg(targets=[], supported=False), lambda r: r.targets == () and not r.supported),
    (msg(targets=None), lambda r: r.targets == ()),
    ({"provider": "p", "checkedAt": NOW}, lambda r: r == CheckResult("p", "", False, NOW)),  # defaults
    (msg(unknown={"k": 1}), lambda r: "unknown" not in r.to_dict()),  # ignored, never stored
    (msg(recordedAt=NOW - 5), lambda r: r.recorded_at == NOW - 5),
    (msg(targets=[target(message="m" * 5000)]),
     lambda r: len(r.targets[0].message) == LIMITS.max_text and r.targets[0].message.endswith("…")),
    (msg(targets=[target(address="a" * 5000)]), lambda r: len(r.targets[0].address) == LIMITS.max_address),
    (msg(targets=[target(details={"k": "v" * 5000})]), lambda r: len(r.targets[0].details["k"]) == LIMITS.max_text),
    (msg(worker="w" * 5000), lambda r: len(r.worker) == LIMITS.max_worker),
    (msg(targets=[target(name=f"t{i}") for i in range(LIMITS.max_targets)]), lambda r: len(r.targets) == LIMITS.max_targets),
    (msg(targets=[target(latencyMillis=15000.5)]), lambda r: r.targets[0].latency == 15.0005),
])
def test_accepted(raw, check):
    got = validate_message(raw, NOW)
    assert isinstance(got, CheckResult), got
    assert check(got)
    rfc3339(got.checked_at)  # every accepted time is printable


def test_limits_are_parameters():
    tight = Limits(max_targets=1, clock_skew=0)
    assert validate_message(msg(checkedAt=NOW + 1), NOW, tight).reason == "future"
    two = msg(targets=[target(name="a"), target(name="b")])
    assert validate_message(two, NOW, tight).reason == "too_large"
    assert isinstance(validate_message(two, NOW), CheckResult)


def test_the_walk_stops_at_the_limit():
    """The size walk's cost is bounded by the limit, not by the value."""
    seen = 0

    def lazy():
        nonlocal seen
        for _ in range(10**9):
            seen += 1
            yield "x" * 1000

    assert oversized([0], Limits()) is None
    assert oversized(lazy(), Limits()).reason == "invalid"  # a generator is not JSON
    assert seen == 0
    huge = ["x" * 1000] * 200_000  # 200 MB as JSON, shared strings
    assert oversized(huge, Limits()).reason == "too_large"
    assert oversized({"a": b"bytes"}, Limits()).reason == "invalid"


def test_a_json_message_over_the_size_limit_is_too_large():
    big = msg(targets=[target(name=f"t{i}", message="m" * 1000, details={f"k{j}": "v" * 1000 for j in range(32)})
                       for i in range(40)])
    assert len(json.dumps(big)) > LIMITS.max_message_bytes
    assert validate_message(big, NOW).reason == "too_large"


@pytest.mark.parametrize("args, kwargs, ok", [
    ((msg(),), {}, True),
    ((), {"result": msg()}, True),
    ((), {}, False),
    ((msg(), msg()), {}, False),
    ((msg(),), {"result": msg()}, False),
    ((), {"other": msg()}, False),
])
def test_unpack_args(args, kwargs, ok):
    got = unpack_args(args, kwargs)
    assert (not isinstance(got, Rejection)) == ok
    if not ok:
        assert (got.reason, got.field) == ("invalid", "args")


@pytest.mark.parametrize("raw, want", [
    (msg(), "kvm-home"), (msg(provider="X" * 10_000), "?"), (msg(provider=None), "?"), ("str", "?"), (None, "?"),
])
def test_provider_of(raw, want):
    assert provider_of(raw) == want
