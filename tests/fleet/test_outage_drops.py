"""A record task whose store is unreachable drops its answer with one WARNING, not Celery's ERROR traceback
(`tasks.controller.outage_drops`; a Sentinel master killed under load, applied: tests/integration/test_chaos.py).
The store here is a real redis client on a loopback port nobody listens on; an error of the call itself still
raises."""

import logging
import socket
import time

import fakeredis
import pytest
import redis

from fleet.config import parse
from fleet.health import runtime as health
from fleet.health.recording import Controller
from fleet.health.results import CheckResult
from fleet.settings import Settings
from fleet.store import Store
from providers.base import TargetStatus
from tasks import controller as tasks


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nobody listens there


def ctl_on(client) -> Controller:
    return Controller(Settings(provider_check_interval=60.0), parse({"providers": [{"name": "p", "type": "fake"}]}),
                      Store(client), None)


def message() -> dict:
    return CheckResult("p", "fake", True, time.time(), (TargetStatus("t", "t:1", True, "Reachable"),)).to_dict()


def test_a_check_result_meeting_an_unreachable_store_is_dropped_with_one_warning(monkeypatch, caplog):
    down = redis.Redis(port=closed_port(), socket_connect_timeout=1)
    monkeypatch.setattr(health, "controller", lambda: ctl_on(down))
    caplog.set_level(logging.WARNING, logger="fleet.controller")
    assert tasks.record_check(message()) == tasks.STORE_UNAVAILABLE
    (rec,) = [r for r in caplog.records if r.name == "fleet.controller"]
    assert rec.levelno == logging.WARNING and rec.fields["task"] == "record_check"
    assert "next round" in rec.fields["then"] and not rec.exc_info


def test_the_store_back_the_next_result_is_recorded(monkeypatch):
    up = fakeredis.FakeRedis()
    monkeypatch.setattr(health, "controller", lambda: ctl_on(up))
    assert tasks.record_check(message()) == "stored"


def test_an_error_of_the_call_itself_still_raises(monkeypatch):
    class Broken(fakeredis.FakeRedis):
        def evalsha(self, *a, **kw):
            raise redis.ResponseError("a script's own error")

        def eval(self, *a, **kw):
            raise redis.ResponseError("a script's own error")

    monkeypatch.setattr(health, "controller", lambda: ctl_on(Broken()))
    with pytest.raises(redis.ResponseError):
        tasks.record_check(message())
