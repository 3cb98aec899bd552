"""The gateway's rules per domain (fleet.gateway.rules): the file's parse (each bad field named with its line), the
globs, first match wins, the defaults being the flags', `Rule.is_ban`, the bounded per-host cache, and `RulesFile`
re-reading a changed file (a broken version refused and logged once)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace

import pytest

from fleet import httpguard
from fleet.cli import subcommands as cli
from fleet.gateway import decide, process, rules, watched
from fleet.gateway.config import GatewayConfig
from fleet.gateway.process import GatewayError, config_of, rules_of
from fleet.gateway.rules import (
    CACHE_HOSTS,
    Rule,
    Rules,
    RulesError,
    RulesFile,
    default_rule,
    glob_matches,
    parse_domain,
    parse_rules,
)
from fleet.gateway.server import Gateway
from fleet.gateway.watched import RECHECK
from fleet.settings import Settings
from fleet.untrusted import read_bounded
from tests.fleet.gateway.harness import FakeClients, FakeLeases

FULL = """\
rules:
  - name: shop
    domains: ["shop.example", "*.shop.example"]
    bans:
      statuses: [403, 429]
      bodyPattern: "captcha|robot"
      header: {name: CF-Mitigated, pattern: "challenge"}
      slowerThan: 10s
      connectFailure: true
    actions:
      cooldown: 30m
      retries: 2
      pools: [datacenter, residential]
      retireSession: false
    politeness:
      perProxyPerSecond: 1.5
      concurrentPerClient: 4
      queueFor: 5s
    sessions:
      maxUses: 50
      maxAge: 3000s
      maxErrorScore: 3
      errorScoreDecrement: 0.5
  - domains: ["*"]
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)


def test_every_field_of_a_full_rule_is_read():
    got = parse_rules(FULL, source="rules.yaml")
    shop, rest = got.rules
    assert shop == Rule(
        name="shop", domains=("shop.example", "*.shop.example"), statuses=frozenset({403, 429}),
        body_pattern=re.compile("captcha|robot"), header=("cf-mitigated", re.compile("challenge")), slower_than=10.0,
        connect_failure=True, cooldown=1800.0, retries=2, pools=("datacenter", "residential"), retire_session=False,
        per_proxy_per_second=1.5, concurrent_per_client=4, queue_for=5.0, max_uses=50, max_age=3000.0,
        max_error_score=3.0, error_score_decrement=0.5)
    assert shop.attempts == 3
    assert rest == replace(default_rule(), name="rule-2", domains=("*",))  # the defaults, and its place as its name
    assert len(got) == 2
    assert parse_rules("rules: [{domains: [a.example, A.Example., '*.a.example']}]").rules[0].domains == (
        "a.example", "*.a.example")  # normalised, each once


# -- each bad field: its message, with the file, the line and the field ---------------------------------------------

def in_section(section: str, field: str) -> str:
    """A file whose second rule's `section` holds `field` on line 6."""
    return f"rules:\n  - domains: [a.example]\n  - name: second\n    domains: [b.example]\n    {section}:\n      {field}\n"


