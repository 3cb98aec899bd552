"""Write the docs site's reference pages (docs/reference/) from their sources,
so no table in the docs can drift from the code:

- commands.md: every `fleet` command, its own arguments and the settings
  groups it reads, from the CLI's parser (`fleet.cli.subcommands.parser`);
- settings.md: every setting, from `fleet.settings.OPTIONS`;
- metrics.md: every metric family, from the /metrics registry each process
  composes (`process_registries`), and the alerts that use it;
- alerts.md: every alert, from deploy/prometheus/rules.yaml;
- resources.md: the fields of the CRDs, from their schema tables
  (deploy/crd/generate.py's `CRDS`);
- lease-api.md: the lease API, from the OpenAPI document `fleet api` serves
  (`fleet.leases.openapi.document`, at the default settings).

    python docs/generate.py            # rewrite the pages that changed
    python docs/generate.py --check    # exit 1 if any is stale

`tests/test_docs.py` asserts each committed page is what this writes.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REFERENCE = HERE / "reference"
RULES = ROOT / "deploy/prometheus/rules.yaml"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The scrape job `deploy/monitoring` gives each process' /metrics (tests/deploy/test_scrape_targets.py checks
# these against the ServiceMonitors and the PodMonitor as `fleet render` and kustomize print them).
JOBS = {"controller": "fleet-controller-metrics", "worker": "fleet-worker", "prober": "fleet-prober",
        "api": "fleet-api", "gateway": "fleet-gateway"}


def _header(source: str) -> str:
    return f"<!-- Generated from {source} by docs/generate.py: edit the source, then run python docs/generate.py. -->\n"


def _cell(text: Any) -> str:
    """Text for one markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- commands -----------------------------------------------------------------------------------------


