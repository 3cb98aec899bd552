"""`fleet secrets ensure`: the Secrets a cluster install reads, created with
random values when absent, never overwritten, never printed.

The fleet-secrets Job of deploy/secrets runs it in the installation's
namespace, so `kubectl apply -k` brings fleet up without a step on the
operator's machine and no value ever exists outside the cluster:

- `fleet-broker`: `redis-password` (the quickstart Redis' `--requirepass`)
  and `url` (`redis://:PASSWORD@fleet-redis:6379/0`, the same password),
  read by every process;
- `fleet-api-token`: `token`, the lease API's bearer token;
- `fleet-gateway-clients`: `clients.yaml`, the gateway's clients file with
  one client, `crawler`, and its token (every Proxy namespace);
- `fleet-flower`: `basic-auth`, `admin:PASSWORD` for Flower.

`wanted` builds them (pure, given the random source); the command creates
each one (`fleet.kube.create_secret`: `create` only, a 409 leaves what is
there unread) and prints one line per Secret, `secret/NAME created` or
`secret/NAME kept (exists)`. Why a Job and not a kustomize secretGenerator:
docs/architecture.md, Decisions. Rotating each: docs/install-kubernetes.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from fleet.cli import common
from fleet.gateway.issued import GENERATED_CLIENT, generated_file, new_token

REDIS_SERVICE, REDIS_PORT = "fleet-redis", 6379  # deploy/redis
# The names and keys the processes read them by (fleet.cli.render and deploy/ say the same; a test holds them equal).
BROKER_SECRET, BROKER_URL_KEY, BROKER_PASSWORD_KEY = "fleet-broker", "url", "redis-password"
API_TOKEN_SECRET, API_TOKEN_KEY = "fleet-api-token", "token"
GATEWAY_CLIENTS_SECRET, GATEWAY_CLIENTS_KEY, GATEWAY_CLIENT = "fleet-gateway-clients", "clients.yaml", GENERATED_CLIENT
FLOWER_SECRET, FLOWER_KEY, FLOWER_USER = "fleet-flower", "basic-auth", "admin"
NAMES = (BROKER_SECRET, API_TOKEN_SECRET, GATEWAY_CLIENTS_SECRET, FLOWER_SECRET)


def wanted(namespace: str, installation: str, token: Callable[[], str] = new_token) -> list[dict[str, Any]]:
    """The Secrets, in the order they are created, each value a new `token()`."""
    password = token()
    clients = generated_file(GATEWAY_CLIENT, token(), comment="Made by `fleet secrets ensure`: the gateway's clients "
                                                                      "(docs/gateway.md).")
    data = {
        BROKER_SECRET: {BROKER_PASSWORD_KEY: password,
                        BROKER_URL_KEY: f"redis://:{password}@{REDIS_SERVICE}:{REDIS_PORT}/0"},
        API_TOKEN_SECRET: {API_TOKEN_KEY: token()},
        GATEWAY_CLIENTS_SECRET: {GATEWAY_CLIENTS_KEY: clients},
        FLOWER_SECRET: {FLOWER_KEY: f"{FLOWER_USER}:{token()}"},
    }
    return [{
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/managed-by": "fleet-secrets",
                                "fleet.crawl.example.com/installation": installation}},
        "type": "Opaque",
        "stringData": values,
    } for name, values in data.items()]


def cmd_secrets(args: argparse.Namespace) -> int:
    from fleet import kube
    from fleet.settings import current_namespace
    from providers import names

    settings = common.settings_from(args)
    namespace = args.namespace or current_namespace()
    if not namespace:
        raise common.BadInput("-n/--namespace is required outside a pod (the namespace of the installation)")
    if not names.is_label(namespace):
        raise common.BadInput(f"-n/--namespace must be a DNS-1123 label, got {namespace!r}")
    try:
        client, mode = kube.api_client(settings)
    except Exception as exc:  # the SDK's config loaders raise their own types (ConfigException, OSError, ...)
        raise common.BadInput(f"cannot load the cluster configuration: {type(exc).__name__}") from None
    if client is None:
        raise common.BadInput(f"no cluster to create the Secrets in ({mode})")
    for secret in wanted(namespace, settings.installation or namespace):
        name = secret["metadata"]["name"]
        try:
            created = kube.create_secret(client, secret)
        except kube.KubeError as exc:
            raise common.Unreachable(str(exc)) from None
        print(f"secret/{name} {'created' if created else 'kept (exists)'}", flush=True)
    return common.EXIT_OK


def add_parser(sub: Any) -> None:
    s = common.command(sub, "secrets",
                       help="ensure: create the install's Secrets (fleet-broker, fleet-api-token, fleet-gateway-clients, "
                            "fleet-flower) with random values where absent; never overwrites, never prints a value",
                       example="fleet secrets ensure -n fleet-system", groups=("process", "cluster"))
    s.add_argument("action", choices=("ensure",))
    s.add_argument("-n", "--namespace", help="the installation's namespace (default: the pod's)")
    s.set_defaults(fn=cmd_secrets)
