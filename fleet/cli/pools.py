"""`fleet get pools` and `fleet scale pool NAME --replicas N`: ProxyPools of
the cluster (the controller's kubeconfig settings, `--kubeconfig`/`--kube-context`,
in-cluster or ~/.kube/config), or with `--proxies` (standalone mode, as the
controller decides) those of the manifests, their status from Redis
(`fleet.pools.standalone`).

`get pools` lists them as `kubectl get pxp` prints them (NAME DESIRED
READY AVAILABLE AGE, NAMESPACE first across all namespaces). `scale pool`
is what `kubectl scale pxp` sends: a merge patch of the pool's scale
subresource (`fleet.kube.scale`), checked first against the pool's limits
(a whole number in [0, MAX_REPLICAS], within autoscale's [min, max] when
it autoscales, since the autoscaler would move it back at once). Standalone,
it writes the replicas override in Redis, which holds until the manifest's
own replicas changes (`kubectl scale` then `kubectl apply` of an edited file).

Exit codes as the rest of the CLI: 0 done, 1 no such pool, 2 bad input
(a bad N, past a limit, no cluster), 3 the API server unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from fleet import kube
from fleet.cli import common, listing
from fleet.durations import age
from fleet.pools.schema import MAX_REPLICAS
from providers.text import show

DEFAULT_NAMESPACE = "default"  # as kubectl: a pool named without -n is looked for here


def _client(args: argparse.Namespace) -> Any:
    settings = common.settings_from(args)
    api, _mode = kube.api_client(settings)
    if api is None:
        raise common.BadInput("ProxyPools need a cluster (no --kubeconfig, no in-cluster service account, no "
                                   "~/.kube/config) and no --proxies manifests (standalone mode)")
    return api


def _unreachable(exc: kube.KubeError) -> common.Unreachable:
    return common.Unreachable(f"{type(exc).__name__}: {show(str(exc), 300)}")


def _name(name: str | None) -> None:
    from fleet.config import validate_name

    if name is not None and validate_name(name):
        raise common.BadInput(f"NAME {validate_name(name)} (got {show(name)})")


def _standalone(args: argparse.Namespace) -> tuple[Any, Any] | None:
    """(settings, the store) in standalone mode (`--proxies` set), else None."""
    from fleet.store import Store

    settings = common.settings_from(args)
    if not settings.proxies:
        return None
    return settings, Store.from_url(settings.broker)


def _standalone_pools(args: argparse.Namespace, settings: Any, store: Any, warned: set[str]) -> list[dict[str, Any]]:
    from fleet.pools.standalone import InRedis
    from fleet.proxies.standalone import Standalone
    from fleet.store import StoreError

    where = InRedis(store.pools, Standalone(store.proxies, settings.proxies, settings.installation_id), settings.proxies,
                    settings.installation_id, write=False)
    try:
        items, m = where.pools()
    except StoreError as exc:
        raise common.Unreachable(f"cannot read ProxyPools from Redis: {show(str(exc), 200)}") from None
    for e in m.errors:
        if str(e) not in warned:  # once: a watch reads again every 2 s
            warned.add(str(e))
            print(f"warning: {e}", file=sys.stderr)
    return [o for o in items if not args.namespace or o["metadata"]["namespace"] == args.namespace]


def pools_source(args: argparse.Namespace) -> listing.Source:
    """`fleet get pools`: the cluster's ProxyPools, or standalone (`--proxies`) the manifests' with their status."""
    _name(args.name)
    ns = args.namespace or DEFAULT_NAMESPACE
    all_namespaces, wide = not args.namespace and args.name is None, args.output == "wide"
    standalone = _standalone(args)
    if standalone is not None:
        settings, store = standalone
        warned: set[str] = set()

        def read_items() -> list[dict[str, Any]]:
            items = _standalone_pools(args, settings, store, warned)
            if args.name is not None:
                items = [o for o in items if o["metadata"]["name"] == args.name and o["metadata"]["namespace"] == ns]
            return items

        close, missing = store.close, f"proxypool {args.name!r} not found in namespace {ns!r} of {settings.proxies}"
    else:
        api = _client(args)

        def read_items() -> list[dict[str, Any]]:
            try:
                if args.name is not None:
                    try:
                        return [_get(api, ns, args.name)]
                    except kube.NotFound:
                        return []
                listed = kube.list_page(api, kube.PROXY_POOL, namespace=args.namespace or None)
                return [i for i in listed.get("items") or [] if isinstance(i, dict)]
            except kube.KubeError as exc:
                raise _unreachable(exc) from None

        close, missing = (lambda: None), f"proxypool {args.name!r} not found in namespace {ns!r}"

    def read() -> listing.Listing:
        items = sorted(read_items(), key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
        head, rows = table(items, time.time(), all_namespaces, wide)
        shown = [listing.Item(f"{o['metadata'].get('namespace', '')}/{o['metadata'].get('name', '')}", row,
                              name_of(o, all_namespaces), o, sig=_steady(o)) for o, row in zip(items, rows, strict=True)]
        where = f"namespace {args.namespace!r}" if args.namespace else "any namespace"
        return listing.Listing(head, shown, f"No ProxyPools in {where}", lambda fmt: _document(args, items, fmt),
                               volatile=(head.index("AGE"),))

    return listing.Source(read, close, missing)


def read(args: argparse.Namespace, names: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """`fleet describe pools [NAME...]`: the pools named (all without a name), read as `fleet get pools` reads them,
    and a line per name not found."""
    found: list[dict[str, Any]] = []
    missing: list[str] = []
    asked: list[str | None] = [*names] if names else [None]
    for name in asked:
        source = pools_source(argparse.Namespace(**{**vars(args), "name": name, "output": "yaml"}))
        try:
            items = source.read().items
        finally:
            source.close()
        if name is not None and not items:
            missing.append(source.missing or f"proxypool {name!r} not found")
        found += [item.obj for item in items]
    return found, missing


NAME_PREFIX = "proxypool.crawl.example.com"


def name_of(o: dict[str, Any], all_namespaces: bool) -> str:
    """A pool's `-o name` line: `proxypool.crawl.example.com/NAME`, `.../NAMESPACE/NAME` across all namespaces."""
    meta = o.get("metadata") or {}
    if all_namespaces:
        return f"{NAME_PREFIX}/{meta.get('namespace', '')}/{meta.get('name', '')}"
    return f"{NAME_PREFIX}/{meta.get('name', '')}"