BAD_FIELDS = [
    ("bans", "statuses: [99]", "bans.statuses[0]", "a status code is a number from 100 to 599, got '99'"),
    ("bans", "statuses: [true]", "bans.statuses[0]", "a status code is a number from 100 to 599 (got True)"),
    ("bans", "statuses: '403'", "bans.statuses", "must be a list of status codes, at most 500 (got '403')"),
    ("bans", "bodyPattern: '('", "bans.bodyPattern",
     "not a regular expression (missing ), unterminated subpattern at position 0)"),
    ("bans", "bodyPattern: 'a*'", "bans.bodyPattern",
     "the pattern matches an empty body, so every response would be a ban"),
    ("bans", f"bodyPattern: {'x' * 1001}", "bans.bodyPattern", "the pattern is over 1000 characters"),
    ("bans", "bodyPattern: 3", "bans.bodyPattern", "must be a regular expression as a string (got 3)"),
    ("bans", "header: {pattern: x}", "bans.header.name",
     "required: a header's name (an HTTP field name, at most 100 characters) (got None)"),
    ("bans", "header: {name: 'a b'}", "bans.header.name",
     "required: a header's name (an HTTP field name, at most 100 characters) (got 'a b')"),
    ("bans", "header: {name: x, pattern: '['}", "bans.header.pattern",
     "not a regular expression (unterminated character set at position 0)"),
    ("bans", "header: {name: x, colour: red}", "bans.header.colour", "unknown field (known: name, pattern)"),
    ("bans", "header: cf-mitigated", "bans.header",
     "must be a mapping: {name: NAME, pattern: REGEX} (got 'cf-mitigated')"),
    ("bans", "slowerThan: fast", "bans.slowerThan", "must be a duration like 30s or 10m (got 'fast')"),
    ("bans", "slowerThan: 50ms", "bans.slowerThan", "must be from 100ms to 10m (got '50ms')"),
    ("bans", "slowerThan: 11m", "bans.slowerThan", "must be from 100ms to 10m (got '11m')"),
    ("bans", "connectFailure: 'yes'", "bans.connectFailure", "must be true or false (got 'yes')"),
    ("bans", "statusCodes: [403]", "bans.statusCodes",
     "unknown field (known: statuses, bodyPattern, header, slowerThan, connectFailure)"),
    ("actions", "cooldown: soon", "actions.cooldown", "must be a duration like 30s or 10m (got 'soon')"),
    ("actions", "cooldown: 7d", "actions.cooldown", "must be a duration like 30s or 10m (got '7d')"),
    ("actions", "cooldown: 169h", "actions.cooldown", "must be from 0s to 168h (7 days) (got '169h')"),
    ("actions", "cooldown: -1s", "actions.cooldown", "must be from 0s to 168h (7 days) (got '-1s')"),
    ("actions", "cooldown: [1]", "actions.cooldown", "must be a duration like 30s or 10m (got a list of 1 item(s))"),
    ("actions", "retries: 11", "actions.retries", "must be a whole number from 0 to 10 (got 11)"),
    ("actions", "retries: -1", "actions.retries", "must be a whole number from 0 to 10 (got -1)"),
    ("actions", "retries: 1.5", "actions.retries", "must be a whole number from 0 to 10 (got 1.5)"),
    ("actions", "retries: true", "actions.retries", "must be a whole number from 0 to 10 (got True)"),
    ("actions", "pools: [Data_Center]", "actions.pools[0]",
     "a ProxyPool's name is a DNS-1123 label (lowercase letters, digits, '-'; at most 63) (got 'Data_Center')"),
    ("actions", "pools: [a, b, a]", "actions.pools[2]", "a is named twice"),
    ("actions", f"pools: [{', '.join(f'p{i}' for i in range(11))}]", "actions.pools",
     "must be a list of at most 10 ProxyPool names (got a list of 11 item(s))"),
    ("actions", "pools: datacenter", "actions.pools", "must be a list of at most 10 ProxyPool names (got 'datacenter')"),
    ("actions", "retireSession: 1", "actions.retireSession", "must be true or false (got 1)"),
    ("actions", "wait: 1s", "actions.wait", "unknown field (known: cooldown, retries, pools, retireSession)"),
    ("politeness", "perProxyPerSecond: 0", "politeness.perProxyPerSecond",
     "must be a number from 0.01 to 10000 (got 0)"),
    ("politeness", "perProxyPerSecond: 10001", "politeness.perProxyPerSecond",
     "must be a number from 0.01 to 10000 (got 10001)"),
    ("politeness", "perProxyPerSecond: .nan", "politeness.perProxyPerSecond",
     "must be a number from 0.01 to 10000 (got nan)"),
    ("politeness", "perProxyPerSecond: '1'", "politeness.perProxyPerSecond",
     "must be a number from 0.01 to 10000 (got '1')"),
    ("politeness", "concurrentPerClient: 0", "politeness.concurrentPerClient",
     "must be a whole number from 1 to 10000 (got 0)"),
    ("politeness", "concurrentPerClient: 2.5", "politeness.concurrentPerClient",
     "must be a whole number from 1 to 10000 (got 2.5)"),
    ("politeness", "queueFor: 61s", "politeness.queueFor", "must be from 0s to 60s (got '61s')"),
    ("politeness", "queueFor: 120", "politeness.queueFor", "must be from 0s to 60s (got 120)"),
    ("sessions", "maxUses: 0", "sessions.maxUses", "must be a whole number from 1 to 1000000 (got 0)"),
    ("sessions", "maxUses: 1000001", "sessions.maxUses", "must be a whole number from 1 to 1000000 (got 1000001)"),
    ("sessions", "maxAge: 500ms", "sessions.maxAge", "must be from 1s to 168h (7 days) (got '500ms')"),
    ("sessions", "maxAge: 169h", "sessions.maxAge", "must be from 1s to 168h (7 days) (got '169h')"),
    ("sessions", "maxErrorScore: 0.05", "sessions.maxErrorScore", "must be a number from 0.1 to 1000 (got 0.05)"),
    ("sessions", "maxErrorScore: 1001", "sessions.maxErrorScore", "must be a number from 0.1 to 1000 (got 1001)"),
    ("sessions", "errorScoreDecrement: -0.5", "sessions.errorScoreDecrement",
     "must be a number from 0 to 1000 (got -0.5)"),
    ("sessions", "errorScoreDecrement: 1001", "sessions.errorScoreDecrement",
     "must be a number from 0 to 1000 (got 1001)"),
    ("sessions", "maxAgeSeconds: 10", "sessions.maxAgeSeconds",
     "unknown field (known: maxUses, maxAge, maxErrorScore, errorScoreDecrement)"),
]


