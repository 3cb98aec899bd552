"""`fleet`: validate, check, get ph, and start the processes.

Every flag is also FLEET_<FLAG> in the environment; flags win. Exit codes:
0 fine, 1 something is not ready / not found, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from fleet import commands, logs, routing
from fleet.config import ConfigError, ProvidersConfig, load
from fleet.durations import parse_duration
from fleet.results import CheckResult, Verdict, parse_rfc3339, rfc3339
from fleet.settings import OPTIONS, Settings, SettingsError, env_name
from fleet.status import REASON_ALL_TARGETS_READY, REASON_CHECK_OVERDUE, current_verdict, verdict

EXIT_OK, EXIT_NOT_READY, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    pass


# --- settings -----------------------------------------------------------------


def _settings_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for opt in OPTIONS:
        names = [f"--{opt.flag}"] + (["-c"] if opt.flag == "providers-config" else [])
        p.add_argument(*names, dest=opt.attr, default=None, help=f"{opt.help} [{env_name(opt)}]")
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    values = {o.attr: getattr(args, o.attr, None) or os.environ.get(env_name(o)) for o in OPTIONS}
    try:
        return Settings.from_values(values)
    except SettingsError as exc:
        raise BadInput(str(exc)) from None


def config_from(settings: Settings, required: bool = True) -> ProvidersConfig | None:
    if not settings.providers_config:
        if required:
            raise BadInput("--providers-config (-c) or FLEET_PROVIDERS_CONFIG is required")
        return None
    try:
        return load(settings.providers_config)
    except ConfigError as exc:
        raise BadInput(exc.report()) from None


# --- output -------------------------------------------------------------------


def summary(result: CheckResult | None, v: Verdict, name: str = "", type_name: str = "") -> dict[str, Any]:
    """The JSON shape of `fleet check` and `fleet get ph`."""
    return {
        "provider": result.provider if result else name,
        "type": result.type if result else type_name,
        "supported": result.supported if result else None,
        "checkedAt": rfc3339(result.checked_at) if result else None,
        "ready": v.status,
        "reason": v.reason,
        "message": v.message,
        "targetsReady": (
            f"{sum(t.ready for t in result.targets)}/{len(result.targets)}" if result and result.supported else ""
        ),
        "targets": [t.to_dict() for t in result.targets] if result else [],
    }


def _age(iso: str | None, now: float) -> str:
    if not iso:
        return "<none>"
    secs = max(0, int(now - parse_rfc3339(iso)))
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def render(rows: list[dict[str, Any]], fmt: str, now: float) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "yaml":
        return yaml.safe_dump(rows, sort_keys=False).rstrip()
    head = ("NAME", "TYPE", "READY", "TARGETS", "LAST CHECK", "REASON")
    table = [head] + [
        (r["provider"], r["type"], r["ready"], r["targetsReady"] or "-", _age(r["checkedAt"], now), r["reason"]) for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    for r in rows:
        if r["reason"] != REASON_ALL_TARGETS_READY and r["message"] and not r["targets"]:
            lines.append(f"  {r['provider']}: {r['message']}")
        for t in r["targets"]:
            state = "ready" if t["ready"] else "NOT READY"
            addr = f" ({t['address']})" if t["address"] else ""
            line = f"  {r['provider']}/{t['name']}{addr}: {state} {t['reason']} {t['latencyMillis']}ms"
            if t["message"]:
                line += f" - {t['message']}"
            if t["details"]:
                line += " [" + ", ".join(f"{k}={v}" for k, v in sorted(t["details"].items())) + "]"
            lines.append(line)
        if r["reason"] == REASON_CHECK_OVERDUE and r["targets"]:
            lines.append(f"  {r['provider']}: {r['message']}")
    return "\n".join(lines)


# --- subcommands ----------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    types = sorted({p.type for p in config.providers})
    print(
        f"{settings.providers_config}: ok, {len(config.providers)} provider(s)"
        + (f" ({', '.join(config.names())}; types {', '.join(types)})" if config.providers else "")
    )
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from fleet.checking import run_check
    from providers import registry

    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    timeout = settings.check_timeout if args.timeout is None else _duration(args.timeout, "--timeout")
    if timeout <= 0:
        raise BadInput(f"--timeout must be positive, got {args.timeout}")
    chosen = config.providers
    if args.provider:
        try:
            chosen = tuple(config.get(n) for n in args.provider)
        except KeyError as exc:
            raise BadInput(str(exc.args[0])) from None

    def one(pc):
        return run_check(pc.name, pc.type, lambda: registry.build(pc.name, pc.type, pc.block), timeout)

    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        results = list(pool.map(one, chosen))
    rows = [summary(r, verdict(r)) for r in results]
    print(render(rows, args.output, time.time()))
    return EXIT_OK if all(r.all_ready for r in results) else EXIT_NOT_READY


def cmd_get(args: argparse.Namespace) -> int:
    from fleet.store import Store

    if args.resource not in ("ph", "providerhealth", "providerhealths"):
        raise BadInput(f"unknown resource {args.resource!r}: fleet get knows ph (providerhealth)")
    settings = settings_from(args)
    config = config_from(settings, required=False)
    store = Store.from_url(settings.broker)
    now = time.time()
    try:
        stored = store.all()
    except Exception as exc:
        raise BadInput(f"cannot read results from {_safe_url(settings.broker)}: {exc}") from None
    names = config.names() if config else sorted(stored)
    types = {p.name: p.type for p in config.providers} if config else {}
    if args.name:
        if args.name not in names and args.name not in stored:
            print(f"providerhealth {args.name!r} not found", file=sys.stderr)
            return EXIT_NOT_READY
        names = [args.name]
    rows = []
    for name in names:
        r = stored.get(name)
        v = current_verdict(r, store.seen(name), now, settings.overdue_after, routing.provider_queue(name),
                            settings.checks_enabled)
        rows.append(summary(r, v, name, types.get(name, "")))
    print(render(rows, args.output, now))
    return EXIT_OK


def _safe_url(url: str) -> str:
    """The broker URL without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _duration(text: str, flag: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise BadInput(f"{flag}: {exc}") from None


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
    env = _prepare(args)
    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    try:
        config.get(args.provider)
    except KeyError as exc:
        raise BadInput(str(exc.args[0])) from None
    return _exec(commands.worker_argv(args.provider, args.concurrency), env)


def cmd_controller(args: argparse.Namespace) -> int:
    return _exec(commands.controller_argv(args.concurrency), _prepare(args))


def cmd_beat(args: argparse.Namespace) -> int:
    return _exec(commands.beat_argv(), _prepare(args))


def cmd_flower(args: argparse.Namespace) -> int:
    """Flower for a deployment: refuses to start open (see deploy/manager/flower.yaml)."""
    if not (os.environ.get("FLOWER_BASIC_AUTH") or os.environ.get("FLOWER_AUTH")):
        raise BadInput("refusing to start Flower without authentication: set FLOWER_BASIC_AUTH (user:password) or FLOWER_AUTH (OAuth)")
    return _exec(commands.flower_argv(args.port, args.address), _prepare(args, need_config=False))


def cmd_probe(args: argparse.Namespace) -> int:
    from fleet import probe

    if args.mode == "live" and not args.provider:
        raise BadInput("probe live needs -p/--provider NAME")
    return probe.run(args.mode, settings_from(args).broker, args.provider, _duration(args.timeout, "--timeout"))


def cmd_render(args: argparse.Namespace) -> int:
    from fleet import render as rendering

    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None and settings.providers_config
    with open(settings.providers_config, encoding="utf-8") as f:
        text = f.read()
    try:
        objects = rendering.render(config, text, image=args.image or rendering.IMAGE, namespace=args.namespace or rendering.NAMESPACE)
    except rendering.RenderError as exc:
        raise BadInput(str(exc)) from None
    print(json.dumps(objects, indent=2) if args.output == "json" else rendering.to_yaml(objects).rstrip())
    return EXIT_OK


def cmd_up(args: argparse.Namespace) -> int:
    env = _prepare(args)
    settings = settings_from(args)
    config = config_from(settings)
    assert config is not None
    argvs = {f"worker:{n}": commands.worker_argv(n) for n in config.names()}
    argvs["controller"] = commands.controller_argv()
    argvs["beat"] = commands.beat_argv()
    if args.flower and importlib.util.find_spec("flower") is not None:
        argvs["flower"] = commands.flower_argv(args.flower_port)
    procs: dict[str, subprocess.Popen] = {}
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for role, argv in argvs.items():
        procs[role] = subprocess.Popen(argv, env=env, start_new_session=True)
        print(f"fleet up: started {role} (pid {procs[role].pid})", file=sys.stderr)
    code = EXIT_OK
    while not stopping:
        for role, p in procs.items():
            if p.poll() is not None:
                print(f"fleet up: {role} exited with {p.returncode}; stopping everything", file=sys.stderr)
                stopping, code = True, 1
                break
        time.sleep(0.2)
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs.values():
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    print("fleet up: stopped", file=sys.stderr)
    return code


# --- parser ---------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    common = _settings_parent()
    p = argparse.ArgumentParser(prog="fleet", description="Egress-proxy fleet manager on Celery.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("validate", parents=[common], help="validate the providers file and settings")
    s.set_defaults(fn=cmd_validate)

    s = sub.add_parser("check", parents=[common], help="check providers once, in-process (no broker)")
    s.add_argument("-p", "--provider", action="append", help="only this provider (repeatable)")
    s.add_argument("-o", "--output", choices=("table", "json"), default="table")
    s.add_argument("--timeout", help="time limit of each check (default: the check timeout)")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("get", parents=[common], help="show the latest results from Redis")
    s.add_argument("resource", help="ph (providerhealth)")
    s.add_argument("name", nargs="?")
    s.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    s.set_defaults(fn=cmd_get)

    s = sub.add_parser("worker", parents=[common], help="run the worker of one provider")
    s.add_argument("-p", "--provider", required=True)
    s.add_argument("--concurrency", type=int, default=4)
    s.set_defaults(fn=cmd_worker)

    s = sub.add_parser("controller", parents=[common], help="run the controller")
    s.add_argument("--concurrency", type=int, default=4)
    s.set_defaults(fn=cmd_controller)

    s = sub.add_parser("beat", parents=[common], help="run the scheduler (exactly one)")
    s.set_defaults(fn=cmd_beat)

    s = sub.add_parser("flower", parents=[common], help="run Flower, only with FLOWER_BASIC_AUTH or FLOWER_AUTH set")
    s.add_argument("--port", type=int, default=5555)
    s.add_argument("--address", default="0.0.0.0")
    s.set_defaults(fn=cmd_flower)

    s = sub.add_parser("probe", parents=[common], help="exec probe: ready (broker answers) or live (heartbeat fresh)")
    s.add_argument("mode", choices=("ready", "live"))
    s.add_argument("-p", "--provider", help="live: the provider this worker serves")
    s.add_argument("--timeout", default="3s", help="broker timeout (default 3s)")
    s.set_defaults(fn=cmd_probe)

    s = sub.add_parser("render", parents=[common], help="print the worker Deployments of the providers file")
    s.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    s.add_argument("--image", default=None, help="container image of the workers")
    s.add_argument("--namespace", default=None, help="namespace of the workers (default fleet-system)")
    s.set_defaults(fn=cmd_render)

    s = sub.add_parser("up", parents=[common], help="run the whole stack in the foreground")
    s.add_argument("--no-flower", dest="flower", action="store_false")
    s.add_argument("--flower-port", type=int, default=5555)
    s.set_defaults(fn=cmd_up)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        pre = settings_from(args)
        logs.setup(pre.log_format, pre.log_level)
        return args.fn(args)
    except BadInput as exc:
        print(f"fleet {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
