from datetime import timedelta

from beat.schedule import ROUND, build_schedule
from fleet.config import parse
from fleet.health.dispatch import check_options
from fleet.settings import Settings

CFG = parse({"providers": [{"name": "a", "type": "fake"}, {"name": "b", "type": "fake"}]})


def test_one_round_every_interval_and_no_sweep():
    """The overdue sweep runs on the controller's own clock, not beat's."""
    s = build_schedule(Settings(provider_check_interval=30), CFG)
    assert sorted(s) == [ROUND]
    r = s[ROUND]
    assert r["schedule"] == timedelta(seconds=30)
    assert r["kwargs"] == {"providers": ["a", "b"], "timeout": 15}
    assert r["options"]["expires"] == 30


def test_checks_off_schedules_nothing():
    assert build_schedule(Settings(provider_check_interval=0), CFG) == {}


def test_check_message_options():
    o = check_options("a", 30)
    assert o["queue"] == "provider.a" and o["expires"] == 30
    assert o["link"]["task"] == "fleet.record_check"
    assert o["link"]["options"]["queue"] == "fleet.controller"