@pytest.mark.parametrize(("section", "field", "path", "why"), BAD_FIELDS, ids=[c[1][:30] for c in BAD_FIELDS])
def test_a_bad_field_is_named_with_its_line(section, field, path, why):
    with pytest.raises(RulesError) as caught:
        parse_rules(in_section(section, field), source="rules.yaml")
    assert caught.value.problems == (f"rules.yaml:6: rules[1].{path}: {why}",)


@pytest.mark.parametrize("section", ["bans", "actions", "politeness", "sessions"])
def test_a_section_must_be_a_mapping_and_may_be_empty(section):
    text = f"rules:\n  - domains: [a.example]\n    {section}: [1]\n"
    with pytest.raises(RulesError, match=rf"^rules.yaml:3: rules\[0\].{section}: must be a mapping of "):
        parse_rules(text, source="rules.yaml")
    assert parse_rules(f"rules:\n  - domains: [a.example]\n    {section}:\n").rules[0] == parse_rules(
        "rules: [{domains: [a.example]}]").rules[0]


BAD_FILES = [
    ("", "rules.yaml: the file is empty: it must be a mapping with one key, rules (rules: [] for none)"),
    ("- a\n", "rules.yaml:1: the document: must be a mapping with one key, rules: a list of rules (got a list of 1 item(s))"),
    ("rule: []\n", "rules.yaml:1: the document: must be a mapping with one key, rules: a list of rules (got a mapping of 1 key(s))"),
    ("rules: []\nversion: 2\n", "rules.yaml:2: version: unknown field (known: rules)"),
    ("rules: {shop: 1}\n", "rules.yaml:1: rules: must be a list of rules (got a mapping of 1 key(s))"),
    ("rules:\n  - shop.example\n", "rules.yaml:2: rules[0]: must be a mapping with domains (and bans, actions, "
                                   "politeness, sessions) (got 'shop.example')"),
    ("rules:\n  - name: a\n", "rules.yaml:2: rules[0]: domains is required: the hosts the rule is for "
                              "(*.shop.example, shop.example, or *)"),
    ("rules:\n  - domains: []\n", "rules.yaml:2: rules[0].domains: must be a list of 1 to 100 domains (got [])"),
    ("rules:\n  - domains: " + str([f"h{i}.example" for i in range(101)]) + "\n",
     "rules.yaml:2: rules[0].domains: must be a list of 1 to 100 domains (got a list of 101 item(s))"),
    ("rules:\n  - domains:\n      - a.example\n      - 'shop.*'\n",
     "rules.yaml:4: rules[0].domains[1]: * is a wildcard only alone (*) or as the whole first label (*.shop.example) "
     "(got 'shop.*')"),
    ("rules:\n  - domains: ['a*.example']\n",
     "rules.yaml:2: rules[0].domains[0]: * is a wildcard only alone (*) or as the whole first label (*.shop.example) "
     "(got 'a*.example')"),
    ("rules:\n  - domains: ['*.*.example']\n",
     "rules.yaml:2: rules[0].domains[0]: * is a wildcard only alone (*) or as the whole first label (*.shop.example) "
     "(got '*.*.example')"),
    ("rules:\n  - domains: ['[ab].example']\n",
     "rules.yaml:2: rules[0].domains[0]: must be a host name, an IP address, *.DOMAIN or * (got '[ab].example')"),
    ("rules:\n  - domains: ['sh?p.example']\n",
     "rules.yaml:2: rules[0].domains[0]: must be a host name, an IP address, *.DOMAIN or * (got 'sh?p.example')"),
    ("rules:\n  - domains: ['*.10.0.0.1x', 'shop example']\n",
     "rules.yaml:2: rules[0].domains[1]: must be a host name, an IP address, *.DOMAIN or * (got 'shop example')"),
    ("rules:\n  - domains: [a.example]\n    name: 'a b'\n",
     "rules.yaml:3: rules[0].name: must be 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit "
     "(got 'a b')"),
    ("rules:\n  - {name: shop, domains: [a.example]}\n  - {name: shop, domains: [b.example]}\n",
     "rules.yaml:3: rules[1].name: shop is also the name of rules[0]"),
    ("rules:\n  - {domains: [a.example], colour: red}\n",
     "rules.yaml:2: rules[0].colour: unknown field (known: name, domains, bans, actions, politeness, sessions)"),
    # a value on the line after its key: the key's line
    ("rules:\n  - domains: [a.example]\n    actions:\n      retries: 2\n      cooldown:\n        soon\n",
     "rules.yaml:5: rules[0].actions.cooldown: must be a duration like 30s or 10m (got 'soon')"),
    # the hostile-YAML reader's own problems keep their line
    ("rules:\n  - domains: [a.example]\n    domains: [b.example]\n",
     "rules.yaml:3: rules[0].domains: duplicate key 'domains' (first at line 2) (line 3)"),
    ("rules:\n  - domains: [a.example\n", "rules.yaml:3: the document: not valid YAML at line 3, column 1: "
                                          "did not find expected ',' or ']'"),
    (b"\xff\xfer\x00", "rules.yaml looks UTF-16 encoded; save it as UTF-8"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_a_bad_file_is_refused_naming_the_place(text, message):
    with pytest.raises(RulesError) as caught:
        parse_rules(text, source="rules.yaml")
    assert caught.value.problems[0] == message


def test_every_problem_is_listed_up_to_a_bound():
    text = "rules:\n" + "".join(f"  - {{domains: [a.example], actions: {{retries: {11 + i}}}}}\n" for i in range(3))
    with pytest.raises(RulesError) as caught:
        parse_rules(text, source="r.yaml")
    assert caught.value.problems == tuple(f"r.yaml:{2 + i}: rules[{i}].actions.retries: must be a whole number from 0 "
                                          f"to 10 (got {11 + i})" for i in range(3))
    text = "rules:\n" + "  - {domains: [a.example], actions: {retries: 99}}\n" * 50
    with pytest.raises(RulesError) as caught:
        parse_rules(text, source="r.yaml")
    assert len(caught.value.problems) == rules.MAX_PROBLEMS + 1
    assert caught.value.problems[-1] == "r.yaml: (the first 20 problems; there may be more)"


def test_at_most_1000_rules():
    many = "rules:\n" + "  - {domains: [a.example]}\n" * 1001
    with pytest.raises(RulesError, match=r"^r.yaml:1: rules: at most 1000 rules \(got 1001\)$"):
        parse_rules(many, source="r.yaml")
    assert len(parse_rules("rules:\n" + "  - {domains: [a.example]}\n" * 1000)) == 1000


# -- globs and first match ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("domain", "host", "matches"), [
    ("*.shop.example", "a.shop.example", True),
    ("*.shop.example", "a.b.shop.example", True),
    ("*.shop.example", "A.Shop.EXAMPLE.", True),
    ("*.shop.example", "shop.example", False),
    ("*.shop.example", "xshop.example", False),
    ("*.shop.example", "shop.example.evil", False),
    ("*.shop.example", ".shop.example", False),  # an empty first label is no host under it
    ("shop.example", "SHOP.example.", True),
    ("shop.example", "a.shop.example", False),
    ("Shop.Example.", "shop.example", True),
    ("*", "anything.example", True),
    ("*", "10.0.0.1", True),
    ("10.0.0.1", "10.0.0.1", True),
    ("10.0.0.1", "10.0.0.10", False),
    ("[2001:db8::1]", "2001:DB8:0:0::1", True),
    ("2001:db8::1", "[2001:db8::1]", True),
])
def test_a_glob_matches_hosts(domain, host, matches):
    glob = parse_domain(domain)
    assert glob_matches(glob, host) is matches
    assert (Rules([_rule("r", glob)]).for_host(host).name == "r") is matches