def _steady(o: dict[str, Any]) -> str:
    """What a change of a pool is (`--watch -o json|yaml`): the object but its resourceVersion and managedFields,
    which move with every write."""
    meta = {k: v for k, v in (o.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return json.dumps({**o, "metadata": meta}, sort_keys=True, default=str)


def _document(args: argparse.Namespace, items: list[dict[str, Any]], fmt: str) -> str:
    import yaml

    # one pool as itself; several as kubectl prints them, a List (which `fleet validate --proxies` reads back)
    doc = items[0] if args.name and items else {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True)
    return yaml.safe_dump(doc, sort_keys=True).rstrip()


def table(items: list[dict[str, Any]], now: float, all_namespaces: bool,
          wide: bool = False) -> tuple[list[str], list[list[Any]]]:
    """`kubectl get pxp`'s columns (the CRD's printer columns); `wide` adds UP-TO-DATE and UNHEALTHY members, the
    PROVIDERS with their weights and the AUTOSCALE range."""
    head = ["NAME", "DESIRED", "READY", "AVAILABLE", "AGE"]
    if wide:
        head += ["UP-TO-DATE", "UNHEALTHY", "PROVIDERS", "AUTOSCALE"]
    rows = []
    for o in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", ""))):
        meta, spec, st = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
        row = [meta.get("name", ""), spec.get("replicas", ""), st.get("readyReplicas", 0), st.get("availableReplicas", 0),
               age(meta.get("creationTimestamp"), now)]
        if wide:
            row += [st.get("updatedReplicas", 0), st.get("unhealthyReplicas", 0), _providers(spec), _autoscale(spec)]
        rows.append([meta.get("namespace", ""), *row] if all_namespaces else row)
    return (["NAMESPACE", *head] if all_namespaces else head), rows


def _providers(spec: dict[str, Any]) -> str:
    """`a:2,b:1`: each provider with its weight (1 unless set), as spread; `<none>` without any."""
    got = [p for p in spec.get("providers") or [] if isinstance(p, dict)]
    return ",".join(f"{p.get('provider', '')}:{p.get('weight', 1)}" for p in got) or "<none>"


def _autoscale(spec: dict[str, Any]) -> str:
    """`MIN-MAX` when it autoscales, `<none>` when not."""
    a = spec.get("autoscale")
    return f"{a.get('min', 0)}-{a.get('max', MAX_REPLICAS)}" if isinstance(a, dict) else "<none>"


def _get(api: Any, namespace: str, name: str) -> dict[str, Any]:
    """The pool; NotFound when there is none (a read only: the writer's installation label plays no part)."""
    out = kube.Writer(api, "fleet-cli").read(kube.PROXY_POOL, namespace, name)
    if out is None:
        raise kube.NotFound(f"proxypool {namespace}/{name}")
    return out


def replicas_of(text: str) -> int:
    """--replicas: a whole number in [0, MAX_REPLICAS]."""
    try:
        n = int(text, 10)
    except ValueError:
        raise common.BadInput(f"--replicas must be a whole number, got {show(text)}") from None
    if not 0 <= n <= MAX_REPLICAS:
        raise common.BadInput(f"--replicas must be between 0 and {MAX_REPLICAS}, got {n}")
    return n


def within_autoscale(spec: dict[str, Any], n: int) -> str | None:
    """Why `n` cannot be set on a pool with this spec (None: it can)."""
    a = spec.get("autoscale")
    if not isinstance(a, dict):
        return None
    lo, hi = a.get("min", 0), a.get("max", MAX_REPLICAS)
    if n > hi:
        return f"{n} is past autoscale.max ({hi}): the autoscaler would scale it back; raise autoscale.max first"
    if n < lo:
        return f"{n} is below autoscale.min ({lo}): the autoscaler would scale it back; lower autoscale.min first"
    return None


def cmd_scale(args: argparse.Namespace) -> int:
    if args.resource not in common.POOL_NAMES:
        raise common.BadInput(f"unknown resource {show(args.resource)}: fleet scale knows pool (proxypool)")
    n = replicas_of(args.replicas)
    _name(args.name)
    ns = args.namespace or DEFAULT_NAMESPACE
    standalone = _standalone(args)
    if standalone is not None:
        return _scale_standalone(args, ns, n, *standalone)
    api = _client(args)
    try:
        pool = _get(api, ns, args.name)
        why = within_autoscale(pool.get("spec") or {}, n)
        if why:
            raise common.BadInput(f"proxypool {ns}/{args.name}: {why}")
        got = kube.scale(api, kube.PROXY_POOL, ns, args.name, n)
    except kube.NotFound:
        print(f"proxypool {args.name!r} not found in namespace {ns!r}", file=sys.stderr)
        return common.EXIT_NOT_READY
    except kube.Rejected as exc:
        raise common.BadInput(f"proxypool {ns}/{args.name}: the API server refused {n}: {show(str(exc), 300)}") from None
    except kube.KubeError as exc:
        raise _unreachable(exc) from None
    print(f"proxypool.crawl.example.com/{args.name} scaled to {(got.get('spec') or {}).get('replicas', n)}")
    return common.EXIT_OK


def _scale_standalone(args: argparse.Namespace, ns: str, n: int, settings: Any, store: Any) -> int:
    from fleet.pools.standalone import declared_pools, set_replicas
    from fleet.store import StoreError

    try:
        d = next((d for d in declared_pools(settings.proxies).pools if d.key == f"{ns}/{args.name}"), None)
        if d is None:
            print(f"proxypool {args.name!r} not found in namespace {ns!r} of {settings.proxies}", file=sys.stderr)
            return common.EXIT_NOT_READY
        why = within_autoscale(d.obj["spec"], n)
        if why:
            raise common.BadInput(f"proxypool {ns}/{args.name}: {why}")
        set_replicas(store.pools, settings.proxies, ns, args.name, n)
    except StoreError as exc:
        raise common.Unreachable(f"cannot write the scale to Redis: {show(str(exc), 200)}") from None
    finally:
        store.close()
    print(f"proxypool.crawl.example.com/{args.name} scaled to {n} (standalone: until the manifest's replicas "
          f"changes from {d.replicas if d.replicas is not None else 'unset'})")
    return common.EXIT_OK


def add_parser(sub: Any) -> None:
    s = common.command(sub, "scale", help=(
        "set a ProxyPool's replicas: its scale subresource, as kubectl scale; standalone (--proxies), an override "
        "in Redis that holds until the manifest's own replicas changes"),
        example="fleet scale pool crawl --replicas 5 -n crawlers", groups=("process", "store", "cluster", "proxies"))
    s.add_argument("resource", help="pool (proxypool)")
    s.add_argument("name")
    s.add_argument("--replicas", required=True, help=f"the new replicas, 0 to {MAX_REPLICAS}")
    s.add_argument("-n", "--namespace", help=f"the pool's namespace (default {DEFAULT_NAMESPACE})")
    s.set_defaults(fn=cmd_scale)
