"""Every metric family is scraped: each family named in the alert rules or
in the docs' metrics page (docs/reference/metrics.md, generated from each
process' /metrics registry, built from the same collectors its entry point
serves) is served by a fleet process, and that process' pods — as `fleet
render` prints them — are scraped by a ServiceMonitor or PodMonitor of
deploy/monitoring on the port where the process listens, under the job the
page names for the family."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleet import serving
from fleet.settings import Settings, parse_bind_address
from tests.deploy.conftest import ROOT
from tests.docsgen import REFERENCE, generator

PAGE = REFERENCE / "metrics.md"
RULES = ROOT / "deploy/prometheus/rules.yaml"
SUFFIXES = ("_bucket", "_count", "_sum", "_created")
# The setting (environment variable) with the address each process serves its /metrics on.
BIND = {"controller": "metrics_bind_address", "worker": "worker_metrics_bind_address",
        "prober": "prober_metrics_bind_address", "api": "api_bind_address",
        "gateway": "gateway_metrics_bind_address"}


def _families(registry: CollectorRegistry) -> set[str]:
    names = {line.split()[2] for line in generate_latest(registry).decode().splitlines() if line.startswith("# TYPE ")}
    return {n for n in names if not n.endswith("_created")}


def _registries() -> dict[str, CollectorRegistry]:
    """Each process' /metrics registry, as the docs' generator composes it (docs/generate.py)."""
    return generator().process_registries()


SERVED_BY: dict[str, set[str]] = {}
for _process, _reg in _registries().items():
    for _f in _families(_reg):
        SERVED_BY.setdefault(_f, set()).add(_process)
# Families every process that reads the providers file serves of its own (fleet.reload): the rest belong to one.
# The connection guard's (fleet.httpguard) are served by the API and the gateway alike, each of its own.
PER_PROCESS = {serving.CONFIG_RELOAD_SUCCESSFUL, serving.CONFIG_RELOAD_SUCCESS_TIMESTAMP, serving.CONFIG_RELOAD_FAILURES,
               serving.HTTP_CONNECTIONS, serving.HTTP_CONNECTIONS_CLOSED}


def _family(name: str) -> str:
    """A sample name (…_bucket, …_count) → its family."""
    if name in SERVED_BY:
        return name
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in SERVED_BY:
            return name[: -len(suffix)]
    return name


def _page_table() -> dict[str, tuple[set[str], set[str]]]:
    """The docs' metrics page: family → (processes, jobs)."""
    rows = re.findall(r"^\| `(proxy_operator_\w+)` \| [^|]* \| ([\w, ]+) \| ((?:`[\w-]+`(?:, )?)+) \|", PAGE.read_text(), re.M)
    assert rows, "no metrics table in docs/reference/metrics.md"
    return {family: (set(process.split(", ")), set(re.findall(r"`([\w-]+)`", jobs))) for family, process, jobs in rows}


def _rule_families() -> set[str]:
    return {_family(m) for m in re.findall(r"proxy_operator_\w+", RULES.read_text())}


# --- the families ---------------------------------------------------------------------


def test_every_exported_family_is_served_by_exactly_one_process():
    exported = set(_exported().values())
    per_process = {p: _families(reg) for p, reg in _registries().items()}
    assert exported - set(SERVED_BY) == set(), "a family no process' registry serves (add its collector above?)"
    for a in per_process:
        for b in per_process:
            shared = per_process[a] & per_process[b] - PER_PROCESS
            assert a == b or not shared, (a, b, shared)


def test_the_metrics_page_is_freshly_generated():
    assert PAGE.read_text() == generator().metrics_page(), "docs/reference/metrics.md is stale: run python docs/generate.py"


def test_the_metrics_page_names_every_family_with_its_process():
    table = _page_table()
    assert set(table) == set(SERVED_BY), (sorted(set(SERVED_BY) - set(table)), sorted(set(table) - set(SERVED_BY)))
    wrong = {f: (processes, SERVED_BY[f]) for f, (processes, _jobs) in table.items() if SERVED_BY[f] != processes}
    assert wrong == {}, "the metrics page names another process than the one serving the family"