def commands_page() -> str:
    from fleet.cli import subcommands

    root = subcommands.parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = [_header("the CLI's parser (fleet/cli/subcommands.py and the command modules)"),
           "# Commands\n",
           "Every `fleet` command: what it does, an example, its own arguments, and the groups of "
           "[settings](settings.md) it reads (each a flag of the command and a `FLEET_*` variable). "
           "`fleet COMMAND --help` says the same. How the commands behave together (output formats, `--watch`, "
           "exit codes): [The fleet command](../cli.md).\n",
           "| command | does |", "|---|---|"]
    out += [f"| [`fleet {name}`](#fleet-{name}) | {_cell(helps.get(name, ''))} |" for name in sub.choices]
    out.append("")
    for name, p in sub.choices.items():
        out.append(f"## fleet {name}\n")
        out.append(f"{_cell(helps.get(name, ''))}.\n" if helps.get(name) else "")
        example = re.search(r"^example: (.+)$", p.description or "", re.M)
        if example:
            out += ["```sh", example.group(1), "```", ""]
        own, groups = [], []
        for group in p._action_groups:
            title = group.title or ""
            if title.endswith(")") and " settings (" in title:
                groups.append(title.split(" settings (")[0])
                continue
            for action in group._group_actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                own.append(action)
        if own:
            out += ["| argument | what |", "|---|---|"]
            for action in own:
                names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest.upper()}`"
                parts = [(action.help or "").rstrip(".")]
                if action.choices:
                    parts.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
                if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
                    parts.append(f"default `{action.default}`")
                if action.option_strings and action.required:
                    parts.append("required")
                if not action.option_strings and action.nargs == "?":
                    parts.append("optional")
                what = "; ".join(p for p in parts if p)
                out.append(f"| {names} | {_cell(what + '.' if what else '')} |")
            out.append("")
        if groups:
            out.append("Settings: " + ", ".join(f"[{g}](settings.md#{g})" for g in groups) + ".\n")
        else:
            out.append("Settings: none.\n")
    return "\n".join(out).rstrip("\n") + "\n"


# --- settings -----------------------------------------------------------------------------------------


def settings_page() -> str:
    from fleet.settings import GROUPS, markdown_table

    out = [_header("fleet/settings.py (the Settings fields)"), "# Settings\n",
           "Every setting is a flag of the commands that read it and a variable in the environment; a flag wins, "
           "an empty one too. How values are written and checked: [Configuration](../configuration.md#process-settings). "
           "Which command reads which group: [Commands](commands.md).\n"]
    out += [f"- [{g}](#{g}): {d}" for g, d in GROUPS.items()]
    out.append("")
    for group, what in GROUPS.items():
        out += [f"## {group}\n", f"Settings of {what}.\n", markdown_table(group)]
    return "\n".join(out).rstrip("\n") + "\n"


# --- metrics ------------------------------------------------------------------------------------------


def process_registries() -> dict[str, Any]:
    """Each process' /metrics registry, from the collectors its entry point composes, on inputs that give
    each labelled family a series: controller (tasks/controller.py: fleet.health.metrics.collectors,
    ProxiesCollector, fleet.gc.runtime.collectors, fleet.pools.runtime.SERIES), worker
    (fleet.celery.calls.worker_registry), prober (fleet.prober.process: ProberSeries), api (fleet.leases.app:
    ApiSeries, with its Redis-read gauges answered, and the connection guard fleet.leases.process adds),
    gateway (fleet.gateway.process)."""
    from fleet import reload
    from fleet.celery.calls import CallMetrics, worker_registry
    from fleet.gateway.metrics import GatewaySeries
    from fleet.gc.metrics import GcCounters, LastSuccessCollector
    from fleet.health.metrics import ProviderTargetCollector
    from fleet.httpguard import Guard, Limits
    from fleet.leases.metrics import ApiSeries
    from fleet.pools.metrics import PoolSeries
    from fleet.prober.metrics import ProberSeries
    from fleet.proxies.metrics import ProxiesCollector
    from fleet.serving import ControllerCounters, registry_of

    status = reload.STATUS  # the worker's registry serves this process' one
    status.loaded(1.0)  # a process that has read its providers file (time 0 reads as never)
    api = ApiSeries()
    api.gauges.values = (0, 0, 0)
    api.registry.register(Guard(Limits()))
    prober = ProberSeries()
    prober.track("namespace/name")  # a Proxy's series show the `proxy` label
    return {
        "controller": registry_of([ProviderTargetCollector(lambda: [], lambda _checked: [], 60.0, read_last_round=lambda: None),
                                   *ControllerCounters(["ProviderHealth"]).collectors(),
                                   ProxiesCollector(lambda: {}, lambda: {}),
                                   LastSuccessCollector(["p"], lambda: {}), *GcCounters(["p"]).collectors(),
                                   status.collector(), PoolSeries()]),
        "worker": worker_registry(CallMetrics()),
        "prober": registry_of(prober.collectors()),
        "api": api.registry,
        "gateway": registry_of([GatewaySeries(), Guard(Limits())]),
    }


def metric_families() -> dict[str, dict[str, Any]]:
    """family → {type, help, labels, processes}, from every process' registry."""
    families: dict[str, dict[str, Any]] = {}
    for process, registry in process_registries().items():
        labelled: dict[str, tuple[str, ...]] = {}
        for collector in list(registry._collector_to_names):  # prometheus_client's own metrics name their labels
            if hasattr(collector, "_labelnames") and hasattr(collector, "_name"):
                labelled[collector._name] = tuple(collector._labelnames)
        for m in registry.collect():
            found = [*(getattr(m, "_labelnames", ()) or ()), *labelled.get(m.name, ()), *(k for s in m.samples for k in s.labels)]
            name = m.name + ("_total" if m.type == "counter" else "")
            entry = families.setdefault(name, {"type": m.type, "help": m.documentation, "labels": {}, "processes": []})
            entry["labels"].update(dict.fromkeys(k for k in found if k not in ("le", "quantile")))  # declared order
            entry["processes"].append(process)
    return families


def _alerts() -> list[dict[str, Any]]:
    rules = yaml.safe_load(RULES.read_text())
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def metrics_page() -> str:
    families = metric_families()
    alerts = _alerts()
    order = list(JOBS)
    out = [_header("each process' /metrics collectors (docs/generate.py's process_registries) and "
                   "deploy/prometheus/rules.yaml"),
           "# Metrics\n",
           "Every metric family fleet serves, the process serving it, the scrape job `deploy/monitoring` gives that "
           "process, and the [alerts](alerts.md) that use it. Where each process serves `/metrics` and what the "
           "gauges read: [Observability](../observability.md#metrics). Counters reset when their process restarts "
           "(use `rate()`/`increase()`); their label values are fixed sets, every series present from the start "
           "at 0.\n",
           "| family | labels | process | job | type | what | alerts |", "|---|---|---|---|---|---|---|"]
    for name in sorted(families, key=lambda n: (min(order.index(p) for p in families[n]["processes"]), n)):
        f = families[name]
        processes = sorted(set(f["processes"]), key=order.index)
        labels = ", ".join(f["labels"]) or "—"
        jobs = ", ".join(f"`{JOBS[p]}`" for p in processes)
        used = [a["alert"] for a in alerts if re.search(rf"\b{re.escape(name)}(_bucket|_count|_sum)?\b", a["expr"])]
        alert_links = ", ".join(f"[{a}](alerts.md#{a.lower()})" for a in used) or "—"
        out.append(f"| `{name}` | {labels} | {', '.join(processes)} | {jobs} | {f['type']} | {_cell(f['help'])} | {alert_links} |")
    return "\n".join(out) + "\n"


# --- alerts -------------------------------------------------------------------------------------------


def alerts_page() -> str:
    alerts = _alerts()
    out = [_header("deploy/prometheus/rules.yaml"), "# Alerts\n",
           "Every alert of `deploy/prometheus/rules.yaml` (a plain Prometheus rules file; "
           "`deploy/prometheus/prometheusrule.yaml` holds the same for the Prometheus Operator), with its runbook. "
           "How to load them: [Observability](../observability.md#alerts).\n",
           "| alert | severity | for | summary |", "|---|---|---|---|"]
    for a in alerts:
        out.append(f"| [{a['alert']}](#{a['alert'].lower()}) | {a['labels']['severity']} | {a.get('for', '—')} | "
                   f"{_cell(a['annotations']['summary'])} |")
    out.append("")
    for a in alerts:
        runbook = a["annotations"].get("runbook_url", "")
        out += [f"## {a['alert']}\n",
                f"Severity **{a['labels']['severity']}**" + (f", firing after {a['for']}" if a.get("for") else "") + ".\n",
                _cell(a["annotations"].get("description", "")) + "\n"]
        if runbook.startswith("docs/"):
            out.append(f"Runbook: [{Path(runbook).stem}](../{runbook.removeprefix('docs/')}).\n")
        out += ["```promql", a["expr"].rstrip("\n"), "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


