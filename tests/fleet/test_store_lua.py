"""Every Lua script (fleet/store/lua/**.lua) and its caller agree on ARGV: each script reads into named locals
at its top exactly the names, in the order, that its module's `ARGV` lays out (`fleet.store.scripts`), and the
callers give every name of that layout. A change to one side alone fails here."""

from __future__ import annotations

import contextlib
import re
import tomllib
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from fleet.store import gc, leases, lock, proxies, results, scripts, statuses
from fleet.store.gc import GcState
from fleet.store.leases import ARGV, GuardCall, LeaseCall, RenewCall, ReportCall, argv
from fleet.store.proxies import Proxies, Tail
from fleet.store.statuses import Statuses

MODULES = {"leases": leases.LUA, "proxies": proxies.LUA, "statuses": statuses.LUA, "gc": gc.LUA,
           "lock": lock.LUA, "results": results.LUA}
SCRIPTS = [(module, name) for module, lua in MODULES.items() for name in lua.layouts]
SHARED = [(module, name) for module, lua in MODULES.items() for name in lua.shared]

_ARG = re.compile(r"^local (\w+) = (?:tonumber\()?ARGV\[(\d+)\]\)?(?:\s*--.*)?$")
_REST = re.compile(r"^local (\w+) = \{unpack\(ARGV, (\d+)\)\}(?:\s*--.*)?$")  # the rest of ARGV, a list


def read_names(text: str) -> list[str]:
    """The names a script reads ARGV into, in ARGV order; every other mention of ARGV is an error."""
    names: list[tuple[int, str]] = []
    for line in text.splitlines():
        m, rest = _ARG.match(line), _REST.match(line)
        if m or rest:
            assert not names or not names[-1][1].endswith(scripts.REST), f"ARGV read after the rest: {line.strip()}"
            names.append((int(m.group(2)), m.group(1)) if m else (int(rest.group(2)), rest.group(1) + scripts.REST))
        elif "ARGV" in line.split("--", 1)[0]:
            raise AssertionError(f"ARGV read outside the named locals: {line.strip()}")
    assert [i for i, _ in names] == list(range(1, len(names) + 1)), names
    return [n for _, n in names]


def _code(text: str) -> str:
    """The Lua without comments and string literals."""
    return re.sub(r"'[^']*'", "", "\n".join(line.split("--", 1)[0] for line in text.splitlines()))


@pytest.mark.parametrize(("module", "script"), SCRIPTS)
def test_each_script_reads_the_names_the_caller_lays_out(module, script):
    lua = MODULES[module]
    assert tuple(read_names(scripts.read(lua.path(script)))) == lua.layouts[script]


@pytest.mark.parametrize(("module", "name"), SHARED)
def test_the_shared_functions_read_no_argv(module, name):
    assert read_names(scripts.read(MODULES[module].path(name))) == []


def test_the_reader_fails_on_a_positional_argv_read():
    with pytest.raises(AssertionError):
        read_names("local key = ARGV[1]\nredis.call('get', ARGV[2])\n")
    with pytest.raises(AssertionError):
        read_names("local key = ARGV[2]\n")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_script_runs_as_constants_then_shared_files_then_its_own(module):
    lua = MODULES[module]
    used: set[str] = set()
    for name in [*lua.shared, *lua.layouts]:
        used |= set(re.findall(r"\b[A-Z][A-Z_]+\b", _code(scripts.read(lua.path(name))))) - {"KEYS", "ARGV"}
    assert used == set(lua.constants)
    head = "".join(f"local {k} = {scripts.lua_literal(v)}\n" for k, v in lua.constants.items())
    head += "".join(scripts.read(lua.path(name)) for name in lua.shared)
    for name in lua.layouts:
        assert lua.texts[name] == head + scripts.read(lua.path(name))


def test_every_lease_call_gives_each_name_of_its_layout():
    now, guard = 1700000000.5, GuardCall().values(1700000000.5, "f")
    laid = {
        "lease": argv("lease", **LeaseCall(lease_id="a", target="t", expires=now + 60, max_per_proxy=1).values(now, 0.5),
                      **guard),
        "renew": argv("renew", **RenewCall(lease_id="a", ttl=None, default_ttl=300.0, max_per_proxy=1).values(now), **guard),
        "check": argv("check", **guard),
        "report": argv("report", **ReportCall(outcome="ok", lease_id="a").values(now, 600.0, 3, 300.0)),
    }
    for script, got in laid.items():
        assert len(got) == len(ARGV[script])
    with pytest.raises(TypeError):
        argv("check", **guard, extra=1)
    with pytest.raises(KeyError):
        argv("sync", then="0")