def test_only_a_leading_star_label_or_a_lone_star_is_a_wildcard():
    # fnmatch's [ and ? are plain characters: no glob of them is accepted, and none matches as fnmatch would
    for domain in ("sh?p.example", "[s]hop.example", "*shop.example", "shop*", "*.", "", "*.*"):
        with pytest.raises(ValueError):
            parse_domain(domain)
    assert not glob_matches("sh?p.example", "shop.example") and not glob_matches("[s]hop.example", "shop.example")


def _rule(name: str, *domains: str) -> Rule:
    return replace(default_rule(), name=name, domains=domains)


def test_the_first_matching_rule_wins_in_file_order():
    book = parse_rules("""\
rules:
  - {name: broad, domains: ["*.example.com"]}
  - {name: shop, domains: ["shop.example.com", "shop.example.org"]}
  - {name: deep, domains: ["*.a.b.example.org"]}
  - {name: org, domains: ["*.example.org"]}
  - {name: rest, domains: ["*"]}
  - {name: never, domains: ["x.example.net"]}
""")
    assert [book.for_host(h).name for h in ("shop.example.com", "shop.example.org", "x.a.b.example.org",
                                            "a.b.example.org", "example.org", "x.example.net", "EXAMPLE.COM.")] == [
        "broad", "shop", "deep", "org", "rest", "rest", "rest"]
    # the index answers what a scan of the rules in order answers
    for host in ("a.example.com", "example.com", "q.a.b.example.org", "b.example.org", "other", "10.0.0.1"):
        scan = next((r for r in book.rules if any(glob_matches(g, host) for g in r.domains)), book.default)
        assert book.for_host(host) is scan, host
    without = parse_rules("rules:\n  - {name: shop, domains: [shop.example]}\n")
    assert without.for_host("other.example") is without.default and without.default.name == "default"


