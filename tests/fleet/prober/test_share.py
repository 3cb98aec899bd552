"""Endpoints, rendezvous ownership and phases (pure)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from fleet.prober.share import Endpoint, Endpoints, next_start, owner, parse_endpoint, phase, share

KEYS = [f"ns{i % 7}/proxy-{i}" for i in range(2000)]


@pytest.mark.parametrize(("raw", "want"), [
    ('{"uid": "u", "ip": "10.0.0.1", "port": 3128}', Endpoint("u", "10.0.0.1", 3128)),
    ('{"uid": "u", "ip": "2001:db8::1", "port": 1}', Endpoint("u", "2001:db8::1", 1)),
    ('{"uid": "", "ip": "10.0.0.1", "port": 3128}', None),
    ('{"uid": "u", "ip": "gate.vendor.example", "port": 7777, "scheme": "http", "credentials": "resi",'
     ' "username": "{user}-session-k3x9abcd"}',
     Endpoint("u", "gate.vendor.example", 7777, "http", "resi", "{user}-session-k3x9abcd")),  # a bought proxy
    ('{"uid": "u", "ip": "203.0.113.8", "port": 1080, "scheme": "socks5", "credentials": "dc"}',
     Endpoint("u", "203.0.113.8", 1080, "socks5", "dc")),
    ('{"uid": "u", "ip": "10.0.0.1", "port": 3128, "scheme": "ftp"}', None),
    ('{"uid": "u", "ip": "10.0.0.1", "port": 3128, "credentials": 7}', None),
    ('{"uid": "u", "ip": "host with spaces", "port": 3128}', None),
    ('{"uid": "u", "ip": "10.0.0.1", "port": 0}', None),
    ('{"uid": "u", "ip": "10.0.0.1", "port": true}', None),
    ('{"uid": "u", "ip": "10.0.0.1", "port": "3128"}', None),
    ('{"uid": "u", "ip": "10.0.0.1"}', None),
    ("[]", None),
    ("nope", None),
])
def test_parse_endpoint(raw, want):
    assert parse_endpoint(raw) == want


def test_endpoints_reuse_unchanged_documents_and_name_bad_ones():
    doc = json.dumps({"uid": "u", "ip": "10.0.0.1", "port": 3128})
    e = Endpoints()
    first = e.update({"a/x": doc, "a/bad": "nope"})
    assert first == {"a/x": Endpoint("u", "10.0.0.1", 3128)} and e.invalid == ["a/bad"]
    again = e.update({"a/x": doc})
    assert again["a/x"] is first["a/x"] and e.invalid == []
    assert e.update({}) == {}


def test_every_key_has_exactly_one_owner_and_the_split_is_even():
    members = ["p-a", "p-b", "p-c"]
    shares = {m: share(members, m, KEYS) for m in members}
    assert set().union(*shares.values()) == set(KEYS)
    assert sum(len(s) for s in shares.values()) == len(KEYS)
    assert all(500 < len(s) < 830 for s in shares.values()), {m: len(s) for m, s in shares.items()}


def test_a_member_leaving_moves_only_its_share():
    before = {k: owner(["p-a", "p-b", "p-c"], k) for k in KEYS}
    after = {k: owner(["p-a", "p-b"], k) for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert moved and all(before[k] == "p-c" for k in moved)
    assert share(["p-a"], "p-a", KEYS) == set(KEYS)


def test_me_counts_as_a_member_and_no_members_means_no_owner():
    assert share([], "alone", KEYS[:5]) == set(KEYS[:5])
    assert owner([], "a/b") is None


def test_phases_spread_over_the_interval():
    phases = [phase(k, 1.0) for k in KEYS]
    assert all(0 <= p < 1.0 for p in phases)
    per_tenth = Counter(int(p * 10) for p in phases)
    assert len(per_tenth) == 10 and max(per_tenth.values()) < 260
    assert phase("a/b", 2.0) == 2 * phase("a/b", 1.0)


@pytest.mark.parametrize(("now", "offset", "interval", "want"), [
    (100.0, 0.25, 1.0, 100.25),
    (100.25, 0.25, 1.0, 100.25),
    (100.3, 0.25, 1.0, 101.25),
    (7.0, 0.0, 5.0, 10.0),
])
def test_next_start(now, offset, interval, want):
    assert next_start(now, offset, interval) == pytest.approx(want)
