"""The gateway's rules per domain (`--gateway-rules-file`, a mounted ConfigMap in a cluster; optional): what counts
as a ban from a site, what a ban does, how politely a site is crawled, how long a crawler's session lives.

```yaml
rules:
  - name: shop                               # for logs and metrics (default rule-N, N its 1-based position)
    domains: ["shop.example", "*.shop.example"]  # required; "*.D" any host under D (not D), "*" every host
    bans:                                    # any one of these is a ban
      statuses: [403, 429]                   # default --gateway-ban-statuses
      bodyPattern: "captcha|robot"           # default --gateway-ban-pattern ("" none)
      header: {name: cf-mitigated, pattern: challenge}  # pattern default ".*" (the header is there)
      slowerThan: 10s                        # time to the response's first byte over this (default off)
      connectFailure: true                   # a failed connect or CONNECT (default false: an error)
    actions:
      cooldown: 30m                          # default --cooldown-blocked
      retries: 2                             # default --gateway-max-attempts minus 1
      pools: [datacenter, residential]       # a waterfall of ProxyPools (default: the crawler's -pool-, or none)
      retireSession: true
    politeness: {perProxyPerSecond: 1.0, concurrentPerClient: 4, queueFor: 5s}
    sessions: {maxUses: 50, maxAge: 3000s, maxErrorScore: 3, errorScoreDecrement: 0.5}
```

- `parse_rules(text, defaults=, source=)`: pure; the `Rules`, or a `RulesError` listing each problem as
  `SOURCE:LINE: FIELD: why` (`rules.yaml:12: rules[1].actions.cooldown: must be a duration like 30s or 10m (got
  'soon')`). Every number is bounded, every unknown field refused with the known ones named.
- `Rules.for_host(host)`: the first rule in file order one of whose domains matches the host, else the default rule.
  Every value a rule leaves out, and the default rule whole, come from `defaults` (a `GatewayConfig`: the gateway's
  flags) and the constants below, in `default_rule` only: no file, or no match, behaves as the flags say. The
  answer is cached per host (at most `CACHE_HOSTS`, then the cache starts over).
- `Rule.is_ban(status, headers, body_window, ttfb)`: which of the rule's ban conditions a response meets.
- `RulesFile`: the file in force, re-read when it changes, a broken version refused (`fleet.gateway.watched`).

A domain is a glob of this module's own (not fnmatch: `[` and `?` are plain characters): a host name or IP
address, `*.` before a host name, or `*` alone; case-insensitive, a trailing '.' dropped.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from fleet.durations import parse_duration
from fleet.gateway import decide
from fleet.gateway.config import GatewayConfig
from fleet.gateway.watched import WatchedFile
from fleet.untrusted import FileProblem, Located, YamlLimits, YamlProblem, decode, key_step, load_located
from providers import names
from providers.text import show

LIMITS = YamlLimits(max_nodes=200_000)  # the one hostile-YAML reader's bounds (fleet.untrusted)
MAX_RULES = 1000
MAX_DOMAINS = 100  # per rule
MAX_POOLS = 10
MAX_STATUSES = 500
MAX_PROBLEMS = 20  # listed in one RulesError; the parse stops there
MAX_HEADER_NAME = 100
CACHE_HOSTS = 10_000
DAY = 86400.0

# The defaults no flag sets (Crawlee's SessionPool for the sessions).
QUEUE_FOR = 5.0
ERROR_SCORE_DECREMENT = 0.5

BY_STATUS, BY_BODY, BY_HEADER, BY_SLOW = decide.BY_STATUS, decide.BY_BODY, "header", "slow"  # `Rule.is_ban`
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", re.ASCII)  # an HTTP field name


class RulesError(ValueError):
    """The rules file is not usable: `problems`, each `SOURCE:LINE: FIELD: why`."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class RuleDefaults(Protocol):
    """What the rules take from the gateway's flags (a `GatewayConfig` is one)."""

    @property
    def ban_statuses(self) -> frozenset[int]: ...
    @property
    def ban_pattern(self) -> re.Pattern[str] | None: ...
    @property
    def cooldown_blocked(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def session_max_uses(self) -> int: ...
    @property
    def session_max_age(self) -> float: ...
    @property
    def session_max_error_score(self) -> int: ...


FLAG_DEFAULTS = GatewayConfig()  # the flags' own defaults


@dataclass(frozen=True)
class Rule:
    """One rule with every value resolved (None only where None means off)."""

    name: str
    domains: tuple[str, ...]  # normalised globs; () for the default rule
    statuses: frozenset[int]
    body_pattern: re.Pattern[str] | None
    header: tuple[str, re.Pattern[str]] | None  # (lowercase name, value pattern)
    slower_than: float | None  # seconds to the first byte of the response
    connect_failure: bool
    cooldown: float
    retries: int  # more attempts on other proxies after the first
    pools: tuple[str, ...]  # () the crawler's own -pool- (or none)
    retire_session: bool
    per_proxy_per_second: float | None
    concurrent_per_client: int | None
    queue_for: float
    max_uses: int
    max_age: float
    max_error_score: float
    error_score_decrement: float

    @property
    def attempts(self) -> int:
        """Proxies one request may try (what --gateway-max-attempts is without rules)."""
        return self.retries + 1

    def wants_body(self, status: int) -> bool:
        """Must the start of a response body be read before it is relayed: a body pattern (searched in it), or a
        ban status (the body kept, to be relayed if every proxy tried is banned)? As the flags decide it today."""
        return self.body_pattern is not None or status in self.statuses

    def is_ban(self, status: int, headers: Sequence[tuple[str, str]] = (), body_window: str | None = None,
               ttfb: float | None = None) -> str | None:
        """Which ban condition a response meets, the first of BY_STATUS, BY_BODY (the pattern in `body_window`,
        `decide.ban_window`'s text), BY_HEADER, BY_SLOW (`ttfb` seconds over `slower_than`), or None."""
        why = decide.ban_reason(status, self.statuses, self.body_pattern, body_window)
        if why is not None:
            return why
        if self.header is not None:
            name, pattern = self.header
            if any(k.lower() == name and pattern.search(v) for k, v in headers):
                return BY_HEADER
        if self.slower_than is not None and ttfb is not None and ttfb > self.slower_than:
            return BY_SLOW
        return None


def default_rule(defaults: RuleDefaults = FLAG_DEFAULTS, name: str = "default") -> Rule:
    """The rule of a host no rule names, and the value of every field a rule leaves out: the one place of each
    default."""
    return Rule(name=name, domains=(), statuses=frozenset(defaults.ban_statuses), body_pattern=defaults.ban_pattern,
                header=None, slower_than=None, connect_failure=False, cooldown=float(defaults.cooldown_blocked),
                retries=max(0, defaults.max_attempts - 1), pools=(), retire_session=True, per_proxy_per_second=None,
                concurrent_per_client=None, queue_for=QUEUE_FOR, max_uses=defaults.session_max_uses,
                max_age=float(defaults.session_max_age), max_error_score=float(defaults.session_max_error_score),
                error_score_decrement=ERROR_SCORE_DECREMENT)


# -- domains ------------------------------------------------------------------------------------------------------

def normal_host(host: str) -> str:
    """A host as rules compare it: lowercase, no trailing '.', an IPv6 address compressed without brackets."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h).compressed
        except ValueError:
            return h
    return h[:-1] if h.endswith(".") else h


def parse_domain(text: object) -> str:
    """A rule's domain as a normalised glob; ValueError saying what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"must be a host name, an IP address, *.DOMAIN or * (got {show(text)})")
    if text == "*":
        return "*"
    glob = normal_host(text)
    rest = glob[2:] if glob.startswith("*.") else glob
    if "*" in rest:
        raise ValueError(f"* is a wildcard only alone (*) or as the whole first label (*.shop.example) (got {show(text)})")
    if names.is_hostname(rest) or (rest is glob and decide.is_ip(rest)):
        return glob
    raise ValueError(f"must be a host name, an IP address, *.DOMAIN or * (got {show(text)})")


def glob_matches(glob: str, host: str) -> bool:
    """Does a normalised glob (`parse_domain`) match a host (any case, a trailing '.' or not)?"""
    if glob == "*":
        return True
    h = normal_host(host)
    if glob.startswith("*."):
        return h.endswith(glob[1:]) and len(h) > len(glob) - 1
    return h == glob


# -- the rules ----------------------------------------------------------------------------------------------------

class RuleBook(Protocol):
    """What answers per request: `Rules`, or the `RulesFile` that holds them."""

    def for_host(self, host: str) -> Rule: ...


class Rules:
    """Rules in file order and the default rule; `for_host` per request."""

    def __init__(self, rules: Sequence[Rule] = (), *, defaults: RuleDefaults = FLAG_DEFAULTS) -> None:
        self.rules = tuple(rules)
        self.default = default_rule(defaults)
        # An index that gives what a first-match scan of the globs would: each glob's first rule.
        self._exact: dict[str, int] = {}
        self._under: dict[str, int] = {}  # "*.D" by D
        self._any: int | None = None
        for i, rule in enumerate(self.rules):
            for glob in rule.domains:
                if glob == "*":
                    self._any = i if self._any is None else self._any
                elif glob.startswith("*."):
                    self._under.setdefault(glob[2:], i)
                else:
                    self._exact.setdefault(glob, i)
        self._cache: dict[str, Rule] = {}

    def __len__(self) -> int:
        return len(self.rules)

    def for_host(self, host: str) -> Rule:
        """The first rule with a domain matching `host`, else the default rule."""
        rule = self._cache.get(host)
        if rule is None:
            if len(self._cache) >= CACHE_HOSTS:
                self._cache.clear()
            rule = self._cache[host] = self._find(normal_host(host))
        return rule

    def _find(self, host: str) -> Rule:
        found = [i for i in (self._any, self._exact.get(host)) if i is not None]
        dot = host.find(".")
        while dot >= 0:
            i = self._under.get(host[dot + 1:])
            if i is not None and dot > 0:
                found.append(i)
            dot = host.find(".", dot + 1)
        return self.rules[min(found)] if found else self.default


# -- parsing ------------------------------------------------------------------------------------------------------

class _Bad(ValueError):
    """A field's problem; `under`: the path below the field it was found at (`.name` of a header)."""

    def __init__(self, why: str, under: str = "") -> None:
        super().__init__(why)
        self.under = under


def _number(value: Any, low: float, high: float, *, whole: bool = False) -> Any:
    kind = "a whole number" if whole else "a number"
    ok = isinstance(value, int) or (isinstance(value, float) and not whole)
    if isinstance(value, bool) or not ok or not low <= value <= high:
        raise _Bad(f"must be {kind} from {_plain(low)} to {_plain(high)} (got {show(value)})")
    return value


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _duration(low: float, high: float, shown: str) -> Callable[[Any], float]:
    """A converter of a duration (`30s`, `10m`, `1h30m`, `500ms`, or a number of seconds) from `low` to `high`."""

    def convert(value: Any) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        elif isinstance(value, str):
            try:
                seconds = parse_duration(value, maximum=float("inf"))
            except ValueError:
                raise _Bad(f"must be a duration like 30s or 10m (got {show(value)})") from None
        else:
            raise _Bad(f"must be a duration like 30s or 10m (got {show(value)})")
        if not low <= seconds <= high:
            raise _Bad(f"must be {shown} (got {show(value)})")
        return seconds

    return convert


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false (got {show(value)})")
    return value


def _statuses(value: Any) -> frozenset[int]:
    if not isinstance(value, list) or len(value) > MAX_STATUSES:
        raise _Bad(f"must be a list of status codes, at most {MAX_STATUSES} (got {show(value)})")
    for i, status in enumerate(value):
        if isinstance(status, bool) or not isinstance(status, int):
            raise _Bad(f"a status code is a number from 100 to 599 (got {show(status)})", f"[{i}]")
        try:
            decide.parse_statuses(str(status))
        except ValueError as exc:
            raise _Bad(str(exc), f"[{i}]") from None
    return frozenset(value)


def _pattern(value: Any, *, matches_empty: bool = False) -> re.Pattern[str] | None:
    if not isinstance(value, str):
        raise _Bad(f"must be a regular expression as a string (got {show(value)})")
    try:
        return decide.compile_ban_pattern(value, matches_empty=matches_empty)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


HEADER_FIELDS = ("name", "pattern")


def _header(value: Any) -> tuple[str, re.Pattern[str]]:
    if not isinstance(value, dict):
        raise _Bad(f"must be a mapping: {{name: NAME, pattern: REGEX}} (got {show(value)})")
    for key in value:
        if key not in HEADER_FIELDS:
            raise _Bad(f"unknown field (known: {', '.join(HEADER_FIELDS)})", key_step(key))
    name = value.get("name")
    if not isinstance(name, str) or len(name) > MAX_HEADER_NAME or not _TOKEN.fullmatch(name):
        raise _Bad(f"required: a header's name (an HTTP field name, at most {MAX_HEADER_NAME} characters) "
                   f"(got {show(name)})", ".name")
    try:
        pattern = _pattern(value.get("pattern", ".*"), matches_empty=True)
    except _Bad as bad:
        raise _Bad(str(bad), ".pattern") from None
    return name.lower(), pattern or re.compile(".*")


def _pools(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_POOLS:
        raise _Bad(f"must be a list of at most {MAX_POOLS} ProxyPool names (got {show(value)})")
    for i, pool in enumerate(value):
        if not names.is_label(pool):
            raise _Bad(f"a ProxyPool's name is {names.LABEL_RULE} (got {show(pool)})", f"[{i}]")
        if pool in value[:i]:
            raise _Bad(f"{pool} is named twice", f"[{i}]")
    return tuple(value)


# The sections of a rule: each file field → (Rule's attribute, its converter).
SECTIONS: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "bans": {
        "statuses": ("statuses", _statuses),
        "bodyPattern": ("body_pattern", _pattern),
        "header": ("header", _header),
        "slowerThan": ("slower_than", _duration(0.1, 600.0, "from 100ms to 10m")),
        "connectFailure": ("connect_failure", _bool),
    },
    "actions": {
        "cooldown": ("cooldown", _duration(0.0, 7 * DAY, "from 0s to 168h (7 days)")),
        "retries": ("retries", lambda v: _number(v, 0, 10, whole=True)),
        "pools": ("pools", _pools),
        "retireSession": ("retire_session", _bool),
    },
    "politeness": {
        "perProxyPerSecond": ("per_proxy_per_second", lambda v: float(_number(v, 0.01, 10_000))),
        "concurrentPerClient": ("concurrent_per_client", lambda v: _number(v, 1, 10_000, whole=True)),
        "queueFor": ("queue_for", _duration(0.0, 60.0, "from 0s to 60s")),
    },
    "sessions": {
        "maxUses": ("max_uses", lambda v: _number(v, 1, 1_000_000, whole=True)),
        "maxAge": ("max_age", _duration(1.0, 7 * DAY, "from 1s to 168h (7 days)")),
        "maxErrorScore": ("max_error_score", lambda v: float(_number(v, 0.1, 1000))),
        "errorScoreDecrement": ("error_score_decrement", lambda v: float(_number(v, 0, 1000))),
    },
}
RULE_FIELDS = ("name", "domains", *SECTIONS)


class _Report:
    """The problems found so far, each placed by its field's line."""

    def __init__(self, source: str, doc: Located) -> None:
        self.source, self.doc = source, doc
        self.problems: list[str] = []

    @property
    def full(self) -> bool:
        return len(self.problems) >= MAX_PROBLEMS

    def add(self, path: str, why: str) -> None:
        if self.full:
            return
        line = self.doc.line(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        self.problems.append(f"{where}: {path or 'the document'}: {why}")


def _field(path: str, key: Any) -> str:
    return (path + key_step(key)).lstrip(".")


def parse_rules(text: str | bytes, *, defaults: RuleDefaults = FLAG_DEFAULTS, source: str = "the rules file") -> Rules:
    """The rules of a rules file's text (`source` names it in messages), or RulesError listing what is wrong
    (at most MAX_PROBLEMS)."""
    try:
        doc = load_located(decode(text, source) if isinstance(text, bytes) else text, LIMITS)
    except FileProblem as exc:
        raise RulesError([str(exc)]) from None
    except YamlProblem as exc:
        raise RulesError([f"{source}:{exc.line}: {exc}" if exc.line else f"{source}: {exc}"]) from None
    report = _Report(source, doc)
    data = doc.data
    if data is None:
        raise RulesError([f"{source}: the file is empty: it must be a mapping with one key, rules (rules: [] for none)"])
    if not isinstance(data, dict) or "rules" not in data:
        report.add("", f"must be a mapping with one key, rules: a list of rules (got {show(data)})")
        raise RulesError(report.problems)
    for key in data:
        if key != "rules":
            report.add(_field("", key), "unknown field (known: rules)")
    items = data["rules"]
    if not isinstance(items, list):
        report.add("rules", f"must be a list of rules (got {show(items)})")
        raise RulesError(report.problems)
    if len(items) > MAX_RULES:
        report.add("rules", f"at most {MAX_RULES} rules (got {len(items)})")
        raise RulesError(report.problems)
    base = default_rule(defaults)
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        rule = _rule(report, f"rules[{i}]", i, item, base)
        if rule is not None:
            if rule.name in seen:
                report.add(f"rules[{i}].name", f"{rule.name} is also the name of rules[{seen[rule.name]}]")
            seen.setdefault(rule.name, i)
            rules.append(rule)
        if report.full:
            break
    if report.full:
        raise RulesError([*report.problems, f"{source}: (the first {MAX_PROBLEMS} problems; there may be more)"])
    if report.problems:
        raise RulesError(report.problems)
    return Rules(rules, defaults=defaults)


def _rule(report: _Report, path: str, index: int, item: Any, base: Rule) -> Rule | None:
    if not isinstance(item, dict):
        report.add(path, f"must be a mapping with domains (and {', '.join(SECTIONS)}) (got {show(item)})")
        return None
    before = len(report.problems)
    given: dict[str, Any] = {"name": f"rule-{index + 1}"}
    for key, value in item.items():
        at = _field(path, key)
        if key == "name":
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                report.add(at, f"must be 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit "
                               f"(got {show(value)})")
            else:
                given["name"] = value
        elif key == "domains":
            given["domains"] = _domains(report, at, value)
        elif key in SECTIONS:
            _section(report, at, value, SECTIONS[key], given)
        else:
            report.add(at, f"unknown field (known: {', '.join(RULE_FIELDS)})")
    if "domains" not in item:
        report.add(path, "domains is required: the hosts the rule is for (*.shop.example, shop.example, or *)")
    if len(report.problems) > before:
        return None
    return replace(base, **given)


def _domains(report: _Report, path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_DOMAINS:
        report.add(path, f"must be a list of 1 to {MAX_DOMAINS} domains (got {show(value)})")
        return ()
    out = []
    for i, text in enumerate(value):
        try:
            out.append(parse_domain(text))
        except ValueError as exc:
            report.add(f"{path}[{i}]", str(exc))
    return tuple(dict.fromkeys(out))


def _section(report: _Report, path: str, value: Any, fields: dict[str, tuple[str, Callable[[Any], Any]]],
             given: dict[str, Any]) -> None:
    if value is None:  # `bans:` with nothing under it: every default
        return
    if not isinstance(value, dict):
        report.add(path, f"must be a mapping of {', '.join(fields)} (got {show(value)})")
        return
    for key, raw in value.items():
        at = _field(path, key)
        if key not in fields:
            report.add(at, f"unknown field (known: {', '.join(fields)})")
            continue
        attr, convert = fields[key]
        try:
            given[attr] = convert(raw)
        except _Bad as bad:
            report.add(at + bad.under, str(bad))


# -- the file -----------------------------------------------------------------------------------------------------

class RulesFile(WatchedFile[Rules]):
    """The rules from a file, re-read when it changes; the first read's problem raises RulesError."""

    flag = "--gateway-rules-file"
    what = "rules"
    error = RulesError

    def __init__(self, path: str, *, defaults: RuleDefaults = FLAG_DEFAULTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.defaults = defaults
        super().__init__(path, clock)

    def parse(self, raw: bytes) -> Rules:
        return parse_rules(raw, defaults=self.defaults, source=self.path)

    def problem(self, exc: Exception) -> str:
        return "; ".join(exc.problems) if isinstance(exc, RulesError) else str(exc)

    def refusal(self, exc: Exception) -> Exception:
        return exc if isinstance(exc, RulesError) else RulesError([str(exc)])

    def counts(self, value: Rules) -> dict[str, int]:
        return {"rules": len(value)}

    @property
    def rules(self) -> Rules:
        """The rules in force (after a look at the file when it is due)."""
        return self.refresh()

    def __len__(self) -> int:
        return len(self.value)

    def for_host(self, host: str) -> Rule:
        return self.refresh().for_host(host)
