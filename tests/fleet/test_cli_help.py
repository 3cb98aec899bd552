"""Every command's `--help`, pinned: a golden file per command in
tests/fleet/golden/help/ (rendered 100 columns wide). A command takes and
lists only the settings groups it declares, after its own arguments, under
a one-line description and an example.

After a deliberate change to a command's flags or a setting's help, refresh
the files and review the diff:

    REFRESH_GOLDEN=1 python -m pytest -q tests/fleet/test_cli_help.py
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from fleet.cli import subcommands
from fleet.settings import OPTIONS

GOLDEN = Path(__file__).parent / "golden" / "help"
SETTING_FLAGS = {f"--{o.flag}" for o in OPTIONS}


def _commands() -> dict[str, argparse.ArgumentParser]:
    root = subcommands.parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = sorted(_commands())


def _help(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    return _commands()[name].format_help()


@pytest.mark.parametrize("name", COMMANDS)
def test_help_is_the_pinned_one(name, monkeypatch):
    text = _help(name, monkeypatch)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REFRESH_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden help for fleet {name}: run REFRESH_GOLDEN=1 python -m pytest {__file__}"
    assert text == path.read_text(encoding="utf-8"), (
        f"fleet {name} --help changed: if meant, REFRESH_GOLDEN=1 python -m pytest {__file__} and review the diff")


def test_no_golden_file_is_left_for_a_command_that_is_gone():
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_own_arguments_come_first_then_the_settings_under_a_description_and_an_example(name, monkeypatch):
    lines = _help(name, monkeypatch).splitlines()
    assert any(line.startswith("example: fleet ") or line.startswith("example: ") for line in lines[:8]), lines[:8]
    first_setting = next((i for i, line in enumerate(lines) if line.lstrip().split(" ")[0].rstrip(",") in SETTING_FLAGS),
                         len(lines))
    own = [i for i, line in enumerate(lines) if line.startswith("  -") and line.split()[0].rstrip(",") not in SETTING_FLAGS]
    assert all(i < first_setting for i in own), name


def test_gc_help_shows_dry_run_at_once(monkeypatch):
    head = _help("gc", monkeypatch).splitlines()[:15]
    assert any(line.lstrip().startswith("--dry-run") for line in head), head


def test_gc_help_is_short(monkeypatch):
    # It listed all ~60 settings (about 270 lines); now its own and the six groups it reads.
    assert len(_help("gc", monkeypatch).splitlines()) < 100


@pytest.mark.parametrize(("name", "takes", "refuses"), [
    ("gc", {"--gc-min-age", "--proxies", "--provider-call-timeout", "--kubeconfig"}, {"--gateway-max-body", "--probe-target"}),
    ("api", {"--insecure-no-auth", "--max-leases-per-proxy", "--broker"}, {"--gc-interval", "--gateway-bind-address"}),
    ("gateway", {"--gateway-ban-statuses", "--cooldown-blocked", "--max-leases-per-proxy"}, {"--api-bind-address"}),
    ("prober", {"--probe-interval", "--broker", "--installation"}, {"--providers-config", "--api-token-file"}),
    ("probe", {"--broker"}, {"--providers-config"}),
    ("validate", SETTING_FLAGS, set()),
    ("up", SETTING_FLAGS, set()),
])
def test_each_command_takes_the_settings_it_reads(name, takes, refuses):
    flags = {s for a in _commands()[name]._actions for s in a.option_strings}
    assert takes <= flags, sorted(takes - flags)
    assert not refuses & flags, sorted(refuses & flags)