def test_the_per_host_cache_stays_bounded():
    book = parse_rules("rules:\n  - {name: shop, domains: ['*.shop.example']}\n")
    for i in range(20_000):
        rule = book.for_host(f"h{i}.shop.example" if i % 2 else f"h{i}.other.example")
        assert rule.name == ("shop" if i % 2 else "default")
        assert len(book._cache) <= CACHE_HOSTS
    assert book.for_host("h1.shop.example").name == "shop"


# -- the defaults are the flags' -------------------------------------------------------------------------------------

def _flags_behaviour(rule: Rule) -> tuple:
    return rule.statuses, rule.body_pattern, rule.cooldown, rule.attempts


def test_without_rules_every_host_gets_the_flags_behaviour():
    config = GatewayConfig()
    flags = (config.ban_statuses, config.ban_pattern, config.cooldown_blocked, config.max_attempts)
    assert _flags_behaviour(Rules().for_host("shop.example")) == flags
    assert _flags_behaviour(parse_rules("rules: []").for_host("shop.example")) == flags
    assert _flags_behaviour(rules_of(Settings(), config_of(Settings())).for_host("shop.example")) == flags
    assert flags == (frozenset({403, 429, 503}), None, 600.0, 3)  # today's defaults, as the flags' help says
    default = Rules().default
    assert (default.header, default.slower_than, default.connect_failure, default.pools, default.retire_session,
            default.per_proxy_per_second, default.concurrent_per_client) == (None, None, False, (), True, None, None)
    assert (default.queue_for, default.max_uses, default.max_age, default.max_error_score,
            default.error_score_decrement) == (5.0, 50, 3000.0, 3.0, 0.5)

    other = GatewayConfig(ban_statuses=frozenset({418}), cooldown_blocked=42.0, max_attempts=5)
    gw = Gateway(FakeLeases(), FakeClients(), other, httpguard.Guard(httpguard.Limits()))  # no rules file
    assert _flags_behaviour(gw.core.rules.for_host("shop.example")) == (frozenset({418}), None, 42.0, 5)