# --- resources ----------------------------------------------------------------------------------------


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resources_page() -> str:
    crds = _load(ROOT / "deploy/crd/generate.py", "fleet_crd_generate").CRDS
    out = [_header("the schema tables (fleet/proxies/schema.py, fleet/pools/schema.py, fleet/health/schema.py)"),
           "# Resources\n",
           "The fields of fleet's custom resources, with their limits and defaults, from the tables that also write "
           "the CRDs in `deploy/crd/` (and hold the standalone manifests' parser to the same limits). What they do: "
           "[Proxies and ProxyPools](../proxies.md), [Provider health](../provider-health.md).\n"]
    for crd, source, roots in crds:
        kind = crd.resource.kind
        out += [f"## {kind}\n",
                f"`{crd.resource.crd_name}` (short name `{crd.resource.short_names[0]}`), from `{source}`.\n"
                if getattr(crd.resource, "short_names", None) else f"`{crd.resource.crd_name}`, from `{source}`.\n",
                crd.fields_table(*roots)]
    return "\n".join(out).rstrip("\n") + "\n"


# --- the lease API (OpenAPI) --------------------------------------------------------------------------


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "allOf" in schema or "oneOf" in schema:
        parts = schema.get("allOf") or schema.get("oneOf")
        return (" and " if "allOf" in schema else " or ").join(_type(s) for s in parts)
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if schema.get("format"):
        kind += f" ({schema['format']})"
    if schema.get("nullable"):
        kind += ", nullable"
    return kind


def _limits(schema: dict[str, Any]) -> str:
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"] if v is not None))
    if "minimum" in schema or "maximum" in schema:
        parts.append(f"{schema.get('minimum', '')}–{schema.get('maximum', '')}".strip("–"))
    if "maxLength" in schema:
        parts.append(f"at most {schema['maxLength']} characters")
    if "pattern" in schema:
        parts.append(f"`{schema['pattern']}`")
    if "default" in schema:
        parts.append(f"default `{schema['default']}`")
    return "; ".join(parts)


