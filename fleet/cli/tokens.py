"""`fleet token`: the gateway's clients file and the lease API's token file made with random tokens where they are
absent (`init`: what a fresh installation runs once, as docker-compose.yml's `tokens` service does), or one token
printed from them (`gateway`, `api`). `init` never prints a token and never changes a file that exists."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from fleet.cli import common
from fleet.gateway.issued import GENERATED_CLIENT as DEFAULT_CLIENT
from fleet.gateway.issued import generated_file, new_token

MAX_FILE = 1 << 20


def add_parser(sub: Any) -> None:
    s = common.command(sub, "token",
                       help="init: make the gateway's clients file and the lease API's token file with random tokens, "
                            "each only when absent (prints no token); gateway or api: print a token from them",
                       example="fleet token init --gateway-clients-file clients.yaml --api-token-file api-token; "
                               "fleet token gateway --client crawler --gateway-clients-file clients.yaml",
                       groups=("process", "api", "gateway"))
    s.add_argument("what", choices=("init", "gateway", "api"))
    s.add_argument("--client", default=DEFAULT_CLIENT,
                   help=f"the gateway client init makes and gateway prints (default {DEFAULT_CLIENT})")
    s.set_defaults(fn=cmd_token)


def cmd_token(args: argparse.Namespace) -> int:
    settings = common.settings_from(args)
    if args.what == "init":
        made = []
        if settings.gateway_clients_file:
            made.append(_init(settings.gateway_clients_file, clients_text(args.client, new_token()),
                              f"the gateway's clients file, client {args.client}",
                              f"fleet token gateway --client {args.client}"))
        if settings.api_token_file:
            made.append(_init(settings.api_token_file, new_token() + "\n", "the lease API's token file", "fleet token api"))
        if not made:
            raise common.BadInput("nothing to make: set --gateway-clients-file (FLEET_GATEWAY_CLIENTS_FILE) or "
                                  "--api-token-file (FLEET_API_TOKEN_FILE)")
        return common.EXIT_OK
    if args.what == "gateway":
        print(gateway_token(settings.gateway_clients_file, args.client))
    else:
        print(api_token(settings.api_token_file))
    return common.EXIT_OK


def clients_text(client: str, token: str) -> str:
    return generated_file(client, token, comment=f"Made by `fleet token init` (docs/gateway.md: clients). Print the token "
                                                 f"with `fleet token gateway --client {client}`.")


def write_new(path: str, text: str) -> bool:
    """Write `text` to `path` (mode 0600) unless it exists; True when written. Whole or not at all (a temp file
    linked into place), so a reader never sees half a file and of two racing writers one wins."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fleet-token-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


def _init(path: str, text: str, what: str, how: str) -> str:
    try:
        made = write_new(path, text)
    except OSError as exc:
        raise common.BadInput(f"cannot make {path}: {exc.strerror or exc}") from None
    if made:
        print(f"fleet token: made {path}, {what}, with a random token; print it with `{how}`", file=sys.stderr)
    else:
        print(f"fleet token: {path} exists: left as it is (`{how}` prints its token)", file=sys.stderr)
    return path


def _read(path: str, flag: str) -> bytes:
    from fleet.untrusted import FileProblem, read_bounded

    try:
        return read_bounded(path, MAX_FILE, f"{flag} {path}")
    except FileProblem as exc:
        raise common.BadInput(str(exc)) from None


def gateway_token(path: str | None, client: str) -> str:
    """The client's token, read as the gateway reads the file."""
    from fleet.gateway.clients import ClientsError, parse_clients

    if not path:
        raise common.BadInput("--gateway-clients-file (FLEET_GATEWAY_CLIENTS_FILE) is required")
    try:
        clients = parse_clients(_read(path, "--gateway-clients-file"))
    except ClientsError as exc:
        raise common.BadInput(f"--gateway-clients-file {path}: {exc}") from None
    if client not in clients:
        raise common.BadInput(f"client {client} is not in {path} (have: {', '.join(sorted(clients)) or 'none'})")
    return clients[client].token.decode()


def api_token(path: str | None) -> str:
    if not path:
        raise common.BadInput("--api-token-file (FLEET_API_TOKEN_FILE) is required")
    token = _read(path, "--api-token-file").decode("utf-8", "replace").strip()
    if not token:
        raise common.BadInput(f"--api-token-file {path} is empty")
    return token