def test_the_flags_fill_what_a_rule_leaves_out():
    config = config_of(Settings(gateway_ban_statuses="418", gateway_ban_pattern="captcha", cooldown_blocked=42.0,
                                gateway_max_attempts=5))
    book = parse_rules("rules:\n  - {domains: [a.example], actions: {retries: 0}}\n  - {domains: [b.example], "
                       "bans: {statuses: [], bodyPattern: ''}}\n", defaults=config)
    a, b, other = (book.for_host(h) for h in ("a.example", "b.example", "c.example"))
    assert _flags_behaviour(other) == (frozenset({418}), re.compile("captcha"), 42.0, 5)
    assert _flags_behaviour(a) == (frozenset({418}), re.compile("captcha"), 42.0, 1)
    assert _flags_behaviour(b) == (frozenset(), None, 42.0, 5)  # explicitly none


# -- is_ban -----------------------------------------------------------------------------------------------------------

SHOP = parse_rules(FULL).rules[0]


@pytest.mark.parametrize(("status", "headers", "window", "ttfb", "why"), [
    (403, [], None, None, "status"),
    (503, [], None, None, None),  # not in this rule's statuses
    (200, [], "please solve the captcha", None, "body"),
    (200, [], None, None, None),  # a pattern and no window (br, or not read): no body ban
    (200, [("Cf-Mitigated", "challenge")], "fine", None, "header"),
    (200, [("cf-mitigated", "none")], "fine", None, None),
    (200, [("x-other", "challenge")], "fine", None, None),
    (200, [], "fine", 10.5, "slow"),
    (200, [], "fine", 10.0, None),  # over the bound, not at it
    (429, [("cf-mitigated", "challenge")], "robot", 30.0, "status"),  # the first condition met is named
    (200, [("cf-mitigated", "challenge")], "robot", 30.0, "body"),
    (200, [("cf-mitigated", "challenge")], "fine", 30.0, "header"),
])
def test_is_ban_names_the_condition_met(status, headers, window, ttfb, why):
    assert SHOP.is_ban(status, headers, window, ttfb) == why


def test_a_header_alone_defaults_to_any_value_and_the_default_rule_bans_as_today():
    rule = parse_rules("rules:\n  - {domains: ['*'], bans: {header: {name: x-blocked}}}\n").rules[0]
    assert rule.header == ("x-blocked", re.compile(".*")) and rule.is_ban(200, [("X-Blocked", "")]) == "header"
    assert rule.is_ban(200, [("x-other", "1")]) is None
    pattern = re.compile("captcha")
    today = default_rule(GatewayConfig(ban_pattern=pattern))
    for status in (200, 403, 429, 500, 503):
        for window in (None, "ok", "a captcha"):
            assert (today.is_ban(status, [], window) is not None) == decide.is_ban(
                status, GatewayConfig().ban_statuses, pattern, window)
            assert today.wants_body(status) is True  # a pattern: every response's start is read
    assert default_rule().wants_body(403) and not default_rule().wants_body(200)


# -- the file in force -----------------------------------------------------------------------------------------------

GOOD = "rules:\n  - name: shop\n    domains: [shop.example]\n    actions:\n      cooldown: 30m\n"
BROKEN = "rules:\n  - name: shop\n    domains: [shop.example]\n    actions:\n      cooldown: soon\n"
FIXED = "rules:\n  - name: shop\n    domains: [shop.example]\n    actions:\n      cooldown: 45m\n"


