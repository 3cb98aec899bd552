"""`fleet gc`: orphan GC by hand.

- `fleet gc --dry-run [-p NAME]… [-o table|json]`: the decision a sweep
  would take, in-process and without deleting anything: every provider is
  built here (with the credentials this shell has), listed under a deadline
  through the same call path as a worker's `fleet.list_instances`
  (`fleet.celery.calls.call`), its answer validated as the controller does
  (`fleet.gc.answers`), the live Proxy UIDs read after the lists as a
  sweep does (`fleet.gc.live`), and the orphan matrix applied
  (`fleet.gc.decide`). Prints PROVIDER INSTANCE UID AGE VERDICT WHY.
- `fleet gc` (without --dry-run): asks the controller to sweep now (one
  `fleet.gc_sweep`, exactly what beat sends every --gc-interval; the
  controller applies every safety rule and its lock).

Exit codes: 0; 1 when a provider's list failed (its row says why); 2 bad
input, or no Proxies source (no --proxies, no cluster: nothing would be
deleted); 3 when the live UIDs or the broker cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fleet.cli import common as cli

if TYPE_CHECKING:
    from fleet.config import ProviderConfig
    from fleet.gc.answers import ListAnswer
    from fleet.gc.decide import Verdict

MAX_LIST_TIMEOUT = 600.0
HEAD = ("PROVIDER", "INSTANCE", "UID", "AGE", "VERDICT", "WHY")


def add_parser(sub: Any) -> None:
    s = cli.command(sub, "gc", help="orphan GC: --dry-run prints what a sweep would delete; without it, asks the controller to sweep now",
                    example="fleet gc --dry-run -c providers.yaml --proxies proxies/",
                    groups=("process", "store", "providers", "cluster", "proxies", "gc"))
    s.add_argument("--dry-run", action="store_true", help="decide in-process and print the table; delete nothing")
    s.add_argument("-p", "--provider", action="append", help="--dry-run: only this provider (repeatable)")
    s.add_argument("-o", "--output", choices=("table", "json"), default="table")
    s.add_argument("--timeout", help="--dry-run: time limit of each list (default: --provider-call-timeout)")
    s.set_defaults(fn=cmd_gc)


def cmd_gc(args: argparse.Namespace) -> int:
    settings = cli.settings_from(args)
    config = cli.config_from(settings)
    assert config is not None
    if not args.dry_run:
        return send_sweep(settings.broker, settings.gc_interval)
    from fleet.gc import live
    from fleet.store import Store

    timeout = settings.provider_call_timeout if args.timeout is None else \
        cli.positive_duration(args.timeout, "--timeout", MAX_LIST_TIMEOUT)
    chosen = config.providers
    if args.provider:
        try:
            chosen = tuple(config.get(n) for n in args.provider)
        except KeyError as exc:
            raise cli.BadInput(str(exc.args[0])) from None
    store = Store.from_url(settings.broker)
    try:
        try:
            read, mode = live.source(settings, store)
        except live.NoSource as exc:
            raise cli.BadInput(f"{exc}: GC would delete nothing") from None
        with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
            listed = list(pool.map(lambda pc: list_one(pc, timeout), chosen))
        try:
            uids = read()  # after the lists, as a sweep reads them when each answer comes
        except live.Unavailable as exc:
            raise cli.Unreachable(f"the live Proxy UIDs cannot be vouched for ({mode}): {exc}") from None
    finally:
        store.close()
    report = decide(listed, uids, settings.installation_id, settings.gc_min_age, time.time(), live.scope(settings))
    print(render(report, args.output, settings.installation_id, settings.gc_min_age, len(uids)))
    return cli.EXIT_NOT_READY if any(r["skipped"] for r in report["providers"]) else cli.EXIT_OK


def list_one(pc: ProviderConfig, timeout: float) -> tuple[str, ListAnswer]:
    """One provider's list, as a worker's `fleet.list_instances` answers it, validated as the controller does."""
    from fleet.celery import calls
    from fleet.gc import answers
    from providers import registry

    def run(p: Any, deadline: Any) -> list[dict[str, Any]]:
        return [calls.instance_dict(i) for i in p.list_by_tag(deadline)]

    outcome = calls.call(pc.name, "list", run, timeout=timeout, build=lambda _: registry.build(pc.name, pc.type, pc.block),
                         recorder=calls.CallMetrics())
    return pc.name, answers.parse(outcome, pc.name)


def decide(listed: Sequence[tuple[str, ListAnswer]], live: frozenset[str], installation: str, min_age: float,
           now: float, namespaces: tuple[str, ...] = ("*",)) -> dict[str, Any]:
    """The dry run's report (pure): per provider whether it would be swept, and every instance's verdict."""
    from fleet.gc.decide import decide_all

    providers: list[dict[str, Any]] = []
    instances: list[dict[str, Any]] = []
    for name, answer in listed:
        skipped = "list-failed" if answer.failed else "invalid-answer" if answer.invalid else None
        providers.append({"provider": name, "skipped": skipped, "message": answer.failed or answer.invalid,
                          "listed": len(answer.instances), "malformed": answer.malformed})
        if skipped:
            continue
        instances.extend(_row(name, v) for v in decide_all(answer.instances, live, installation, min_age, now,
                                                                  namespaces=namespaces))
    return {"providers": providers, "instances": instances}


def _row(provider: str, v: Verdict) -> dict[str, Any]:
    i = v.instance
    return {"provider": provider, "instance": i.id, "uid": i.uid, "installation": i.installation,
            "namespace": i.namespace, "ageSeconds": None if v.age is None else round(v.age, 1), "verdict": v.verdict, "why": v.why}


def render(report: dict[str, Any], fmt: str, installation: str, min_age: float, live: int) -> str:
    from fleet.cli import tables
    from fleet.gc.decide import short_duration

    if fmt == "json":
        return json.dumps({"installation": installation, "minAgeSeconds": min_age, "liveProxies": live, **report}, indent=2)
    rows: list[tuple[str, ...]] = [
        (r["provider"], r["instance"], r["uid"] or "-",
         "unknown" if r["ageSeconds"] is None else short_duration(r["ageSeconds"]), r["verdict"], r["why"])
        for r in report["instances"]
    ]
    rows += [(p["provider"], "-", "-", "-", "skipped", f"{p['skipped']}: {p['message']}")
             for p in report["providers"] if p["skipped"]]
    lines = [tables.grid(HEAD, rows)] if rows else ["No instances listed."]
    deletes = sum(1 for r in report["instances"] if r["verdict"] == "delete")
    malformed = sum(p["malformed"] for p in report["providers"])
    lines.append(f"dry run (installation {installation}, min age {short_duration(min_age)}, {live} live Proxies): "
                 f"{deletes} would be deleted, nothing was" + (f"; {malformed} malformed entries left out" if malformed else ""))
    return "\n".join(lines)


def send_sweep(broker: str, interval: float) -> int:
    """One `fleet.gc_sweep` to the controller, as beat sends it."""
    from celery import Celery

    from fleet.celery import routing
    from fleet.celery.conf import MESSAGING
    from fleet.settings import redact_url
    from providers.text import show

    app = Celery("fleet-gc", broker=broker, set_as_current=False)
    app.conf.update(task_routes=(routing.route,), **MESSAGING)
    try:
        app.send_task(routing.GC_SWEEP, expires=interval or 600.0, retry=False)
    except Exception as exc:
        raise cli.Unreachable(f"cannot send the sweep to the broker at {redact_url(broker)}: {show(str(exc), 200)}") from None
    finally:
        app.close()
    print(f"sent a GC sweep to {routing.CONTROLLER_QUEUE} (the controller's log says what it decided; "
          "fleet gc --dry-run shows it here)")
    return cli.EXIT_OK
