"""The schedule as data, and a fan-out entry's messages: one per provider,
the round's tick on each, no queue (the router places them), the same
message as a check sent by hand (`fleet.health.dispatch`)."""

from datetime import timedelta

import pytest

from beat import fanout
from beat.schedule import GC, ROUND, Entry, build_schedule, celery_entries
from fleet.celery import routing
from fleet.config import parse
from fleet.health import dispatch
from fleet.settings import Settings

CFG = parse({"providers": [{"name": "a", "type": "fake"}, {"name": "b", "type": "fake"}]})


def test_one_fan_out_round_every_interval_and_no_sweep():
    """The overdue sweep runs on the controller's own clock, not beat's."""
    (r,) = build_schedule(Settings(provider_check_interval=30, gc_interval=0), CFG)
    assert r == Entry(ROUND, routing.CHECK_PROVIDER, 30, {"timeout": 15}, fan_out=True, expires=30, link=routing.RECORD_CHECK)
    assert "providers" not in r.kwargs, "the task takes one provider, added per message by the fan-out"


def test_checks_and_gc_off_schedule_nothing():
    assert build_schedule(Settings(provider_check_interval=0, gc_interval=0), CFG) == ()


def test_a_gc_sweep_every_gc_interval_to_the_controller_not_fanned_out():
    """On by default (10m), with checks off too; the controller asks every provider itself."""
    for checks in (30, 0):
        *_, gc = build_schedule(Settings(provider_check_interval=checks), CFG)
        assert gc == Entry(GC, routing.GC_SWEEP, 600, {}, fan_out=False, expires=600)
    (gc,) = build_schedule(Settings(provider_check_interval=0, gc_interval=120), CFG)
    assert gc.every == 120 and gc.expires == 120
    e = celery_entries([gc])[GC]
    assert (e["task"], e["schedule"], e["kwargs"], e["options"]) == (routing.GC_SWEEP, timedelta(seconds=120), {}, {"expires": 120})
    assert routing.route(e["task"], (), e["kwargs"], e["options"]) == {"queue": routing.CONTROLLER_QUEUE}


def test_celery_form_names_no_queue():
    entries = celery_entries(build_schedule(Settings(provider_check_interval=30), CFG))
    assert list(entries) == [ROUND, GC]
    e = entries[ROUND]
    assert (e["task"], e["schedule"], e["kwargs"]) == (routing.CHECK_PROVIDER, timedelta(seconds=30), {"timeout": 15})
    assert e["options"]["expires"] == 30 and e["options"]["link"]["task"] == routing.RECORD_CHECK
    assert "queue" not in e["options"] and "queue" not in e["options"]["link"]["options"]


def test_a_fan_out_message_is_a_check_sent_by_hand():
    (r,) = build_schedule(Settings(provider_check_interval=30, gc_interval=0), CFG)
    task, kwargs, options = fanout.message(r, "a", 1700000000.5)
    assert task == routing.CHECK_PROVIDER
    assert kwargs == dispatch.check_kwargs("a", 15, 1700000000.5) == {"provider": "a", "timeout": 15, "scheduled_at": 1700000000.5}
    assert list(kwargs) == ["provider", "timeout", "scheduled_at"]
    assert options == dispatch.check_options(30)
    assert routing.route(task, (), kwargs, options) == {"queue": "provider.a"}


class Recorder:
    def __init__(self):
        self.sent = []

    def send_task(self, name, kwargs=None, **options):
        self.sent.append((name, kwargs, options))


@pytest.mark.parametrize("names", [["a", "b"], []])
def test_send_round_sends_one_message_per_provider_under_one_span(names, spans):
    (r,) = build_schedule(Settings(provider_check_interval=30, gc_interval=0), CFG)
    app = Recorder()
    assert fanout.send_round(app, r, iter(names), 42.0, skipped=1) == len(names)
    assert [(n, k["provider"], k["scheduled_at"]) for n, k, _ in app.sent] == [(routing.CHECK_PROVIDER, p, 42.0) for p in names]
    assert all("queue" not in o for _, _, o in app.sent)
    (span,) = spans.get_finished_spans()
    assert span.name == "fleet.round"
    assert dict(span.attributes) == {"fleet.entry": ROUND, "fleet.providers": len(names), "fleet.interval": 30, "fleet.skipped": 1}
