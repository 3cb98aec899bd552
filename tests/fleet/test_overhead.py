"""Celery's own overhead (issue 11): no stored results, no task events
unless something (Flower) turns them on, no log line per task unless
--log-level=debug."""

from __future__ import annotations

import logging

import pytest

from fleet import logs


def test_no_results_and_no_events_by_default():
    from fleet.celery.app import app

    conf = app.conf
    assert conf.task_ignore_result is True
    assert conf.worker_send_task_events is False
    assert conf.task_send_sent_event is False
    assert conf.task_track_started is False


@pytest.mark.parametrize("level, want", [("info", logging.WARNING), ("warning", logging.WARNING), ("debug", logging.DEBUG)])
def test_celery_logs_a_line_per_task_only_when_debugging(level, want):
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in logs.PER_TASK_LOGGERS})
    try:
        logs.setup("text", level)
        for name in ("celery.app.trace", "celery.worker.strategy"):
            assert logging.getLogger(name).getEffectiveLevel() == want
            assert logging.getLogger(name).isEnabledFor(logging.INFO) is (level == "debug")
    finally:
        handlers, lvl, levels = saved
        root.handlers[:] = handlers
        root.setLevel(lvl)
        for n, v in levels.items():
            logging.getLogger(n).setLevel(v)
