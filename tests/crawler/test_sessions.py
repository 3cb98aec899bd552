"""fleet_crawler.SessionPool as Crawlee's: retirement after N uses, at its age, at an error score, on a ban
status; a new session while the pool has room, else a usable one; each session a sticky gateway username."""

from __future__ import annotations

import random

import pytest

from fleet.gateway.decide import Options, parse_username
from fleet_crawler import Gateway, Session, SessionPool


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_the_defaults_are_crawlees(clock):
    pool = SessionPool(clock=clock)
    assert (pool.max_pool_size, pool.limits.max_usage_count, pool.limits.max_age, pool.limits.max_error_score,
            pool.limits.error_score_decrement) == (1000, 50, 3000.0, 3.0, 0.5)
    assert pool.ban_statuses == {401, 403, 429}


def test_a_session_retires_after_its_uses(clock):
    session = SessionPool(clock=clock, max_usage_count=3).get()
    for _ in range(2):
        session.mark_good()
        assert session.is_usable
    session.mark_good()
    assert session.is_max_usage_reached and session.retired and not session.is_usable


def test_a_session_retires_at_its_age(clock):
    session = SessionPool(clock=clock).get()
    clock.now += 2999.9
    assert session.is_usable
    clock.now += 0.1
    assert session.is_expired and not session.is_usable


@pytest.mark.parametrize(("marks", "usable", "score"), [
    ("bbb", False, 3.0),  # three bad uses in a row: blocked
    ("bb", True, 2.0),
    ("bbgb", True, 2.5),  # a good one takes 0.5 off
    ("bbgbb", False, 3.5),
    ("gggb", True, 1.0),  # the score never goes below 0
])
def test_the_error_score(clock, marks, usable, score):
    session = SessionPool(clock=clock).get()
    for mark in marks:
        session.mark_good() if mark == "g" else session.mark_bad()
    assert (session.is_usable, session.error_score) == (usable, score)


@pytest.mark.parametrize(("status", "retired"), [(200, False), (404, False), (401, True), (403, True), (429, True),
                                                 (503, False)])
def test_a_ban_status_retires_at_once(clock, status, retired):
    session = SessionPool(clock=clock).get()
    assert session.retire_on_status(status) is retired
    assert session.is_usable is not retired


def test_the_pool_makes_sessions_while_it_has_room_then_picks_a_usable_one(clock):
    pool = SessionPool(clock=clock, max_pool_size=3, rng=random.Random(7))
    first = [pool.get() for _ in range(3)]
    assert len({s.id for s in first}) == 3 and len(pool) == 3
    picked = {pool.get().id for _ in range(30)}
    assert picked <= {s.id for s in first} and len(pool) == 3
    pool.report(first[0], 429)  # a ban: gone from the pool at once
    assert len(pool) == 2 and first[0].id not in {s.id for s in pool.sessions}
    fresh = pool.get()  # room again: a new session, a new id, so another proxy at the gateway
    assert fresh.id not in {s.id for s in first}
    clock.now += 3000  # every session expires: the next get drops them and starts anew
    again = pool.get()
    assert len(pool) == 1 and again.id not in {s.id for s in [*first, fresh]}


def test_report_counts_uses_and_errors(clock):
    pool = SessionPool(clock=clock, max_error_score=2)
    session = pool.get()
    pool.report(session, 200)
    pool.report(session, None)  # no answer: bad
    assert (session.usage_count, session.error_score) == (2, 1.0)
    pool.report(session, None)
    assert session.retired and len(pool) == 0


def test_a_session_by_id_is_kept_and_replaced_under_its_id_when_unusable(clock):
    pool = SessionPool(clock=clock)
    session = pool.get("site-a")
    assert pool.get("site-a") is session
    session.retire()
    replaced = pool.get("site-a")
    assert replaced is not session and replaced.id == "site-a" and replaced.usage_count == 0


def test_each_session_is_a_sticky_gateway_username(clock):
    gw = Gateway("http://127.0.0.1:8888", client="acme", token="tok")
    pool = SessionPool(gw, clock=clock, pool="crawl-eu", sesstime=30)
    session = pool.get()
    assert parse_username(session.username) == Options("acme", session=session.id, sesstime="30", pool="crawl-eu")
    assert session.proxy_url == gw.proxy_url(session=session.id, sesstime=30, pool="crawl-eu")
    assert session.playwright()["username"] == session.username


def test_bad_options_are_refused_when_the_pool_is_made():
    with pytest.raises(ValueError, match="not one the gateway takes"):
        SessionPool(Gateway("http://127.0.0.1:8888", client="acme", token="tok"), pool="Not_A_Pool")


def test_a_session_without_a_gateway_says_so(clock):
    session: Session = SessionPool(clock=clock).get()
    with pytest.raises(ValueError, match="no gateway"):
        _ = session.proxy_url
