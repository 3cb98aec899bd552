"""`fleet describe px|ph|pools [NAME...]`: a block per object for people, as
`kubectl describe` prints one.

A Proxy: its metadata and spec (inline cloud-init as its size only), its
status and conditions with their last transitions, the phase and since when
(the reconciler's `fleet:px:phase`), the prober's verdict, and what the
lease API holds on it: its open leases (`fleet:lease:held:<ns>/<name>`, with
each lease's target, session and expiry), its cooldowns (per target and
global) and its error reports in a row. Standalone objects come from Redis;
with a cluster the object is the API server's (`kubectl describe px`), and
this shows the Redis side alone when no object is stored.

A ProviderHealth: the verdict `fleet get ph` shows, the live workers serving
the provider and every target's last result.

A ProxyPool, read as `fleet get pools` reads it (the API server's, or with
--proxies the manifests' with their status from Redis): its spec and its
status, each provider's share and the conditions.

NAME may be given as `fleet get -o name` prints it (`proxy.crawl.example.com/NAME`,
`proxy.crawl.example.com/NAMESPACE/NAME`, `px/NAME`); without -n a Proxy's
NAME is looked for in every namespace, and without NAME every object is
described. Exit 1 when a NAME is not found, 3 when Redis does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from fleet.cli import common
from fleet.durations import human_duration, parse_rfc3339, rfc3339
from providers.text import show

PROXY_PREFIX = "proxy.crawl.example.com"
PH_PREFIX = "providerhealth.crawl.example.com"
POOL_PREFIX = "proxypool.crawl.example.com"
LABEL = 20  # the width of a field's label, kubectl describe's look
NONE = "<none>"


# --- the layout ------------------------------------------------------------------


def field(label: str, value: Any, indent: int = 0) -> str:
    head = " " * indent + f"{label}:"
    text = str(value) if value not in (None, "") else NONE
    return f"{head.ljust(LABEL + indent)} {text}".rstrip()


def grid(head: Sequence[str], rows: Sequence[Sequence[Any]], indent: int = 2) -> list[str]:
    from fleet.cli.listing import line, widths

    sizes = widths(head, rows)
    return [" " * indent + line(r, sizes) for r in [head, *rows]]


def when(ts: float | None, now: float) -> str:
    """An instant as RFC 3339 with how long ago (or until) it is: `2026-01-02T03:04:05Z (5m ago)`."""
    if not ts:
        return NONE
    delta = now - ts
    rel = f"{human_duration(delta)} ago" if delta >= 0 else f"in {human_duration(-delta)}"
    return f"{rfc3339(ts)} ({rel})"


def stamp(text: str, now: float) -> str:
    """An RFC 3339 text with how long ago it is."""
    if not text:
        return NONE
    try:
        return when(parse_rfc3339(text), now)
    except ValueError:
        return text


def _json(raw: bytes | str | None) -> dict[str, Any]:
    try:
        got = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


# --- Proxies ---------------------------------------------------------------------


def proxy_block(p: Any, key: str, runtime: dict[str, Any], now: float) -> list[str]:
    """The block of one Proxy (`p`, None when Redis holds no object) and its Redis side (`runtime`: endpoint,
    verdict, phase, lease state as read)."""
    namespace, _, name = key.partition("/")
    out = [field("Name", name), field("Namespace", namespace), field("Kind", PROXY_PREFIX)]
    if p is None:
        out.append(field("Object", f"not in Redis (with a cluster: kubectl describe px -n {namespace} {name})"))
    else:
        from fleet.proxies.model import LABEL_POOL
        from fleet.proxies.table import to_object

        obj = to_object(p)
        labels = {LABEL_POOL: p.pool} if p.pool else {}
        out += [
            field("UID", p.uid), field("Generation", p.generation), field("Created", stamp(p.created_at, now)),
            field("Labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))),
            field("Annotations", ", ".join(f"{k}={show(v, 80)}" for k, v in sorted(obj["metadata"].get("annotations", {}).items()))),
            field("Finalizers", ", ".join(p.finalizers)),
        ]
        if p.deleting:
            out.append(field("Deleting", f"since {stamp(p.deletion_timestamp, now)}"))
        spec = obj["spec"]
        placement = spec.get("placement") or {}
        ci = spec.get("cloudInit") or {}
        cloud_init = (f"secret {ci['secretRef']['name']}/{ci['secretRef']['key']}" if "secretRef" in ci
                      else f"inline, {ci['inline']}" if "inline" in ci else NONE)
        out += ["Spec:", field("Provider", p.spec.provider, 2), field("Port", p.spec.port, 2),
                field("Placement", ", ".join(f"{k}={v}" for k, v in placement.items()), 2),
                field("Cloud-init", cloud_init, 2)]
        st = p.status
        out += ["Status:", field("Phase", st.phase, 2), field("Member", st.member, 2), field("Instance", st.provider_id, 2),
                field("Endpoint", f"{st.ip}:{st.port}" if st.ip and st.port else "", 2), field("Egress IP", st.egress_ip, 2),
                field("Observed generation", st.observed_generation, 2), field("Message", st.message, 2)]
        if st.conditions:
            out.append("Conditions:")
            out += grid(("TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"),
                        [(c.type, c.status, c.reason, stamp(c.last_transition_time, now), c.message or "")
                         for c in st.conditions])
        else:
            out.append(field("Conditions", NONE))
    out += runtime_lines(runtime, now)
    return out


def runtime_lines(runtime: dict[str, Any], now: float) -> list[str]:
    """The Redis side of a Proxy: the reconciler's phase, the endpoint leases are granted on, the prober's verdict
    and the lease API's state."""
    out = []
    phase, _, since = (runtime.get("phase") or "").partition("|")
    try:
        at = float(since) if since else None
    except ValueError:
        at = None
    out.append(field("Phase since", f"{phase} since {when(at, now)}" if phase and at else phase))
    e = runtime.get("endpoint") or {}
    out.append(field("Leasable at", f"{e.get('ip')}:{e.get('port')}" if e.get("ip") and e.get("port") else
                     "<none> (not Running)"))
    v = runtime.get("verdict") or {}
    if v and (not e or v.get("uid") == e.get("uid")):
        state = "healthy" if v.get("healthy") else "UNHEALTHY"
        egress = f", egress {v['egressIP']}" if v.get("egressIP") else ""
        mismatch = " (not its address)" if v.get("egressMismatch") else ""
        out.append(field("Prober", f"{state} since {when(v.get('since'), now)}{egress}{mismatch}: {v.get('message', '')}"))
    else:
        out.append(field("Prober", "<no verdict>"))
    leases = runtime.get("leases") or {"leases": [], "cooldowns": {}, "global": None, "errors": 0}
    held = leases["leases"]
    out.append(field("Leases", f"{len(held)} open" if held else NONE))
    if held:
        rows = []
        for lease in held:
            d = _json(lease["doc"])
            rows.append((lease["id"], d.get("target") or "*", d.get("sticky") or "-",
                         when(d.get("granted"), now) if d.get("granted") else "-", human_duration(lease["expires"] - now)))
        out += grid(("ID", "TARGET", "SESSION", "GRANTED", "EXPIRES IN"), rows)
    cooling = [("* (global)", when(leases["global"], now))] if leases["global"] else []
    cooling += [(target, when(until, now)) for target, until in leases["cooldowns"].items()]
    out.append(field("Cooldowns", f"{len(cooling)} in force" if cooling else NONE))
    if cooling:
        out += grid(("TARGET", "UNTIL"), cooling)
    out.append(field("Error reports", f"{leases['errors']} in a row"))
    return out


