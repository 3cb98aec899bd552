"""`fleet prober`: the proxy health engine as a process of its own
(`fleet.prober.process`). It needs only Redis: no providers file, no
Celery, no Kubernetes API."""

from __future__ import annotations

import argparse
from typing import Any

from fleet.cli import subcommands
from fleet.prober.target import TargetError


def cmd_prober(args: argparse.Namespace) -> int:
    from fleet.prober import process

    settings = subcommands.settings_from(args)
    try:
        return process.main(settings)
    except TargetError as exc:
        raise subcommands.BadInput(str(exc)) from None


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("prober", parents=[common],
                       help="probe every Running proxy through a real CONNECT (--probe-target); needs only Redis")
    s.set_defaults(fn=cmd_prober)