def _write(path, text: str, stamp: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(stamp * 10**9, stamp * 10**9))  # a new mtime each version, however fast the test


def test_the_file_is_re_read_and_a_broken_version_is_refused_and_logged_once(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="fleet.gateway")
    reads = []
    monkeypatch.setattr(watched, "read_bounded", lambda *a: reads.append(a) or read_bounded(*a))
    now = [0.0]
    path = tmp_path / "rules.yaml"
    _write(path, GOOD.replace("30m", "20m"), 1)
    f = RulesFile(str(path), clock=lambda: now[0])
    assert f.for_host("shop.example").cooldown == 1200.0 and len(f) == 1
    _write(path, GOOD, 2)
    now[0] += RECHECK / 2
    assert f.for_host("shop.example").cooldown == 1200.0  # not looked at before RECHECK s
    now[0] += RECHECK / 2
    assert f.for_host("shop.example").cooldown == 1800.0

    _write(path, BROKEN, 3)
    del reads[:]
    for _ in range(5):  # several looks at the same broken version, and requests between them
        now[0] += RECHECK
        for _ in range(3):
            assert f.for_host("shop.example").cooldown == 1800.0  # the last good one
    assert len(reads) == 1  # read once: a version is judged once
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].getMessage() == "the rules file is not usable; the last good version stays in force"
    assert errors[0].fields["error"] == f"{path}:5: rules[0].actions.cooldown: must be a duration like 30s or 10m (got 'soon')"

    _write(path, FIXED, 4)
    now[0] += RECHECK
    assert f.rules.for_host("shop.example").cooldown == 2700.0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == ["rules file re-read"] * 2

    _write(path, BROKEN, 5)  # broken again: a new version, logged again (once)
    for _ in range(3):
        now[0] += RECHECK
        assert f.for_host("shop.example").cooldown == 2700.0
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2

    path.unlink()  # gone: the last good one stays, said once
    for _ in range(3):
        now[0] += RECHECK
        assert f.for_host("shop.example").cooldown == 2700.0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 3 and errors[-1].fields["error"] == f"cannot read --gateway-rules-file {path}: No such file or directory"


def test_the_first_version_must_be_usable(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(BROKEN)
    with pytest.raises(RulesError) as caught:
        RulesFile(str(path))
    assert caught.value.problems == (f"{path}:5: rules[0].actions.cooldown: must be a duration like 30s or 10m "
                                     "(got 'soon')",)
    with pytest.raises(RulesError, match=r"cannot read --gateway-rules-file .*missing\.yaml: No such file"):
        RulesFile(str(tmp_path / "missing.yaml"))
    (tmp_path / "big.yaml").write_text("rules: []\n" + "#" * (1024 * 1024))
    with pytest.raises(RulesError, match="at most 1048576 are read"):
        RulesFile(str(tmp_path / "big.yaml"))
    with pytest.raises(GatewayError, match=r"rules.yaml:5: rules\[0\].actions.cooldown"):
        rules_of(Settings(gateway_rules_file=str(path)), GatewayConfig())
    path.write_text(GOOD)
    assert rules_of(Settings(gateway_rules_file=str(path)), GatewayConfig()).for_host("shop.example").name == "shop"


def test_the_gateway_refuses_to_start_on_a_broken_rules_file(tmp_path, capsys, monkeypatch):
    clients = tmp_path / "clients.yaml"
    clients.write_text("clients: {acme: {token: 0123456789abcdef0123}}\n")
    path = tmp_path / "rules.yaml"
    path.write_text(BROKEN)

    def no_redis(*args, **kwargs):
        raise AssertionError("the gateway went on to Redis with a broken rules file")

    monkeypatch.setattr(process.Store, "from_url", no_redis)  # refused before Redis is touched
    code = cli.main(["gateway", "--gateway-clients-file", str(clients), "--gateway-rules-file", str(path),
                     "--broker", "redis://127.0.0.1:1/0"])
    assert code == 2
    assert capsys.readouterr().err == (f"fleet gateway: {path}:5: rules[0].actions.cooldown: must be a duration like "
                                       "30s or 10m (got 'soon')\n")
