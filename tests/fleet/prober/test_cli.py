"""`fleet prober` as a subcommand, a `fleet up` member and a command line."""

from __future__ import annotations

from fleet.cli import commands, supervise
from fleet.cli import subcommands as cli
from fleet.cli.prober import cmd_prober
from fleet.settings import Settings


def test_the_subcommand_and_its_command_line():
    args = cli.parser().parse_args(["prober", "--probe-target", "example.com:443", "--probe-interval", "2s"])
    assert args.fn is cmd_prober
    s = cli.settings_from(args)
    assert (s.probe_target, s.probe_interval) == ("example.com:443", 2.0)
    assert commands.prober_argv()[-3:] == ["-m", "fleet.cli", "prober"]


def test_a_bad_target_is_bad_input(capsys):
    assert cli.main(["prober", "--probe-target", "http://user:secret@h/"]) == cli.EXIT_BAD_INPUT
    assert "--probe-target" in capsys.readouterr().err


def test_fleet_up_runs_the_prober_only_with_a_target(capsys):
    assert supervise.prober(Settings(), {}, environ={}) == []
    assert "prober off (no --probe-target)" in capsys.readouterr().err
    (child,) = supervise.prober(Settings(probe_target="example.com:443"), {"A": "1"}, environ={})
    assert child.role == "prober" and child.argv == commands.prober_argv()
    assert child.env == {"A": "1", "FLEET_PROBER_METRICS_BIND_ADDRESS": "127.0.0.1:8081"}  # loopback, as fleet up's other ports
    (child,) = supervise.prober(Settings(probe_target="example.com:443", prober_metrics_bind_address="0"),
                                {"FLEET_PROBER_METRICS_BIND_ADDRESS": "0"}, environ={"FLEET_PROBER_METRICS_BIND_ADDRESS": "0"})
    assert child.env == {"FLEET_PROBER_METRICS_BIND_ADDRESS": "0"}