def describe_proxies(args: argparse.Namespace, names: list[str]) -> int:
    from fleet.proxies.standalone import Standalone
    from fleet.settings import redact_url
    from fleet.store import Store, StoreError

    settings = common.settings_from(args)
    store = Store.from_url(settings.broker)
    try:
        standalone = Standalone(store.proxies, settings.proxies or "", settings.installation_id)
        known = sorted(set(standalone.keys()) | set(store.proxies.phases()))
        blocks, missing = [], []
        asked: list[str | None] = list(names) or [None]
        for name in asked:
            if name is not None and "/" in name:  # NAMESPACE/NAME, from `fleet get px -A -o name`
                ns, _, name = name.partition("/")
            else:
                ns = args.namespace
            if name is not None and ns is not None:
                wanted = [f"{ns}/{name}"]
            else:
                wanted = [k for k in known if (ns is None or k.split("/", 1)[0] == ns)
                          and (name is None or k.split("/", 1)[1] == name)]
            now = time.time()
            found = False
            for key in wanted:
                p = standalone.get(key)
                runtime: dict[str, Any] = {"endpoint": _json(store.proxies.endpoint(key)), "verdict": _json(store.proxies.verdict(key)),
                           "phase": _text(store.proxies.phase(key)), "leases": store.leases.of_proxy(key, now)}
                if p is None and not (runtime["phase"] or runtime["endpoint"] or runtime["leases"]["leases"]
                                      or runtime["leases"]["cooldowns"] or runtime["leases"]["global"]):
                    continue
                found = True
                blocks.append("\n".join(proxy_block(p, key, runtime, now)))
            if name is not None and not found:
                missing.append(f"proxy {name!r} not found" + (f" in namespace {ns!r}" if ns else ""))
    except StoreError as exc:
        raise common.Unreachable(f"cannot read Proxies from Redis at {redact_url(settings.broker)}: "
                                 f"{show(str(exc), 200)}") from None
    finally:
        store.close()
    return _print(blocks, missing, "No Proxies in Redis")


