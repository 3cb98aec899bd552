"""`fleet gateway` (issue 23): the crawlers' forward proxy (`fleet.gateway`); needs only Redis."""

from __future__ import annotations

import argparse
from typing import Any

from fleet.cli import subcommands


def cmd_gateway(args: argparse.Namespace) -> int:
    from fleet.gateway import process

    settings = subcommands.settings_from(args)
    try:
        return process.main(settings)
    except process.GatewayError as exc:
        raise subcommands.BadInput(str(exc)) from None


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("gateway", parents=[common],
                       help="serve the crawlers' forward proxy (--gateway-bind-address, default :8888); needs only Redis")
    s.set_defaults(fn=cmd_gateway)
