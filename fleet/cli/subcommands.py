"""`fleet`: the registry of commands (`parser`, `main`), and the commands
that need no module of their own: validate, check, get, and starting the
Celery processes. It imports the command modules (`gc`, `api`, `gateway`,
`prober`, `pools`, `secrets`, `tokens`) and `common`, which they share; they never import it.

Every setting is a flag (of the commands that use it) and FLEET_<FLAG> in
the environment; flags win, an empty one too. Every setting and the
providers file are validated before anything starts or connects.

Exit codes:

- 0: fine.
- 1: something is not ready or not found (`fleet check` with a failing
  target, `fleet get ph NAME` unknown, `fleet probe` failing).
- 2: bad input: a flag, an environment variable or the providers file
  (argparse's usage errors are 2 as well).
- 3: cannot reach a backend fleet itself needs (Redis for `fleet get ph`).
  A provider's unreachable backend is a verdict, not an exit code.
- 130: interrupted (Ctrl-C), quietly (`fleet get --watch` ends so: 0).
- 141: the reader of the output went away (`fleet get px -o yaml | head -1`),
  quietly: 128 + SIGPIPE, what the shell reports for git and kubectl there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fleet import logs
from fleet.cli import api as api_cli
from fleet.cli import describe as describe_cli
from fleet.cli import gateway as gateway_cli
from fleet.cli import gc as gc_cli
from fleet.cli import pools as pools_cli
from fleet.cli import prober as prober_cli
from fleet.cli import secrets as secrets_cli
from fleet.cli import tokens as tokens_cli
from fleet.cli.common import (
    ALL_GROUPS,
    CELERY_GROUPS,
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NOT_READY,
    EXIT_OK,
    EXIT_UNREACHABLE,
    PH_NAMES,
    POOL_NAMES,
    PROXY_NAMES,
    BadInput,
    Unreachable,
    command,
    config_from,
    positive_duration,
    settings_from,
)
from fleet.durations import format_duration
from fleet.settings import OPTION, Settings, parse_namespaces, redact_url
from providers import names
from providers.text import show

# Building the parser (`fleet --help`, and every command before it runs) imports only the
# modules above and the subcommand modules' parser halves: each command imports what it
# uses (redis-py through fleet.store, kombu through fleet.celery, pydantic through
# fleet.config, PyYAML through the tables) when it runs. tests/integration/test_cli_imports.py holds this.

if TYPE_CHECKING:
    from fleet.cli.listing import Source
    from fleet.config import ProviderConfig, ProvidersConfig
    from fleet.health.results import CheckResult

MAX_CHECK_TIMEOUT = 3600.0  # `fleet check --timeout`
MAX_PROBE_TIMEOUT = 300.0  # `fleet probe --timeout`
MAX_CONCURRENCY = 1000
# `fleet up` is a local stack: the controller's /metrics and Flower listen on loopback only.
LOCAL_METRICS_BIND = "127.0.0.1:8080"
LOCAL_ADDRESS = "127.0.0.1"
# `fleet up` restarts a child that exits: after 1s, doubling to 30s; a child
# that stayed up 60s starts again from 1s.
RESTART_MIN, RESTART_MAX, RESTART_RESET_AFTER = 1.0, 30.0, 60.0


# --- strict flag types (argparse: a bad value is a usage error, exit 2) ----------------

_ASCII_INT = re.compile(r"[0-9]{1,6}", re.ASCII)


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not _ASCII_INT.fullmatch(text) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, got {show(text)}")
        return int(text)

    return parse


def _host(text: str) -> str:
    if not names.is_hostname(text):
        raise argparse.ArgumentTypeError(f"must be an IPv4 address or a host name, got {show(text)}")
    return text


_port = _int_in(1, 65535)
_concurrency = _int_in(1, MAX_CONCURRENCY)


# --- subcommands ----------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    """The providers file, the Proxy manifests (`--proxies`), the gateway's
    clients and rules files, whichever are given, each read by the parser
    the process uses: every problem listed (the manifests' as
    `file#document: field: why`, what the controller logs as "not
    applied"; the rules file's as `file:line: field: why`), exit 2 if there
    is any."""
    from fleet.config import ConfigError, load

    settings = settings_from(args)
    if not (settings.providers_config or settings.proxies or settings.gateway_clients_file
            or settings.gateway_rules_file):
        raise BadInput("--providers-config (-c) or --proxies (or FLEET_PROVIDERS_CONFIG, FLEET_PROXIES) is required, "
                       "or a gateway file to check: --gateway-clients-file, --gateway-rules-file")
    problems: list[str] = []
    config = None
    if settings.providers_config:
        try:
            config = load(settings.providers_config)
        except ConfigError as exc:
            problems.append(exc.report())
        else:
            types = sorted({p.type for p in config.providers})
            print(
                f"{settings.providers_config}: ok, {len(config.providers)} provider(s)"
                + (f" ({', '.join(config.names())}; types {', '.join(types)})" if config.providers else "")
            )
    if settings.proxies:
        problems += _validate_proxies(settings.proxies, config)
    if settings.gateway_clients_file:
        problems += _validate_clients(settings.gateway_clients_file)
    if settings.gateway_rules_file:
        problems += _validate_rules(settings, settings.gateway_rules_file)
    if problems:
        raise BadInput("\n".join(problems))
    return EXIT_OK


def _validate_clients(path: str) -> list[str]:
    """The gateway's clients file as `fleet gateway` reads it at start (its tokens never shown)."""
    from fleet.gateway.clients import ClientsError, ClientsFile

    try:
        clients = ClientsFile(path)
    except ClientsError as exc:
        return [str(exc)]
    print(f"{path}: ok, {len(clients.clients)} client(s)")
    return []


def _validate_rules(settings: Settings, path: str) -> list[str]:
    """The gateway's rules file as `fleet gateway` reads it at start, its defaults the gateway's flags."""
    from fleet.gateway.process import GatewayError, config_of
    from fleet.gateway.rules import RulesError, RulesFile

    try:
        rules = RulesFile(path, defaults=config_of(settings))
    except GatewayError as exc:
        return [str(exc)]
    except RulesError as exc:
        return [f"{path}: the rules file is not usable; the gateway refuses it:", *exc.problems]
    print(f"{path}: ok, {len(rules)} rule(s)")
    return []


def _validate_proxies(path: str, config: ProvidersConfig | None) -> list[str]:
    """Prints the count when the manifests are all valid, and notes on what the
    controller would set Failed (a provider missing from `config`, a placement
    it refuses): those are statuses, not manifest errors. The problems, as text."""
    from fleet.pools.standalone import declared_pools
    from fleet.proxies.manifests import load_manifests
    from providers import registry

    proxies, errors = load_manifests(path)
    pools = declared_pools(path)
    problems = [*(str(e) for e in errors), *pools.errors]
    if config is not None:
        for p in proxies:
            if p.spec.provider not in config.names():
                print(f"note: {p.key}: spec.provider {p.spec.provider!r} is not in the providers file: the controller "
                      "reports it Failed (ProviderNotConfigured) until it is", file=sys.stderr)
                continue
            pc = config.get(p.spec.provider)
            why = registry.placement_problem(pc.type, pc.block, p.spec.placement)
            if why:
                print(f"note: {p.key}: spec.placement: {why}: the controller reports it Failed (InvalidPlacement)",
                      file=sys.stderr)
    if not problems:
        print(f"{path}: ok, {len(proxies)} Proxy manifest(s), {len(pools.pools)} ProxyPool manifest(s)")
        return []
    head = f"{path}: {len(problems)} problem(s) in the Proxy manifests ({len(proxies)} valid); the controller applies none of these:"
    return [head, *problems]


def cmd_check(args: argparse.Namespace) -> int:
    from fleet.cli import tables
    from fleet.health.checking import run_check
    from fleet.health.decide import verdict
    from providers import registry

    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    timeout = settings.check_timeout if args.timeout is None else positive_duration(args.timeout, "--timeout", MAX_CHECK_TIMEOUT)
    chosen = config.providers
    if args.provider:
        try:
            chosen = tuple(config.get(n) for n in args.provider)
        except KeyError as exc:
            raise BadInput(str(exc.args[0])) from None

    def one(pc: ProviderConfig) -> CheckResult:
        return run_check(pc.name, pc.type, lambda: registry.build(pc.name, pc.type, pc.block), timeout)

    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        results = list(pool.map(one, chosen))
    rows = [tables.summary(r, verdict(r)) for r in results]
    print(tables.render_rows(rows, args.output, time.time()))
    return EXIT_OK if all(r.all_ready for r in results) else EXIT_NOT_READY


SESSION_NAMES = ("sessions", "session")


def cmd_get(args: argparse.Namespace) -> int:
    from fleet.cli import listing

    get_scope(args)
    if args.resource in PROXY_NAMES:
        source = proxies_source(args)
    elif args.resource in SESSION_NAMES:
        source = sessions_source(args)
    elif args.selector is not None:
        raise BadInput("-l/--selector: only fleet get px has one")
    elif args.resource in POOL_NAMES:
        source = pools_cli.pools_source(args)
    elif args.resource in PH_NAMES:
        source = ph_source(args)
    else:
        raise BadInput(f"unknown resource {show(args.resource)}: fleet get knows ph (providerhealth), px (proxies), "
                       "pools (proxypools) and sessions (the gateway's)")
    return listing.run(source, args.output, args.name, args.watch)


def get_scope(args: argparse.Namespace) -> None:
    """-A/--all-namespaces as kubectl takes it: every namespace (what no -n means too), never with -n, and never
    with a NAME of a namespaced resource (ph has no namespace: -A changes nothing there)."""
    if not args.all_namespaces:
        return
    if args.namespace is not None:
        raise BadInput("-A/--all-namespaces and -n/--namespace cannot be given together: -A lists every namespace, "
                       "-n one")
    if args.name is not None and args.resource not in PH_NAMES:
        raise BadInput("a NAME cannot be looked up across all namespaces (-A): give -n NAMESPACE instead")


def ph_source(args: argparse.Namespace) -> Source:
    """ProviderHealth: the providers file's providers (else those with results), judged as the controller would."""
    from fleet.config import validate_name  # pydantic: not for px

    if args.name is not None and validate_name(args.name):
        raise BadInput(f"NAME {validate_name(args.name)} (got {show(args.name)})")
    from fleet.cli import health, listing, tables
    from fleet.store import Store, StoreError

    settings = settings_from(args)
    config = config_from(settings, required=False)
    store = Store.from_url(settings.broker)
    wide = args.output == "wide"
    told = [False]  # the schedule's note: with the first read only

    def read() -> listing.Listing:
        now = time.time()
        try:
            rows, note = health.summaries(store, settings, config, now, args.name)
            workers = store.heartbeats.live() if wide else {}
        except StoreError as exc:
            raise Unreachable(f"cannot read results from Redis at {redact_url(settings.broker)}: {show(str(exc), 200)}") from None
        items = [listing.Item(r["provider"], tables.ph_row(r, now, len(workers.get(r["provider"], ())) if wide else None),
                              f"{tables.PH_NAME_PREFIX}/{r['provider']}", r, sig=tables.ph_sig(r), notes=tables.ph_notes(r))
                 for r in rows]
        said, told[0] = ("" if told[0] else note), True
        return listing.Listing((*tables.PH_COLUMNS, *tables.PH_WIDE_COLUMNS) if wide else tables.PH_COLUMNS, items,
                               "No providers (no providers file, and no results in Redis)",
                               lambda fmt: tables.render_rows(rows, fmt, now), sort_keys=False, note=said,
                               volatile=(tables.PH_COLUMNS.index("LAST CHECK"),))

    return listing.Source(read, store.close, f"providerhealth {args.name!r} not found")


def proxies_source(args: argparse.Namespace) -> Source:
    """Standalone Proxies from Redis, as `kubectl get px` shows cluster ones."""
    from fleet.cli import listing
    from fleet.proxies import table
    from fleet.proxies.standalone import Standalone
    from fleet.store import Store, StoreError

    pool = pool_selector(args.selector)
    settings = settings_from(args)
    store = Store.from_url(settings.broker)
    standalone = Standalone(store.proxies, settings.proxies or "", settings.installation_id)
    all_namespaces, wide = not args.namespace, args.output == "wide"

    def read() -> listing.Listing:
        try:
            proxies = standalone.all()
        except StoreError as exc:
            raise Unreachable(f"cannot read Proxies from Redis at {redact_url(settings.broker)}: {show(str(exc), 200)}") from None
        proxies = [p for p in table.ordered(proxies) if (not args.namespace or p.namespace == args.namespace)
                   and (pool is None or p.pool == pool) and (args.name is None or p.name == args.name)]
        now = time.time()
        items = []
        for p in proxies:
            obj = table.to_object(p)
            items.append(listing.Item(p.key, table.row(p, now, all_namespaces, wide), table.name(p, all_namespaces), obj,
                                      sig=json.dumps(obj, sort_keys=True)))

        def document(fmt: str) -> str:
            return table.as_json(proxies) if fmt == "json" else table.as_yaml(proxies).rstrip()

        return listing.Listing(table.columns(all_namespaces, wide), items,
                               "No Proxies in Redis (standalone mode; with a cluster: kubectl get px -A)", document,
                               indent=4, volatile=(table.AGE_COLUMN + all_namespaces,))

    return listing.Source(read, store.close, f"proxy {args.name!r} not found")


SESSION_COLUMNS = ("CLIENT", "SESSION", "PROXY", "USES", "AGE", "ERROR SCORE", "LAPSES IN")
SESSION_WIDE_COLUMNS = ("ENDPOINT", "EGRESS IP")  # `-o wide`: its proxy's address and the egress address the prober saw


def sessions_source(args: argparse.Namespace) -> Source:
    """The gateway's sessions from Redis (every replica's): client, session, proxy, uses, age, error score."""
    from fleet.cli import listing
    from fleet.store import Store, StoreError

    settings = settings_from(args)
    store = Store.from_url(settings.broker)
    wide = args.output == "wide"

    def read() -> listing.Listing:
        now = time.time()
        try:
            rows = store.leases.sessions(now)
            endpoints = store.proxies.endpoints() if wide else {}
            verdicts = store.proxies.verdicts() if wide else {}
        except StoreError as exc:
            raise Unreachable(f"cannot read sessions from Redis at {redact_url(settings.broker)}: {show(str(exc), 200)}") from None
        out = []
        for r in rows:
            _, client, session = (r["sticky"].split("/", 2) + ["", ""])[:3]
            if (args.name is None or args.name == session) and (args.namespace is None or args.namespace == client):
                out.append({"client": client, "session": session, "proxy": r["proxy"], "uses": r["uses"],
                            "age": max(0.0, now - r["born"]), "errorScore": r["score"], "lapsesIn": r["lapses"] - now})
        items = []
        for o in out:
            row: list[Any] = [o["client"], o["session"], o["proxy"] or "<moving>", o["uses"], format_duration(round(o["age"])),
                              f"{o['errorScore']:g}", format_duration(round(o["lapsesIn"]))]
            if wide:
                row += list(_exit_of(o["proxy"], endpoints, verdicts))
            steady = {k: v for k, v in o.items() if k not in ("age", "lapsesIn")}
            items.append(listing.Item(f"{o['client']}/{o['session']}", row, session_name(o, args.namespace is None), o,
                                      sig=json.dumps(steady, sort_keys=True)))

        def document(fmt: str) -> str:
            if fmt == "json":
                return json.dumps(out, indent=2)
            import yaml

            return yaml.safe_dump(out, sort_keys=False).rstrip()

        return listing.Listing((*SESSION_COLUMNS, *SESSION_WIDE_COLUMNS) if wide else SESSION_COLUMNS, items,
                               "No gateway sessions in Redis", document, sort_keys=False,
                               volatile=(SESSION_COLUMNS.index("AGE"), SESSION_COLUMNS.index("LAPSES IN")))

    return listing.Source(read, store.close)


def session_name(o: dict[str, Any], all_clients: bool) -> str:
    """A session's `-o name` line: `session/CLIENT/SESSION`, `session/SESSION` with -n CLIENT (the client is its
    namespace)."""
    return f"session/{o['client']}/{o['session']}" if all_clients else f"session/{o['session']}"


def _exit_of(proxy: str, endpoints: dict[str, bytes | str], verdicts: dict[str, bytes | str]) -> tuple[str, str]:
    """(ip:port, egress address) of a proxy key from its endpoint and the prober's verdict; `<none>` unknown."""
    def doc(raw: bytes | str | None) -> dict[str, Any]:
        try:
            got = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return got if isinstance(got, dict) else {}

    e, v = doc(endpoints.get(proxy)), doc(verdicts.get(proxy))
    endpoint = f"{e['ip']}:{e['port']}" if e.get("ip") and e.get("port") else "<none>"
    egress = v.get("egressIP") if v.get("uid") == e.get("uid") and v.get("egressIP") else "<none>"
    return endpoint, str(egress)


def pool_selector(selector: str | None) -> str | None:
    """`-l pool=NAME` (or `crawl.example.com/pool=NAME`, the members' label): the pool's name; None without one.
    The only selector `fleet get px` knows; anything else is refused rather than ignored."""
    if selector is None:
        return None
    from fleet.config import validate_name
    from fleet.proxies.model import LABEL_POOL

    key, eq, value = selector.partition("=")
    if not eq or key.strip() not in ("pool", LABEL_POOL) or not value.strip() or "," in value or value.startswith("="):
        raise BadInput(f"-l/--selector: only pool=NAME (or {LABEL_POOL}=NAME) is supported, got {show(selector)}")
    value = value.strip()
    if validate_name(value):
        raise BadInput(f"-l/--selector: pool {validate_name(value)} (got {show(value)})")
    return value


def _prepare(args: argparse.Namespace, need_config: bool = True) -> dict[str, str]:
    """Validate everything before starting; the env for the Celery process."""
    settings = settings_from(args)
    config_from(settings, required=need_config)
    env = dict(os.environ)
    env.update(settings.to_env())
    return env


def _exec(argv: list[str], env: dict[str, str]) -> int:
    sys.stdout.flush()
    os.execvpe(argv[0], argv, env)
    return EXIT_OK  # not reached


def cmd_worker(args: argparse.Namespace) -> int:
    from fleet.cli import commands

    env = _prepare(args)
    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    try:
        entry = config.get(args.provider)
    except KeyError as exc:
        raise BadInput(str(exc.args[0])) from None
    refuse_unrunnable([entry])
    return _exec(commands.worker_argv(args.provider, args.concurrency), env)


def refuse_unrunnable(entries: Sequence[ProviderConfig]) -> None:
    """BadInput naming every provider whose worker cannot run on this host (its type's host hook: a program it
    starts is missing), before any worker starts: a worker that cannot start its program only fails each call."""
    from providers import registry

    problems = [f"provider {e.name}: {why}" for e in entries if (why := registry.host_problem(e.type, e.block))]
    if problems:
        raise BadInput("; ".join(problems))


def cmd_controller(args: argparse.Namespace) -> int:
    from fleet.cli import commands

    return _exec(commands.controller_argv(args.concurrency), _prepare(args))


def cmd_beat(args: argparse.Namespace) -> int:
    from fleet.cli import commands

    return _exec(commands.beat_argv(), _prepare(args))


def cmd_flower(args: argparse.Namespace) -> int:
    """Flower for a deployment: refuses to start open (see deploy/manager/flower.yaml)."""
    from fleet.cli import commands

    if not (os.environ.get("FLOWER_BASIC_AUTH") or os.environ.get("FLOWER_AUTH")):
        raise BadInput("refusing to start Flower without authentication: set FLOWER_BASIC_AUTH (user:password) or FLOWER_AUTH (OAuth)")
    return _exec(commands.flower_argv(args.port, args.address), _prepare(args, need_config=False))


def cmd_probe(args: argparse.Namespace) -> int:
    from fleet.cli import probe
    from fleet.config import validate_name

    if args.mode == "live" and not args.provider:
        raise BadInput("probe live needs -p/--provider NAME")
    if args.provider is not None and validate_name(args.provider):
        raise BadInput(f"-p/--provider {validate_name(args.provider)} (got {show(args.provider)})")
    timeout = positive_duration(args.timeout, "--timeout", MAX_PROBE_TIMEOUT)
    return probe.run(args.mode, settings_from(args).broker, args.provider, timeout)


def cmd_render(args: argparse.Namespace) -> int:
    from fleet.cli import render as rendering
    from fleet.config import ConfigError, read_text, validate_name

    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None and settings.providers_config
    if args.namespace is not None and validate_name(args.namespace):
        raise BadInput(f"--namespace {validate_name(args.namespace)} (got {show(args.namespace)})")
    try:
        text = read_text(settings.providers_config)
    except ConfigError as exc:
        raise BadInput(exc.report()) from None
    try:
        objects = rendering.render(
            config, text, image=args.image or rendering.IMAGE, namespace=args.namespace or rendering.NAMESPACE,
            installation=settings.installation,  # default: the namespace
            proxy_namespaces=parse_namespaces(settings.proxy_namespaces) if settings.proxy_namespaces else None,
            settings=settings,
        )
    except rendering.RenderError as exc:
        raise BadInput(str(exc)) from None
    print(json.dumps(objects, indent=2) if args.output == "json" else rendering.to_yaml(objects).rstrip())
    return EXIT_OK

def cmd_up(args: argparse.Namespace) -> int:
    from fleet.cli import commands, supervise

    stop = supervise.Stop()
    env = _prepare(args)
    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    if args.metrics_bind_address is None and OPTION["metrics-bind-address"].env not in os.environ:
        env["FLEET_METRICS_BIND_ADDRESS"] = LOCAL_METRICS_BIND
    # Flower's credentials go to Flower only.
    base_env = {k: v for k, v in env.items() if not k.startswith("FLOWER_")}
    refuse_unrunnable(config.providers)  # its workers run here
    children = [supervise.Child(f"worker:{n}", commands.worker_argv(n), base_env) for n in config.names()]
    children += [supervise.Child("controller", commands.controller_argv(), base_env),
                 supervise.Child("beat", commands.beat_argv(), base_env)]
    children += supervise.prober(settings, base_env)
    children += supervise.api(settings, base_env)
    children += supervise.gateway(settings, base_env)
    from providers.blocks import Block  # pydantic: not while the parser is built

    with contextlib.ExitStack() as cleanup:
        dial = {pc.name: pc.block.runtime().dial_files for pc in config.providers if isinstance(pc.block, Block)}
        if any(dial.values()):
            root = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fleet-up-upstreams-"))
            supervise.with_secrets_dir(children, supervise.upstream_secrets(dial, root))
        return _up(args, env, children, stop)


def _up(args: argparse.Namespace, env: dict[str, str], children: list[Any], stop: Any) -> int:
    from fleet.cli import commands, supervise

    generated = None
    if args.flower and importlib.util.find_spec("flower") is not None:
        flower_env, generated = supervise.flower_auth(env)
        children.append(supervise.Child("flower", commands.flower_argv(args.flower_port, LOCAL_ADDRESS), flower_env))

    def started() -> None:
        if generated:
            user, _, password = generated.partition(":")
            supervise.say(f"Flower on http://{LOCAL_ADDRESS}:{args.flower_port}/ with user {user!r}, password {password!r} "
                          "(generated; set FLOWER_BASIC_AUTH=user:password to choose)")

    supervise.run(children, stop, started)
    return EXIT_OK


# --- parser ---------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The `fleet` parser: each command with its own arguments and the settings groups it reads (said here,
    or in its module's `add_parser`, once)."""
    p = argparse.ArgumentParser(prog="fleet", description="Egress-proxy fleet manager on Celery.")
    p.add_argument("--version", action=_Version, help="print fleet's version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    s = command(sub, "validate",
                help="validate the providers file, the settings, the Proxy manifests (--proxies) and the gateway's clients "
                     "and rules files, exit 2 on any problem",
                example="fleet validate -c providers.yaml --proxies proxies/ --gateway-rules-file rules.yaml",
                groups=ALL_GROUPS)
    s.set_defaults(fn=cmd_validate)

    s = command(sub, "check", help="check providers once, in-process (no broker)",
                example="fleet check -c providers.yaml -p hetzner-fsn", groups=("process", "providers", "health"))
    s.add_argument("-p", "--provider", action="append", help="only this provider (repeatable)")
    s.add_argument("-o", "--output", choices=("table", "json"), default="table")
    s.add_argument("--timeout", help="time limit of each check (default: the check timeout)")
    s.set_defaults(fn=cmd_check)

    gc_cli.add_parser(sub)

    s = command(sub, "get",
                help="show provider health, standalone Proxies from Redis, ProxyPools (cluster or standalone) or the "
                     "gateway's sessions, as kubectl get shows objects",
                example="fleet get ph -c providers.yaml; fleet get px -l pool=crawl -o wide; fleet get px -w",
                groups=("process", "store", "providers", "cluster", "health", "proxies"))
    s.add_argument("resource", help=("ph (providerhealth), px (proxies), pools (proxypools: the cluster's, or with "
                                     "--proxies the manifests' with their status from Redis) or sessions (the "
                                     "gateway's, from Redis)"))
    s.add_argument("name", nargs="?")
    s.add_argument("-n", "--namespace", help="px, pools: only this namespace (default: all, with a NAMESPACE column); "
                                             "sessions: only this client's")
    s.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace (the default without -n; sessions: every client), as kubectl's -A")
    s.add_argument("-l", "--selector", help="px: only a ProxyPool's members, pool=NAME (standalone: from Redis)")
    s.add_argument("-o", "--output", choices=("table", "wide", "name", "json", "yaml"), default="table",
                   help="table (default); wide: more columns; name: one TYPE/NAME line per object "
                        "(TYPE/NAMESPACE/NAME across all namespaces); json or yaml: the objects")
    s.add_argument("-w", "--watch", action="store_true",
                   help="after the listing, read again every 2s and print what changed, until Ctrl-C")
    s.set_defaults(fn=cmd_get)

    describe_cli.add_parser(sub, read_pools=pools_cli.read)  # `fleet describe px|ph|pools NAME`

    s = command(sub, "version", help="print fleet's version, the Python it runs on and its git commit when known",
                example="fleet version -o json", groups=())
    s.add_argument("-o", "--output", choices=("text", "json"), default="text")
    s.set_defaults(fn=cmd_version)

    s = command(sub, "worker", help="run the worker of one provider",
                example="fleet worker -p hetzner-fsn -c providers.yaml", groups=CELERY_GROUPS)
    s.add_argument("-p", "--provider", required=True)
    s.add_argument("--concurrency", type=_concurrency, default=4)
    s.set_defaults(fn=cmd_worker)

    s = command(sub, "controller", help="run the controller", example="fleet controller -c providers.yaml",
                groups=CELERY_GROUPS)
    s.add_argument("--concurrency", type=_concurrency, default=4)
    s.set_defaults(fn=cmd_controller)

    s = command(sub, "beat", help="run the scheduler (exactly one)", example="fleet beat -c providers.yaml",
                groups=CELERY_GROUPS)
    s.set_defaults(fn=cmd_beat)

    s = command(sub, "flower", help="run Flower, only with FLOWER_BASIC_AUTH or FLOWER_AUTH set",
                example="FLOWER_BASIC_AUTH=admin:secret fleet flower --port 5555",
                groups=("process", "store", "providers"))
    s.add_argument("--port", type=_port, default=5555)
    s.add_argument("--address", type=_host, default="0.0.0.0")
    s.set_defaults(fn=cmd_flower)

    s = command(sub, "probe", help="exec probe: ready (broker answers) or live (heartbeat fresh)",
                example="fleet probe live -p hetzner-fsn", groups=("process", "store"))
    s.add_argument("mode", choices=("ready", "live"))
    s.add_argument("-p", "--provider", help="live: the provider this worker serves")
    s.add_argument("--timeout", default="3s", help="broker timeout (default 3s, at most 5m)")
    s.set_defaults(fn=cmd_probe)

    s = command(sub, "render", help="print the Deployments of every process that reads the providers file, and the "
                                    "prober's, API's and gateway's",
                example="fleet render -c providers.yaml --image ghcr.io/example/fleet:1.0 --probe-target example.com:443 "
                        "| kubectl apply -f -",
                groups=("process", "providers", "proxies", "prober", "socks5", "tls"))
    s.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    s.add_argument("--image", default=None, help="container image of the workers")
    s.add_argument("--namespace", default=None, help="namespace of the workers (default fleet-system)")
    s.set_defaults(fn=cmd_render)

    s = command(sub, "up", help="run the whole stack in the foreground, on 127.0.0.1; restarts what exits",
                example="fleet up -c providers.yaml --proxies proxies/", groups=ALL_GROUPS)
    s.add_argument("--no-flower", dest="flower", action="store_false")
    s.add_argument("--flower-port", type=_port, default=5555)
    s.set_defaults(fn=cmd_up)

    prober_cli.add_parser(sub)  # `fleet prober`: the proxy health engine
    api_cli.add_parsers(sub)  # `fleet api` and `fleet lease`: the discovery and lease API
    gateway_cli.add_parser(sub)  # `fleet gateway`: the crawlers' forward proxy
    tokens_cli.add_parser(sub)  # `fleet token`: the gateway's clients file and the API's token file
    pools_cli.add_parser(sub)  # `fleet scale pool` (`fleet get pools` is under get)
    secrets_cli.add_parser(sub)  # `fleet secrets ensure`: the cluster install's Secrets
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        try:
            pre = settings_from(args)
            logs.setup(pre.log_format, pre.log_level)
            fn: Callable[[argparse.Namespace], int] = args.fn  # set by each subparser
            code = fn(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return code
        except BadInput as exc:
            print(f"fleet {args.command}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except Unreachable as exc:
            print(f"fleet {args.command}: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    except KeyboardInterrupt:  # Ctrl-C before a command installs its own handling: no traceback
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as git and kubectl do
        _drop_stdout()
        return EXIT_BROKEN_PIPE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


DISTRIBUTION = "egress-fleet"  # the name pip knows fleet by (`fleet` on PyPI is another project)


def distribution_version() -> str:
    """The installed distribution's version ("unknown" when fleet runs from a tree not installed)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> str:
    """The commit of the tree fleet runs from when it is a git checkout and git is at hand ("" otherwise: an
    installed image has neither)."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return ""
    try:
        got = subprocess.run([git, "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return got.stdout.strip() if got.returncode == 0 else ""


def version_info() -> dict[str, str]:
    import platform

    out = {"fleet": distribution_version(), "python": f"{platform.python_version()} ({platform.python_implementation()})"}
    commit = git_commit()
    if commit:
        out["commit"] = commit
    return out


def cmd_version(args: argparse.Namespace) -> int:
    info = version_info()
    if args.output == "json":
        print(json.dumps(info, indent=2))
    else:
        print("\n".join(f"{k} {v}" for k, v in info.items()))
    return EXIT_OK


class _Version(argparse.Action):
    """`fleet --version`: the distribution's version, looked up only when asked (the parser is built by every
    command)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"fleet {distribution_version()}")
        parser.exit()


if __name__ == "__main__":
    sys.exit(main())
