"""The lease scripts (fleet/store/lua/*.lua) and their caller (fleet.store.leases) agree on ARGV: each script
reads into named locals at its top exactly the names, in the order, that `leases.ARGV` lays out, and the
call objects give every name of that layout. A change to one side alone fails here."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest

from fleet.store import leases
from fleet.store.leases import ARGV, CONSTANTS, GuardCall, LeaseCall, RenewCall, ReportCall, argv

_ARG = re.compile(r"^local (\w+) = (?:tonumber\()?ARGV\[(\d+)\]\)?(?:\s*--.*)?$")


def _text(name: str) -> str:
    return resources.files("fleet.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def read_names(text: str) -> list[str]:
    """The names a script reads ARGV into, in ARGV order; every other mention of ARGV is an error."""
    names: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _ARG.match(line)
        if m:
            names.append((int(m.group(2)), m.group(1)))
        elif "ARGV" in line.split("--", 1)[0]:
            raise AssertionError(f"ARGV read outside the named locals: {line.strip()}")
    assert [i for i, _ in names] == list(range(1, len(names) + 1)), names
    return [n for _, n in names]


@pytest.mark.parametrize("script", sorted(ARGV))
def test_each_script_reads_the_names_the_caller_lays_out(script):
    assert tuple(read_names(_text(script))) == ARGV[script]


def test_the_shared_functions_read_no_argv():
    assert read_names(_text("common")) == []


def test_every_constant_the_lua_names_is_declared_in_front_of_it():
    used = set()
    for name in ["common", *ARGV]:
        code = re.sub(r"'[^']*'", "", "\n".join(line.split("--", 1)[0] for line in _text(name).splitlines()))
        used |= set(re.findall(r"\b[A-Z][A-Z_]+\b", code)) - {"KEYS", "ARGV"}
    assert used == set(CONSTANTS)
    for name in ARGV:
        head = leases.SCRIPTS[name].split("\n")[: len(CONSTANTS)]
        assert [line.split(" = ")[0] for line in head] == [f"local {k}" for k in CONSTANTS]


def test_every_call_gives_each_name_of_its_layout():
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



def test_the_scripts_ship_as_package_data():
    """A wheel (the image's `pip install .`) carries only what pyproject.toml's package-data names."""
    root = Path(__file__).resolve().parents[3]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fleet.store"]
    lua = root / "fleet" / "store" / "lua"
    files = [p.relative_to(lua.parent).as_posix() for p in lua.rglob("*") if p.is_file()]
    assert {f"lua/{name}.lua" for name in ["common", *ARGV]} <= set(files)
    assert [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns)] == []
