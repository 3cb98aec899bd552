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
                       groups=("process", "store", "leases", "gateway", "socks5", "tls", "interception"))
    s.set_defaults(fn=cmd_gateway)
    c = common.command(sub, "ca",
                       help="print the certificate of the gateway's CA (made first when --gateway-ca-dir holds none), "
                            "for the crawlers whose HTTPS the gateway intercepts to trust",
                       example="fleet ca --gateway-ca-dir /etc/fleet/ca > fleet-ca.crt",
                       groups=("process", "interception"))
    c.add_argument("--fingerprint", action="store_true", help="print the certificate's SHA-256 fingerprint instead")
    c.set_defaults(fn=cmd_ca)


def cmd_ca(args: argparse.Namespace) -> int:
    """The CA's certificate on stdout (PEM); a new CA made in the directory when it holds neither file (its key
    0600, never printed)."""
    import sys
    from pathlib import Path

    from fleet.gateway import intercept

    settings = common.settings_from(args)
    if not settings.gateway_ca_dir:
        raise common.BadInput("--gateway-ca-dir (FLEET_GATEWAY_CA_DIR) is required: where the CA is kept")
    directory = Path(settings.gateway_ca_dir)
    try:
        if intercept.ensure_ca(directory):
            print(f"made a new CA in {directory} ({intercept.KEY_FILE} 0600: keep it secret)", file=sys.stderr)
        authority = intercept.Authority(directory)
    except (intercept.CaError, OSError) as exc:
        raise common.BadInput(f"--gateway-ca-dir: {exc}") from None
    sys.stdout.write(authority.fingerprint() + "\n" if args.fingerprint else authority.certificate_pem.decode())
    return common.EXIT_OK