def _text(raw: bytes | str | None) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw or ""


def _print(blocks: list[str], missing: list[str], empty: str) -> int:
    if blocks:
        print("\n\n".join(blocks))
    for m in missing:
        print(m, file=sys.stderr)
    if not blocks and not missing:
        print(empty, file=sys.stderr)
    return common.EXIT_NOT_READY if missing else common.EXIT_OK


# --- ProviderHealth --------------------------------------------------------------


def ph_block(r: dict[str, Any], workers: list[str], now: float) -> list[str]:
    checked = r["checkedAt"]
    out = [field("Name", r["provider"]), field("Kind", PH_PREFIX), field("Type", r["type"]),
           field("Supported", r["supported"]), field("Last check", stamp(checked, now) if checked else "never"),
           field("Ready", r["ready"]), field("Reason", r["reason"]), field("Message", r["message"]),
           field("Workers", ", ".join(workers))]
    if not r["targets"]:
        out.append(field("Targets", NONE))
        return out
    out.append(field("Targets", r["targetsReady"]))
    out += grid(("NAME", "ADDRESS", "READY", "REASON", "LATENCY", "MESSAGE"),
                [(t["name"], t["address"] or "-", t["ready"], t["reason"], f"{t['latencyMillis']}ms", t["message"] or "")
                 for t in r["targets"]])
    for t in r["targets"]:
        if t["details"]:
            out.append(f"  {t['name']}: " + ", ".join(f"{k}={v}" for k, v in sorted(t["details"].items())))
    return out


def describe_ph(args: argparse.Namespace, names: list[str]) -> int:
    from fleet.cli import health
    from fleet.config import validate_name
    from fleet.settings import redact_url
    from fleet.store import Store, StoreError

    for name in names:
        if validate_name(name):
            raise common.BadInput(f"NAME {validate_name(name)} (got {show(name)})")
    settings = common.settings_from(args)
    config = common.config_from(settings, required=False)
    store = Store.from_url(settings.broker)
    now = time.time()
    try:
        rows, note = health.summaries(store, settings, config, now)
        workers = store.heartbeats.live()
    except StoreError as exc:
        raise common.Unreachable(f"cannot read results from Redis at {redact_url(settings.broker)}: "
                                 f"{show(str(exc), 200)}") from None
    finally:
        store.close()
    by_name = {r["provider"]: r for r in rows}
    chosen = [by_name[n] for n in names if n in by_name] if names else rows
    missing = [f"providerhealth {n!r} not found" for n in names if n not in by_name]
    if note:
        print(note.replace("fleet get:", "fleet describe:"), file=sys.stderr)
    return _print(["\n".join(ph_block(r, workers.get(r["provider"], []), now)) for r in chosen], missing,
                  "No providers (no providers file, and no results in Redis)")


# --- ProxyPool -----------------------------------------------------------------------


