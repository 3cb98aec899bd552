"""The one placement table and the one router: every fleet task is placed,
providers' tasks by their `provider`, callbacks included; an unplaced task
cannot be sent; nothing outside the router names a queue."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from celery import Celery
from celery.canvas import Signature

from fleet.celery import routing
from fleet.health import dispatch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sent(monkeypatch):
    """A Celery app routed like fleet's, whose published messages are recorded
    (task name, kwargs, queue name) instead of sent."""
    app = Celery("routing-test", broker="memory://", set_as_current=False)
    app.conf.update(task_routes=(routing.route,), task_create_missing_queues=True, task_serializer="json")
    out: list[tuple[str, dict, str, dict]] = []

    def record(producer, name, message, queue=None, **kw):
        _args, kwargs, embed = message.body
        out.append((name, kwargs, queue.name, embed))

    monkeypatch.setattr(app.amqp, "send_task_message", record)
    app.sent = out
    return app


@pytest.mark.parametrize(
    ("name", "kwargs", "queue"),
    [
        (routing.CHECK_PROVIDER, {"provider": "kvm-home", "timeout": 5}, "provider.kvm-home"),
        (routing.RECORD_CHECK, {}, "fleet.controller"),
        (routing.RECORD_PROXY_CALL, {}, "fleet.controller"),
        (routing.RECORD_PROXY_LIST, {}, "fleet.controller"),
    ],
)
def test_placement(name, kwargs, queue):
    assert routing.route(name, (), kwargs, {}) == {"queue": queue}


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "problem"),
    [
        ("fleet.nope", (), {}, "no placement"),
        ("celery.backend_cleanup", (), {}, "no placement"),
        (routing.CHECK_PROVIDER, ("kvm-home", 5), {}, "keyword argument"),  # positional: not placed
        (routing.CHECK_PROVIDER, (), {"provider": ""}, "keyword argument"),
        (routing.CHECK_PROVIDER, (), None, "keyword argument"),
    ],
)
def test_unroutable(name, args, kwargs, problem):
    with pytest.raises(routing.Unroutable, match=problem):
        routing.route(name, args, kwargs, {})


def test_every_fleet_task_is_placed():
    from fleet.celery.app import app

    app.loader.import_default_modules()
    registered = {n for n in app.tasks if not n.startswith("celery.")}
    assert {routing.CHECK_PROVIDER, routing.RECORD_CHECK, routing.RECORD_PROXY_CALL} <= registered
    assert "fleet.sweep_overdue" not in registered  # the controller sweeps on its own clock (Controller.run_sweeps)
    assert registered <= set(routing.PLACEMENT)


def test_a_check_and_its_callback_are_placed_by_the_router(sent):
    dispatch.send_check(sent, "edge", 5.0, 30.0, 1700000000.0)
    ((name, kwargs, queue, embed),) = sent.sent
    assert (name, queue) == (routing.CHECK_PROVIDER, "provider.edge")
    assert kwargs == {"provider": "edge", "timeout": 5.0, "scheduled_at": 1700000000.0}
    (link,) = embed["callbacks"]
    assert link["task"] == routing.RECORD_CHECK and "queue" not in link["options"], "the worker's router places it"
    # what the worker does with the callback on success: apply_async through its app's router
    Signature.from_dict(dict(link), app=sent).apply_async(({"provider": "edge"},))
    assert sent.sent[-1][0] == routing.RECORD_CHECK and sent.sent[-1][2] == "fleet.controller"


def test_an_unplaced_task_fails_at_send_time(sent):
    with pytest.raises(routing.Unroutable):
        sent.send_task("fleet.unknown", kwargs={})
    assert sent.sent == []


def test_an_explicit_queue_would_not_be_needed():
    """`queue=` / "queue" appear only in the router (and the queue
    declarations) in fleet/, tasks/ and beat/."""
    pattern = re.compile(r"""\bqueue=|["']queue["']\s*:""")
    allowed = {"fleet/celery/routing.py", "fleet/celery/inspection.py"}  # the router; `celery inspect provider_status` names the queue
    offenders = []
    for top in ("fleet", "tasks", "beat"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in allowed:
                continue
            offenders += [f"{rel}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
                          if pattern.search(line) and "task_default_queue=" not in line]
    assert offenders == []