class _Recording:
    """A client that records what each registered script is sent (and answers nothing)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[list[Any]]] = {}

    def register_script(self, text: str) -> Any:
        def run(keys: list[str], args: list[Any]) -> None:
            self.sent.setdefault(text, []).append(args)

        return run


def test_every_call_but_the_leases_sends_its_layout():
    """Every script is called, each with as many arguments as its layout names (argv checks the names; the rest
    of ARGV, a list, counts as its length)."""
    client = _Recording()
    p, s, g = Proxies(client), Statuses(client), GcState(client)  # type: ignore[arg-type]
    lk, res = lock.OwnedLock(client, "k"), results.Results(client)  # type: ignore[arg-type]
    p.begin_call("ns/a", "hz", "{}", 30.0, 2, 100.0, ("tok", "#cloud-config", 60.0))
    p.begin_step("ns/a", "me", 30.0, True)
    p.end_step("ns/a", "me", Tail())
    p.finish_call("ns/a", "c1", "hz", "{}", 100.0, ("me", 30.0, False))
    p.finish_call("ns/a", "c1", "hz", "{}", 100.0)
    p.put_object("ns/a", "", "{}")
    p.begin_list("hz", "l1", 100.0, 600.0)
    p.take_list("hz", "l1")
    s.put("proxies", "ns", "a", "1", "{}", 60.0)
    g.begin("s1", ["hz", "gcp"], 100.0, 160.0, 60.0)
    g.take("s1", "hz")
    g.settle("s1", "hz", "swept")
    g.lapse("s1", 170.0)
    lk.hold("me", 10.0)
    lk.release("me")
    with contextlib.suppress(TypeError):  # the recording answers None, which the caller cannot read: sent all the same
        res.save_if_newer("hz", 100.0, "{}", 200.0, 0.0)
    for module, script in SCRIPTS:
        if module == "leases":
            continue
        lua = MODULES[module]
        sent = client.sent.get(lua.texts[script])
        assert sent, f"{module}/{script} never called"
        rest = 1 if lua.layouts[script][-1].endswith(scripts.REST) else 0
        assert all(len(args) == len(lua.layouts[script]) + rest for args in sent), sent


def test_a_named_value_reaches_the_local_of_its_name():
    """fakeredis runs the Lua: the claim TTL, the staged cloud-init and the cache entry's TTL land where named."""
    r = fakeredis.FakeRedis()
    p = Proxies(r)
    assert p.begin_call("ns/a", "hz", '{"id":"c1"}', 30.0, 2, 100.0, ("tok", "#cloud-config", 60.0)) == "ok"
    assert p.take_cloud_init("tok") == b"#cloud-config"
    ok, step = p.finish_call("ns/a", "c1", "hz", '{"done":1}', 100.0, ("me", 30.0, False))
    assert ok and step is not None and step.outcome is not None
    assert 0 < r.pttl("fleet:px:claim:ns/a") <= 30_000
    assert Statuses(r).put("proxies", "ns", "a", "7", '{"resourceVersion":"7"}', 60.0)
    assert not Statuses(r).put("proxies", "ns", "a", "6", '{"resourceVersion":"6"}', 60.0)


def test_the_scripts_ship_as_package_data():
    """A wheel (the image's `pip install .`) carries only what pyproject.toml's package-data names (setuptools
    globs each pattern under the package)."""
    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fleet.store"]
    package = root / "fleet" / "store"
    files = {p.relative_to(package).as_posix() for p in (package / "lua").rglob("*") if p.is_file()}
    shipped = {p.relative_to(package).as_posix() for pattern in patterns for p in package.glob(pattern)}
    wanted = {f"lua/{lua.path(name)}.lua" for lua in MODULES.values() for name in [*lua.shared, *lua.layouts]}
    assert wanted <= files
    assert files - shipped == set()