def pool_block(o: dict[str, Any], now: float) -> list[str]:
    """One ProxyPool as the API server (or, standalone, the manifests and Redis) holds it: the spec's replicas,
    providers, autoscale and strategy, and the status with each provider's share and the conditions."""
    meta, spec, st = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}

    def pairs(d: Any) -> str:
        return ", ".join(f"{k}={v}" for k, v in d.items()) if isinstance(d, dict) else ""

    out = [field("Name", meta.get("name")), field("Namespace", meta.get("namespace")), field("Kind", POOL_PREFIX),
           field("Generation", meta.get("generation")), field("Created", stamp(meta.get("creationTimestamp") or "", now)),
           "Spec:", field("Replicas", spec.get("replicas"), 2),
           field("Providers", ", ".join(f"{p.get('provider')} (weight {p.get('weight', 1)})"
                                        for p in spec.get("providers") or [] if isinstance(p, dict)), 2),
           field("Autoscale", pairs(spec.get("autoscale")), 2), field("Strategy", pairs(spec.get("strategy")), 2),
           field("Remediation", pairs(spec.get("remediation")), 2), field("Template", pairs(spec.get("template")), 2),
           "Status:"]
    out += [field(label, st.get(key), 2) for label, key in (
        ("Replicas", "replicas"), ("Ready", "readyReplicas"), ("Available", "availableReplicas"),
        ("Up-to-date", "updatedReplicas"), ("Unhealthy", "unhealthyReplicas"),
        ("Observed generation", "observedGeneration"), ("Selector", "selector"))]
    out.append(field("Last progress", stamp(st.get("progressTime") or "", now), 2))
    shares = [p for p in st.get("providers") or [] if isinstance(p, dict)]
    if shares:
        out.append("Providers:")
        out += grid(("PROVIDER", "DESIRED", "REPLICAS", "READY", "REFUSED"),
                    [(p.get("provider"), p.get("desired", 0), p.get("replicas", 0), p.get("readyReplicas", 0),
                      stamp(p.get("refusedAt") or "", now) if p.get("refusedAt") else "-") for p in shares])
    conditions = [c for c in st.get("conditions") or [] if isinstance(c, dict)]
    if conditions:
        out.append("Conditions:")
        out += grid(("TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"),
                    [(c.get("type"), c.get("status"), c.get("reason", ""), stamp(c.get("lastTransitionTime") or "", now),
                      c.get("message") or "") for c in conditions])
    else:
        out.append(field("Conditions", NONE))
    return out


def describe_pools(args: argparse.Namespace, names: list[str]) -> int:
    """The pools `args.read_pools` finds (the registry's `fleet.cli.pools.read`: command modules never import
    each other)."""
    found, missing = args.read_pools(args, names)
    now = time.time()
    return _print(["\n".join(pool_block(o, now)) for o in found], missing, "No ProxyPools")


# --- the command -----------------------------------------------------------------


def split(resource: str, names: list[str]) -> tuple[str, list[str]]:
    """(kind, names) of `px a`, `px/a`, `proxy.crawl.example.com/a` or `proxy.crawl.example.com/crawl/a` (what `fleet
    get -o name` prints), also as further arguments (`fleet describe px/a px/b`)."""
    kinds = {**{n: "px" for n in (*common.PROXY_NAMES, PROXY_PREFIX)}, **{n: "ph" for n in (*common.PH_NAMES, PH_PREFIX)},
             **{n: "pools" for n in (*common.POOL_NAMES, POOL_PREFIX)}}
    kind, slash, first = resource.partition("/")
    if kind not in kinds:
        raise common.BadInput(f"unknown resource {show(kind)}: fleet describe knows px (proxies), ph (providerhealth) "
                              "and pools (proxypools)")
    out = [first] if slash else []
    for n in names:
        k, slash, rest = n.partition("/")
        if slash and k in kinds:
            if kinds[k] != kinds[kind]:
                raise common.BadInput(f"{show(n)}: one kind at a time ({kinds[kind]})")
            out.append(rest)
        else:
            out.append(n)
    if kinds[kind] == "ph" and any("/" in n for n in out):
        raise common.BadInput("a ProviderHealth has no namespace: NAME only")
    return kinds[kind], out


def cmd_describe(args: argparse.Namespace) -> int:
    kind, names = split(args.resource, args.names)
    if kind == "ph":
        return describe_ph(args, names)
    if kind == "pools":
        return describe_pools(args, names)
    return describe_proxies(args, names)


def add_parser(sub: Any, *, read_pools: Callable[[argparse.Namespace, list[str]], tuple[list[dict[str, Any]], list[str]]]
               ) -> None:
    """`read_pools(args, names)`: the pools asked for and a line per name not found."""
    s = common.command(sub, "describe",
                       help="show a Proxy, ProviderHealth or ProxyPool in detail: spec, status, conditions and, for a "
                            "Proxy, its open leases and cooldowns from Redis; for a pool, each provider's share",
                       example="fleet describe px egress-a -n crawl; fleet get px -o name | xargs fleet describe; "
                               "fleet describe pools web -n crawl",
                       groups=("process", "store", "providers", "cluster", "health", "proxies"))
    s.add_argument("resource", help="px (proxies), ph (providerhealth) or pools (proxypools: the cluster's, or with "
                                    "--proxies the manifests'), or TYPE/NAME as fleet get -o name prints it")
    s.add_argument("names", nargs="*", metavar="name", help="which (default: all); px: in every namespace without -n; "
                                                            "pools: in namespace default without -n")
    s.add_argument("-n", "--namespace", help="px, pools: only this namespace")
    s.set_defaults(fn=cmd_describe, read_pools=read_pools)