def _properties(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    rows = ["| field | type | required | limits | description |", "|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        rows.append(f"| `{name}` | {_cell(_type(prop))} | {'yes' if name in required else ''} | "
                    f"{_cell(_limits(prop))} | {_cell(prop.get('description', ''))} |")
    return rows


def lease_api_page() -> str:
    from fleet.leases.openapi import document
    from fleet.settings import Settings

    defaults = Settings()
    doc = document(defaults.lease_max_ttl, 300, defaults.max_leases_per_proxy, False)
    out = [_header("the OpenAPI document `fleet api` serves at /openapi.json (fleet/leases/openapi.py), at the "
                   "default settings"),
           f"# {doc['info']['title']}\n",
           _cell(doc["info"]["description"]) + "\n",
           f"OpenAPI {doc['openapi']}; `GET /openapi.json` on a running `fleet api` serves the document itself, with "
           "its own settings' limits (`--lease-max-ttl`, `--max-leases-per-proxy`). How to use it, with examples: "
           "[Lease API](../leases.md).\n",
           "| method | path | operation | summary |", "|---|---|---|---|"]
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    for path, method, op in ops:
        out.append(f"| {method.upper()} | `{path}` | [{op['operationId']}](#{op['operationId'].lower()}) | "
                   f"{_cell(op.get('summary', ''))} |")
    out.append("")
    for path, method, op in ops:
        out += [f"## {op['operationId']}\n", f"`{method.upper()} {path}`\n", _cell(op.get("summary", "")) + "\n",
                "Authentication: " + ("bearer token." if op.get("security") else "none.") + "\n"]
        if op.get("parameters"):
            out += ["| parameter | in | type | required | limits |", "|---|---|---|---|---|"]
            out += [f"| `{p['name']}` | {p['in']} | {_cell(_type(p['schema']))} | {'yes' if p.get('required') else ''} | "
                    f"{_cell(_limits(p['schema']))} |" for p in op["parameters"]]
            out.append("")
        if op.get("requestBody"):
            body = op["requestBody"]
            schema = body["content"]["application/json"]["schema"]
            out.append(f"Body ({'required' if body.get('required') else 'optional'}): {_type(schema)}.\n")
        out += ["| status | answer | body |", "|---|---|---|"]
        for status, resp in op["responses"].items():
            schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
            headers = ", ".join(f"`{h}`" for h in resp.get("headers", {}))
            out.append(f"| {status} | {_cell(resp['description'])}{' Headers: ' + headers + '.' if headers else ''} | "
                       f"{_cell(_type(schema)) if schema else ''} |")
        out.append("")
    out.append("## Schemas\n")
    for name, schema in doc["components"]["schemas"].items():
        if name == "bearer":
            continue
        out.append(f"### {name}\n")
        if schema.get("description"):
            out.append(_cell(schema["description"]) + "\n")
        if "allOf" in schema or "oneOf" in schema:
            for i, part in enumerate(schema.get("allOf") or schema.get("oneOf")):
                if "$ref" in part:
                    out.append(f"- {'All of' if 'allOf' in schema else 'Or'} {_type(part)}")
                    continue
                out += ["", f"{'With' if 'allOf' in schema else 'Form ' + str(i + 1) + ':'}", "", *_properties(part), ""]
            out.append("")
        else:
            out += [*_properties(schema), ""]
    return "\n".join(out).rstrip("\n") + "\n"


# --- all of them --------------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "commands.md": commands_page,
    "settings.md": settings_page,
    "metrics.md": metrics_page,
    "alerts.md": alerts_page,
    "resources.md": resources_page,
    "lease-api.md": lease_api_page,
}


def outputs() -> dict[Path, str]:
    """Every generated page and its text."""
    return {REFERENCE / name: page() for name, page in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a page is not what its source makes")
    args = p.parse_args(argv)
    pages = outputs()
    stale = [path for path, text in pages.items() if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"docs/reference/{path.name} is stale: run python docs/generate.py", file=sys.stderr)
        return 1 if stale else 0
    REFERENCE.mkdir(exist_ok=True)
    for path in stale:
        path.write_text(pages[path], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
