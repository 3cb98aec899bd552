"""`fleet prober`: the proxy health engine as a process of its own
(`fleet.prober.process`). It needs only Redis: no providers file, no
Celery, no Kubernetes API."""

from __future__ import annotations

import argparse
from typing import Any

from fleet.cli import common
from fleet.prober.target import TargetError


def cmd_prober(args: argparse.Namespace) -> int:
    from fleet.prober import process

    return common.run_process(args, process.main, TargetError)


def add_parser(sub: Any) -> None:
    s = common.command(sub, "prober",
                       help="probe every Running proxy through a real CONNECT (--probe-target); needs only Redis",
                       example="fleet prober --probe-target http://ifconfig.example:80/ip",
                       groups=("process", "store", "prober"))
    s.set_defaults(fn=cmd_prober)