def _exported() -> dict[str, str]:
    """fleet.serving's metric names: constant → family."""
    return {k: v for k, v in vars(serving).items() if k.isupper() and isinstance(v, str) and v.startswith("proxy_operator_")}


def test_every_metric_name_in_fleet_metrics_is_in_the_metrics_page_and_back():
    """Each name in fleet/serving.py is pinned, one to one, by a row of the docs' metrics page."""
    exported = _exported()
    assert len(set(exported.values())) == len(exported), "two constants of fleet.serving name one family"
    table = set(_page_table())
    assert set(exported.values()) == table, (sorted(set(exported.values()) - table), sorted(table - set(exported.values())))


def test_metric_names_are_written_in_fleet_metrics_only():
    """A family's name is a string literal in fleet/serving.py and nowhere else in the code (docstrings aside)."""
    import ast

    found: dict[str, list[str]] = {}
    for folder in ("fleet", "tasks", "beat", "providers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        re.fullmatch(r"proxy_operator_\w+", node.value):
                    found.setdefault(str(path.relative_to(ROOT)), []).append(node.value)
    assert set(found) == {"fleet/serving.py"}, {k: v for k, v in found.items() if k != "fleet/serving.py"}
    assert sorted(found["fleet/serving.py"]) == sorted(_exported().values())


def test_the_alert_rules_name_served_families_only():
    used = _rule_families()
    assert used and used <= set(SERVED_BY), used - set(SERVED_BY)


# --- the scrape targets -----------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is understood here: {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _process_of(deployment: dict[str, Any]) -> str | None:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container.get("command", [])
    return command[1] if command[:1] == ["fleet"] and len(command) > 1 and command[1] in BIND else None


def _listen_port(container: dict[str, Any], process: str) -> int | None:
    """Where the process serves /metrics in this container (its FLEET_* variable, or the setting's
    default), None when it serves none."""
    setting = BIND[process]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    address = env.get("FLEET_" + setting.upper(), getattr(Settings(), setting))
    bind = parse_bind_address(address, setting)
    return None if bind is None else bind[1]


def _job(monitor: dict[str, Any], endpoint: dict[str, Any], service: dict[str, Any] | None) -> str:
    """The job label the Prometheus Operator gives the targets: a relabeling's, else the Service's name
    (or its jobLabel) for a ServiceMonitor, `<namespace>/<name>` for a PodMonitor."""
    pinned = [r.get("replacement") for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "job"]
    if pinned:
        return str(pinned[-1])
    if service is not None:
        label = monitor["spec"].get("jobLabel")
        return str(service["metadata"].get("labels", {}).get(label) or service["metadata"]["name"])
    return f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"


def scrape_targets(objects: list[dict[str, Any]], monitors: list[dict[str, Any]]) -> dict[str, set[str]]:
    """process → the jobs its pods are scraped under, on the port the process listens on, at /metrics."""
    deployments = [d for d in objects if d["kind"] == "Deployment" and _process_of(d)]
    services = [s for s in objects if s["kind"] == "Service"]
    out: dict[str, set[str]] = {}

    def hit(monitor: dict[str, Any], endpoint: dict[str, Any], service: dict[str, Any] | None,
            pod_labels: dict[str, str], container: dict[str, Any], port_name: str | int, process: str) -> None:
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        number = ports.get(port_name) if isinstance(port_name, str) else port_name
        if number is None or endpoint.get("path", "/metrics") != "/metrics":
            return
        if number == _listen_port(container, process):
            out.setdefault(process, set()).add(_job(monitor, endpoint, service))

    for monitor in monitors:
        namespace = monitor["metadata"]["namespace"]
        assert "namespaceSelector" not in monitor["spec"], "this check reads the monitor's own namespace only"
        for d in deployments:
            if d["metadata"]["namespace"] != namespace:
                continue
            process = _process_of(d)
            assert process is not None
            labels = d["spec"]["template"]["metadata"]["labels"]
            (container,) = d["spec"]["template"]["spec"]["containers"]
            if monitor["kind"] == "PodMonitor":
                if _selects(monitor["spec"]["selector"], labels):
                    for ep in monitor["spec"]["podMetricsEndpoints"]:
                        hit(monitor, ep, None, labels, container, ep["port"], process)
                continue
            for svc in services:
                if (svc["metadata"].get("namespace") != namespace
                        or not _selects(monitor["spec"]["selector"], svc["metadata"].get("labels", {}))
                        or not svc["spec"].get("selector", {}).items() <= labels.items()):
                    continue
                for ep in monitor["spec"]["endpoints"]:
                    for sp in svc["spec"]["ports"]:
                        if sp.get("name") == ep["port"]:
                            hit(monitor, ep, svc, labels, container, sp.get("targetPort", sp["port"]), process)
    return out


@pytest.fixture(scope="module")
def targets(installed, monitoring) -> dict[str, set[str]]:
    monitors = [o for o in monitoring if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    return scrape_targets(installed, monitors)


def test_every_process_is_scraped_under_one_job(targets):
    assert {p: len(jobs) for p, jobs in targets.items()} == {p: 1 for p in BIND}, targets


def test_the_generators_jobs_are_the_monitors_jobs(targets):
    assert {p: {job} for p, job in generator().JOBS.items()} == targets


def test_every_family_in_the_alerts_or_the_metrics_page_is_scraped_under_the_job_the_page_names(targets):
    table = _page_table()
    for family in sorted(set(table) | _rule_families()):
        jobs = set()
        for process in SERVED_BY[family]:
            assert process in targets, f"{family}: served by the {process}, which no monitor in deploy/monitoring scrapes"
            jobs |= targets[process]
        assert jobs == table[family][1], (family, SERVED_BY[family], jobs, table[family])


def test_every_provider_worker_is_scraped(installed, monitoring):
    """The PodMonitor picks every worker (one Deployment per provider), not only the first."""
    workers = [d for d in installed if d["kind"] == "Deployment" and _process_of(d) == "worker"]
    assert len(workers) == 3
    monitors = [o for o in monitoring if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    for w in workers:
        assert scrape_targets([w], monitors) == {"worker": {"fleet-worker"}}, w["metadata"]["name"]


# --- the check itself can fail ----------------------------------------------------------


def _broken(installed: list[dict[str, Any]], process: str, change) -> list[dict[str, Any]]:
    out = copy.deepcopy(installed)
    for d in out:
        if d["kind"] == "Deployment" and _process_of(d) == process:
            change(d["spec"]["template"]["spec"]["containers"][0])
    return out


def _without_env(name: str):
    def change(container: dict[str, Any]) -> None:
        container["env"] = [e for e in container["env"] if e["name"] != name]
    return change


def _rename_ports(container: dict[str, Any]) -> None:
    for port in container["ports"]:
        port["name"] = "other"


def _listen_on(name: str, address: str):
    def change(container: dict[str, Any]) -> None:
        container["env"] = [e for e in container["env"] if e["name"] != name] + [{"name": name, "value": address}]
    return change


@pytest.mark.parametrize("process, change", [
    ("worker", _without_env("FLEET_WORKER_METRICS_BIND_ADDRESS")),  # the default: off
    ("worker", _rename_ports),
    ("worker", _listen_on("FLEET_WORKER_METRICS_BIND_ADDRESS", ":9191")),  # listens elsewhere than the port scraped
    ("api", _rename_ports),  # the Service's targetPort names no container port
    ("api", _listen_on("FLEET_API_BIND_ADDRESS", ":8091")),
    ("prober", _listen_on("FLEET_PROBER_METRICS_BIND_ADDRESS", "0")),
])
def test_a_process_not_listening_where_it_is_scraped_is_not_counted(installed, monitoring, process, change):
    monitors = [o for o in monitoring if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    got = scrape_targets(_broken(installed, process, change), monitors)
    assert process not in got and set(got) == set(BIND) - {process}


def test_a_monitor_missing_or_selecting_nothing_is_not_counted(installed, monitoring):
    monitors = [copy.deepcopy(o) for o in monitoring if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    assert set(scrape_targets(installed, [m for m in monitors if m["kind"] != "PodMonitor"])) == set(BIND) - {"worker"}
    for m in monitors:
        if m["metadata"]["name"] == "fleet-api":
            m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "lease-api"
    assert set(scrape_targets(installed, monitors)) == set(BIND) - {"api"}
