"""The tokens and the one-client clients file an installation issues itself (`fleet token init` into files,
`fleet secrets ensure` into Secrets): one maker for both. Light on purpose (no YAML): the CLI's parser imports it.
The gateway reads what it makes with `fleet.gateway.clients.parse_clients` (a test says so)."""

from __future__ import annotations

import json
import secrets

GENERATED_CLIENT = "crawler"  # the one client of a clients file an install makes (`fleet token init`, `fleet secrets ensure`)
TOKEN_BYTES = 32  # secrets.token_urlsafe: 43 characters of [A-Za-z0-9_-], nothing to quote in a URL, YAML or a header


def new_token() -> str:
    """A random token for a generated clients file, the lease API or Redis."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def generated_file(client: str, token: str, *, comment: str) -> str:
    """A clients file with one client, as an install writes it; `parse_clients` reads it (a test says so)."""
    return f"# {comment}\nclients:\n  {client}:\n    token: {json.dumps(token)}\n"
