from datetime import timedelta

from beat.schedule import build_schedule
from fleet.config import parse
from fleet.settings import Settings

CFG = parse({"providers": [{"name": "a", "type": "fake"}, {"name": "b", "type": "fake"}]})


def test_one_check_per_provider_and_a_sweep():
    s = build_schedule(Settings(provider_check_interval=30), CFG)
    assert sorted(s) == ["check:a", "check:b", "sweep-overdue"]
    a = s["check:a"]
    assert a["task"] == "fleet.check_provider"
    assert a["schedule"] == timedelta(seconds=30)
    assert a["kwargs"]["provider"] == "a" and a["kwargs"]["timeout"] == 15
    assert callable(a["kwargs"]["scheduled_at"])
    assert a["options"]["queue"] == "provider.a" and a["options"]["expires"] == 30
    assert a["options"]["link"]["task"] == "fleet.record_check"
    assert s["sweep-overdue"]["options"]["queue"] == "fleet.controller"


def test_checks_off_schedules_nothing():
    assert build_schedule(Settings(provider_check_interval=0), CFG) == {}
