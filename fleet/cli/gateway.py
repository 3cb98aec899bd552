"""`fleet gateway` (issue 23): the crawlers' forward proxy (`fleet.gateway`); needs only Redis."""

from __future__ import annotations

import argparse
from typing import Any

from fleet.cli import common


def cmd_gateway(args: argparse.Namespace) -> int:
    from fleet.gateway import process

    return common.run_process(args, process.main, process.GatewayError)


def add_parser(sub: Any) -> None:
    s = common.command(sub, "gateway",
                       help="serve the crawlers' forward proxy (--gateway-bind-address, default :8888); needs only Redis",
                       example="fleet gateway --gateway-clients-file clients.yaml --broker redis://127.0.0.1:6379/0",
                       groups=("process", "store", "leases", "gateway"))
    s.set_defaults(fn=cmd_gateway)
