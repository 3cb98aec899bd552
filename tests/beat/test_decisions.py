"""Beat's pure decisions: who sends, to whom, what changed, when a new
active beat resumes."""

from __future__ import annotations

import pytest

from beat.decisions import (
    ACTIVE,
    STANDBY,
    RoundPlan,
    catch_up,
    plan_round,
    provider_changes,
    resume_at,
    role_change,
    worker_changes,
)

PROVIDERS = ["a", "b", "c"]


@pytest.mark.parametrize(
    ("active", "live", "want"),
    [
        # the lock holder sends to each provider with a live worker, none into a queue nobody consumes
        (True, {"a", "b", "c"}, RoundPlan(("a", "b", "c"), (), True)),
        (True, {"a", "c"}, RoundPlan(("a", "c"), ("b",), True)),
        # nobody consumes anything: still a round (beat is alive), every provider skipped
        (True, set(), RoundPlan((), ("a", "b", "c"), True)),
        # a heartbeat of a provider not in the config changes nothing
        (True, {"a", "b", "c", "zz"}, RoundPlan(("a", "b", "c"), (), True)),
        # a standby sends nothing and stamps nothing, whatever the workers
        (False, {"a", "b", "c"}, RoundPlan((), (), False)),
        (False, set(), RoundPlan((), (), False)),
    ],
)
def test_plan_round(active, live, want):
    assert plan_round(active, PROVIDERS, live) == want


def test_plan_round_keeps_config_order():
    assert plan_round(True, ["z", "a", "m"], {"m", "z"}).send == ("z", "m")


@pytest.mark.parametrize(
    ("before", "now", "gone", "back"),
    [
        (set(), set(), [], []),
        (set(), {"b"}, ["b"], []),  # b's worker is gone: log once
        ({"b"}, {"b"}, [], []),  # still gone: no new line
        ({"b"}, set(), [], ["b"]),  # back
        ({"a", "b"}, {"b", "c"}, ["c"], ["a"]),
    ],
)
def test_worker_changes(before, now, gone, back):
    assert worker_changes(before, now) == (gone, back)


@pytest.mark.parametrize(
    ("skipped", "live", "want"),
    [
        (set(), {"a"}, []),  # nothing was skipped: nothing extra
        ({"b"}, {"a"}, []),  # still no worker
        ({"b", "c"}, {"a", "c"}, ["c"]),  # c's worker came
        ({"b"}, {"b": ["w@h"]}, ["b"]),  # live_workers' mapping works as well
    ],
)
def test_catch_up(skipped, live, want):
    assert catch_up(skipped, live) == want


@pytest.mark.parametrize(
    ("was", "holds", "want"),
    [
        (None, True, ACTIVE),  # first attempt: say which
        (None, False, STANDBY),
        (STANDBY, True, ACTIVE),  # takeover
        (ACTIVE, False, STANDBY),  # lost the lock
        (ACTIVE, True, None),
        (STANDBY, False, None),
    ],
)
def test_role_change(was, holds, want):
    assert role_change(was, holds) == want


@pytest.mark.parametrize(
    ("last", "now", "want", "why"),
    [
        (None, 1000.0, 990.0, "no round on record: due at once"),
        (995.0, 1000.0, 995.0, "the previous holder's round 5s ago: next in 5s, not at once (no double round)"),
        (990.0, 1000.0, 990.0, "exactly one interval ago: due now"),
        (500.0, 1000.0, 990.0, "long ago: due at once, not a burst of missed rounds"),
        (1003.0, 1000.0, 1000.0, "a clock ahead of ours: one interval from now"),
    ],
)
def test_resume_at(last, now, want, why):
    assert resume_at(last, 10.0, now) == want, why


@pytest.mark.parametrize(("before", "after", "want"), [
    (["a", "b"], ["a", "b"], ([], [])),
    (["a", "b"], ["b", "a"], ([], [])),  # order is no change
    (["a"], ["a", "late"], (["late"], [])),
    (["a", "b"], ["a"], ([], ["b"])),
    (["a", "b"], ["c", "a"], (["c"], ["b"])),
    ([], ["a"], (["a"], [])),
])
def test_provider_changes_of_a_reload(before, after, want):
    assert provider_changes(before, after) == want
