"""A gateway session's life as the gateway asks for it: the username's `-sesstime-MINUTES`, the clients file's
`sessions`, and the Life each lease call carries (the client's limits over the process's); the lease script's side
is tests/fleet/leases/test_store.py, the whole with a real gateway tests/integration/test_gateway_sessions.py."""

from __future__ import annotations

import asyncio

import pytest

from fleet.gateway import decide
from fleet.gateway.clients import Client, ClientsError, SessionLimits, parse_clients
from fleet.store.leases import Life
from tests.fleet.gateway.harness import FakeLeases
from tests.fleet.gateway.test_core import ACME, TARGET, THREE, FakeDialer, core_of

TOKEN = "0123456789abcdef"


@pytest.mark.parametrize(("username", "want"), [
    ("acme-session-s1-sesstime-30", ("s1", "30")),
    ("acme-session-s1-sesstime-1440-pool-web", ("s1", "1440")),
    ("acme-sesstime-5", ("", "5")),
    ("acme-session-a-sesstime", ("a-sesstime", "")),  # a keyword with no value after it is part of the value
])
def test_sesstime_in_the_username(username, want):
    opts = decide.parse_username(username)
    assert (opts.session, opts.sesstime) == want


@pytest.mark.parametrize("username", ["acme-session-s1-sesstime-0", "acme-session-s1-sesstime-1441",
                                      "acme-session-s1-sesstime-x", "acme-session-s1-sesstime-01"])
def test_a_bad_sesstime_is_refused(username):
    with pytest.raises(ValueError, match="bad sesstime"):
        decide.parse_username(username)


def test_the_clients_file_sets_a_clients_session_limits():
    got = parse_clients(f'clients: {{a: {{token: "{TOKEN}", sessions: {{maxUses: 5, maxAge: 10m, maxErrorScore: 1.5, '
                        f'errorScoreDecrement: 0}}}}, b: {{token: "{TOKEN}", sessions: {{maxAge: 90}}}}, '
                        f'c: {{token: "{TOKEN}"}}}}')
    assert got["a"].sessions == SessionLimits(max_uses=5, max_age=600.0, max_error_score=1.5, error_decrement=0)
    assert got["b"].sessions == SessionLimits(max_age=90)
    assert got["c"].sessions == SessionLimits()


@pytest.mark.parametrize(("sessions", "message"), [
    ("[1]", "sessions must be a mapping"),
    ("{maxUse: 5}", "unknown field 'maxUse'"),
    ("{maxUses: -1}", "maxUses must be a whole number from 0 to 1e\\+06"),
    ("{maxUses: 2.5}", "maxUses must be a whole number"),
    ("{maxAge: soon}", "sessions.maxAge: invalid duration"),
    ("{maxAge: 48h}", "sessions.maxAge: duration .48h. is too long"),
    ("{maxAge: 90000}", "maxAge .* must be a number from 1 to 86400"),
    ("{maxErrorScore: 0}", "maxErrorScore must be a number from 0.1 to 1000"),
    ("{errorScoreDecrement: true}", "errorScoreDecrement must be a number"),
])
def test_bad_session_limits_are_refused_naming_the_field(sessions, message):
    with pytest.raises(ClientsError, match=message):
        parse_clients(f'clients: {{a: {{token: "{TOKEN}", sessions: {sessions}}}}}')


FLAGS = {"session_max_uses": 50, "session_max_age": 3000.0, "session_max_error_score": 3}


@pytest.mark.parametrize(("limits", "username", "want"), [
    (SessionLimits(), "acme", None),  # no session, no life
    (SessionLimits(), "acme-session-s1", Life(max_uses=50, max_age=3000.0, max_error_score=3, error_decrement=0.5)),
    (SessionLimits(), "acme-session-s1-sesstime-10", Life(max_uses=50, max_age=600.0, max_error_score=3)),
    (SessionLimits(max_uses=5, max_age=60, max_error_score=1.5, error_decrement=0.0), "acme-session-s1",
     Life(max_uses=5, max_age=60, max_error_score=1.5, error_decrement=0.0)),
    (SessionLimits(max_age=60), "acme-session-s1-sesstime-2", Life(max_uses=50, max_age=120.0, max_error_score=3)),
    (SessionLimits(max_uses=0), "acme-session-s1", None),  # the client's sessions never retire
])
def test_each_lease_of_a_session_carries_its_life(limits, username, want):
    leases = FakeLeases(dict(THREE))
    core = core_of(leases, FakeDialer(), **FLAGS)
    client = Client("acme", ACME.token, None, None, 0, False, limits)
    asyncio.run(core.attempts(client, decide.parse_username(username), TARGET, tunnel=True).next())
    assert leases.leased[0].life == want


def test_no_life_when_the_process_says_sessions_never_retire():
    leases = FakeLeases(dict(THREE))
    core = core_of(leases, FakeDialer(), session_max_uses=0)
    asyncio.run(core.attempts(ACME, decide.parse_username("acme-session-s1"), TARGET, tunnel=True).next())
    assert leases.leased[0].life is None
