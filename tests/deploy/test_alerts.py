"""The Prometheus alert rules in deploy/prometheus: promtool accepts them and
their unit tests pass, every alert is tested firing and not firing, has a
runbook that says what to look at, and the PrometheusRule is the plain rules
file, generated."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet import serving

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy/prometheus"
RULES_FILE = PROM / "rules.yaml"
TESTS_FILE = PROM / "tests.yaml"
RUNBOOKS = ROOT / "docs/runbooks"

REQUIRED = {
    "ProviderTargetDown",
    "ProviderChecksStale",
    "ProviderCheckOverdue",
    "ProviderQueueBacklog",
    "NoWorkerForProvider",
    "ControllerDown",
    "RoundsStopped",
    # issue 13: Proxies, orphan GC, the prober
    "ProxiesUnhealthy",
    "ProxyStuck",
    "GCFailing",
    "ProberDown",
    # issue 18: the providers file refused on reload
    "ConfigReloadRefused",
    # issue 19: provider workers and the lease API
    "ProviderCallsFailing",
    "LeaseRefusals",
    # issue 23: the gateway
    "GatewayNoProxies",
    "GatewayUpstreamErrors",
    # issue 22: ProxyPools
    "PoolUnavailable",
    "PoolRemediationBlocked",
    "PoolAtMaxScale",
}
# not about one provider
FLEET_WIDE = {"ControllerDown", "RoundsStopped", "ProxiesUnhealthy", "ProxyStuck", "ProberDown", "ConfigReloadRefused",
              "LeaseRefusals", "GatewayNoProxies", "GatewayUpstreamErrors"}
# about one ProxyPool: named by its namespace and name
POOL_ALERTS = {"PoolUnavailable", "PoolRemediationBlocked", "PoolAtMaxScale"}
CONTROLLER_JOB = "fleet-controller-metrics"
PROBER_JOB = "fleet-prober"
# The scrape job each process' ServiceMonitor must make (by the component its
# selector picks), and the alert that watches it with `absent(up{job=…})`.
JOBS = {"controller": (CONTROLLER_JOB, "ControllerDown"), "prober": (PROBER_JOB, "ProberDown")}

RULES: dict[str, Any] = yaml.safe_load(RULES_FILE.read_text())
ALERTS: dict[str, dict[str, Any]] = {r["alert"]: r for g in RULES["groups"] for r in g["rules"] if "alert" in r}


def _generator():
    spec = importlib.util.spec_from_file_location("fleet_prometheus_generate", PROM / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        pytest.fail(
            "promtool not found (looked on PATH and at /usr/bin/promtool). It comes from the Debian package "
            "`prometheus`, listed in ci/apt-packages.txt: run `make deps` or `apt-get install prometheus`."
        )
    return path


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


# --- promtool --------------------------------------------------------------------


def test_promtool_check_rules(promtool):
    out = _run([promtool, "check", "rules", str(RULES_FILE)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in out.stdout


def test_promtool_unit_tests_pass(promtool):
    out = _run([promtool, "test", "rules", str(TESTS_FILE)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_the_prometheusrule_spec_passes_promtool_too(promtool, tmp_path):
    doc = yaml.safe_load((PROM / "prometheusrule.yaml").read_text())
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc["spec"]))
    out = _run([promtool, "check", "rules", str(spec)])
    assert out.returncode == 0, out.stdout + out.stderr


# --- what the rules must contain -------------------------------------------------


def test_the_required_alerts_exist():
    assert set(ALERTS) >= REQUIRED, REQUIRED - set(ALERTS)


def test_every_alert_is_tested_firing_and_not_firing():
    cases = [c for t in yaml.safe_load(TESTS_FILE.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert set(ALERTS) - firing == set(), "never tested firing"
    assert set(ALERTS) - quiet == set(), "never tested not firing (exp_alerts: [])"


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_labels_and_annotations(name):
    rule = ALERTS[name]
    assert rule["labels"]["severity"] in ("warning", "critical")
    ann = rule["annotations"]
    assert ann["summary"] and ann["description"]
    assert ann["runbook_url"] == f"docs/runbooks/{name}.md"
    if name in POOL_ALERTS:
        assert "{{ $labels.pool_namespace }}/{{ $labels.pool }}" in ann["summary"], "a pool alert names its pool"
    elif name not in FLEET_WIDE:
        assert "{{ $labels.provider }}" in ann["summary"], "a provider alert names its provider"


def test_severities():
    critical = {n for n, r in ALERTS.items() if r["labels"]["severity"] == "critical"}
    assert critical == {"ControllerDown", "NoWorkerForProvider", "RoundsStopped", "ProberDown"}


def test_rules_use_only_exported_metric_names():
    exported = {v for k, v in vars(serving).items() if k.isupper() and isinstance(v, str) and v.startswith("proxy_operator_")}
    used = {m for r in ALERTS.values() for m in re.findall(r"proxy_operator_\w+", r["expr"])}
    assert used and used <= exported, used - exported


def test_proxies_unhealthy_is_a_ratio_guarded_against_no_running_proxies():
    expr = ALERTS["ProxiesUnhealthy"]["expr"]
    assert serving.PROXIES_UNHEALTHY in expr
    assert re.search(r'/ on \(namespace, job\)\s*\(max by \(namespace, job\) \(proxy_operator_proxies\{phase="Running"\}\) > 0\)', expr), (
        "divide by the Running Proxies, dropping a zero denominator"
    )


def test_proxy_stuck_watches_the_transitional_phases_only():
    from fleet.proxies.model import PHASES

    (phases,) = re.findall(r'proxy_operator_proxies_oldest_in_phase_seconds\{phase=~"([\w|]+)"\}', ALERTS["ProxyStuck"]["expr"])
    assert set(phases.split("|")) == {"Provisioning", "Replacing", "Deleting"}
    assert set(phases.split("|")) <= set(PHASES), "a phase the Proxy model does not have"


def test_gc_failing_watches_skips_and_the_last_success():
    expr = ALERTS["GCFailing"]["expr"]
    assert serving.GC_SKIPPED in expr and serving.GC_LAST_SUCCESS in expr
    # one alert per provider: both branches keep the same labels (`or` then dedupes)
    assert expr.count("by (namespace, job, provider)") == 2
    assert '"*"' in ALERTS["GCFailing"]["annotations"]["summary"], "a whole sweep skipped (provider *) says so"


def test_pool_alerts_keep_one_series_per_pool_and_read_the_decisions_figures():
    for name in POOL_ALERTS:
        expr = ALERTS[name]["expr"]
        groupings = re.findall(r"by \(([^)]*)\)", expr)
        assert groupings and set(groupings) == {"namespace, job, pool_namespace, pool"}, (name, groupings)
        assert set(re.findall(r"on \(([^)]*)\)", expr)) <= {"namespace, job, pool_namespace, pool"}, name
    unavailable = ALERTS["PoolUnavailable"]["expr"]
    assert serving.POOL_MAX_UNAVAILABLE in unavailable and 'state="available"' in unavailable and 'state="desired"' in unavailable
    assert serving.POOL_REMEDIATION_BLOCKED in ALERTS["PoolRemediationBlocked"]["expr"]
    assert serving.POOL_AUTOSCALE_MAX in ALERTS["PoolAtMaxScale"]["expr"]
    from fleet.pools.metrics import STATES
    states = {v for r in POOL_ALERTS for v in _label_values(ALERTS[r]["expr"], serving.POOL_REPLICAS, "state")}
    assert states and states <= set(STATES)


def test_rounds_stopped_watches_beats_stamp_and_spares_checks_off():
    expr = ALERTS["RoundsStopped"]["expr"]
    assert serving.LAST_ROUND in expr
    assert expr.count("proxy_operator_provider_check_interval_seconds > 0") == 2, "an interval of 0 (checks off) never alerts"


def _label_values(expr: str, metric: str, label: str) -> set[str]:
    """Every value a matcher `label=~"a|b"`, `label!="c"`, … of `metric` names in `expr`."""
    out: set[str] = set()
    for matchers in re.findall(rf"{metric}\{{([^}}]*)\}}", expr):
        for values in re.findall(rf'{label}\s*(?:=~|!~|!=|=)\s*"([^"]*)"', matchers):
            out |= set(values.split("|"))
    return out


def test_provider_calls_failing_counts_error_classes_the_workers_export_and_spares_not_found():
    from fleet.celery.calls import RESULTS

    expr = ALERTS["ProviderCallsFailing"]["expr"]
    named = _label_values(expr, serving.REQUESTS_TOTAL, "result")
    assert named == {"transient", "permanent", "quota_exceeded", "not_found"} and named <= set(RESULTS)
    assert re.search(r'result=~"[\w|]+"', expr) and 'result!="not_found"' in expr, "errors over calls, not_found apart"
    assert expr.count("sum by (namespace, job, provider, op)") == 2, "one alert per provider and operation, over pods"


def test_lease_refusals_watch_the_apis_refusals_of_valid_requests():
    from fleet.leases.metrics import RESULTS

    expr = ALERTS["LeaseRefusals"]["expr"]
    named = _label_values(expr, serving.LEASE_REQUESTS, "result")
    assert named == {"no_proxy", "none_free", "bad_request", "unauthorized"} and named <= set(RESULTS)
    assert "> 0)" in expr, "a quiet API (no requests) never divides by zero"


# --- runbooks --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_every_alert_has_a_runbook(name):
    page = ROOT / ALERTS[name]["annotations"]["runbook_url"]
    assert page.is_file(), f"{page.relative_to(ROOT)} is missing"
    text = page.read_text()
    assert text.startswith(f"# {name}\n")
    assert "## Look first" in text


def test_every_runbook_belongs_to_an_alert():
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == set(ALERTS)
    index = (RUNBOOKS / "README.md").read_text()
    for name in ALERTS:
        assert f"[{name}]({name}.md)" in index


def test_runbooks_name_the_first_commands():
    for cmd in ("fleet get ph", "kubectl get ph", "celery -A fleet.celery.app inspect active_queues"):
        assert any(cmd in (RUNBOOKS / f"{n}.md").read_text() for n in ALERTS), cmd
    firsts = {
        "ProxiesUnhealthy": ("kubectl get px -A", "fleet get px", "/metrics"),
        "ProxyStuck": ("kubectl get px -A", "fleet get px", "logs deploy/fleet-controller"),
        "GCFailing": ("fleet gc --dry-run", "logs deploy/fleet-controller"),
        "ProberDown": ("/metrics", "logs deploy/fleet-prober", "kubectl get px -A"),
    }
    for name, cmds in firsts.items():
        text = (RUNBOOKS / f"{name}.md").read_text()
        look = text[text.index("## Look first"):]
        assert [c for c in cmds if c not in look] == [], name
    down = (RUNBOOKS / "ProviderTargetDown.md").read_text()
    assert "fleet get ph" in down and "kubectl get ph" in down


def test_the_target_down_runbook_explains_every_reason():
    """Every failure reason a provider or fleet can report has a row."""
    reasons = set()
    for path in (ROOT / "providers").rglob("*.py"):
        reasons |= set(re.findall(r'^REASON_\w+ = "(\w+)"', path.read_text(), re.M))
    reasons = (reasons - {"Reachable"}) | {"CheckOverdue"}
    assert {"Timeout", "Unreachable", "Unauthorized", "Forbidden", "APIError", "CheckerError", "PoolNotFound"} <= reasons
    rows = set(re.findall(r"^\| `(\w+)` \|", (RUNBOOKS / "ProviderTargetDown.md").read_text(), re.M))
    assert reasons - rows == set(), "reasons without a row in docs/runbooks/ProviderTargetDown.md"


def test_relative_links_in_runbooks_resolve():
    for page in RUNBOOKS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


# --- one source: the PrometheusRule is generated ------------------------------------


def test_the_prometheusrule_holds_the_same_groups():
    doc = yaml.safe_load((PROM / "prometheusrule.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["namespace"] == "fleet-system"
    assert doc["spec"] == RULES


def test_the_prometheusrule_is_freshly_generated():
    gen = _generator()
    assert (PROM / "prometheusrule.yaml").read_text() == gen.render(gen.load_rules()), (
        "prometheusrule.yaml is stale: run python deploy/prometheus/generate.py"
    )
    assert gen.main(["--check"]) == 0


def test_absolute_runbook_links_on_request():
    gen = _generator()
    rules = gen.with_runbook_base(gen.load_rules(), "https://git.example/fleet/blob/main/")
    urls = {r["alert"]: r["annotations"]["runbook_url"] for g in rules["groups"] for r in g["rules"]}
    assert urls["ControllerDown"] == "https://git.example/fleet/blob/main/docs/runbooks/ControllerDown.md"


# --- the scrape jobs ControllerDown and ProberDown watch are the ones the ServiceMonitors make -------


def _deploy_objects() -> list[dict[str, Any]]:
    """deploy/'s manifests and what `fleet render` adds (the controller's Service among them); the overlays'
    committed renderings are that same output, left out."""
    from fleet.cli.render import render
    from fleet.config import load

    out = []
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if PROM in path.parents or ROOT / "deploy/overlays" in path.parents or path.name == "kustomization.yaml":
            continue
        out += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and "kind" in d]
    example = ROOT / "deploy/examples/providers.yaml"
    return out + render(load(str(example)), example.read_text())


def _monitors() -> list[dict[str, Any]]:
    return [o for o in _deploy_objects() if o["kind"] == "ServiceMonitor"]


def test_the_down_alerts_watch_their_jobs():
    for job, alert in JOBS.values():
        expr = ALERTS[alert]["expr"]
        assert f'up{{job="{job}"}}' in expr and f'absent(up{{job="{job}"}})' in expr, alert


def test_every_process_with_a_down_alert_has_a_service_monitor():
    components = {sm["spec"]["selector"].get("matchLabels", {}).get("app.kubernetes.io/component") for sm in _monitors()}
    assert components >= set(JOBS), set(JOBS) - components


@pytest.mark.parametrize("component", sorted(JOBS))
def test_down_alert_watches_the_servicemonitor_job(component):
    """The Prometheus Operator names the job after the Service (or its
    `jobLabel`), unless a relabeling sets it: a mismatch makes ControllerDown
    (ProberDown) fire forever (`absent`)."""
    job, alert = JOBS[component]
    objects = _deploy_objects()
    monitors = [
        o for o in objects
        if o["kind"] == "ServiceMonitor"
        and o["spec"]["selector"].get("matchLabels", {}).get("app.kubernetes.io/component") == component
    ]
    if not monitors:
        pytest.skip(f"no ServiceMonitor for the {component} in deploy/")
    for sm in monitors:
        spec = sm["spec"]
        wanted = spec["selector"].get("matchLabels", {})
        services = [
            o for o in objects
            if o["kind"] == "Service" and wanted.items() <= o["metadata"].get("labels", {}).items()
        ]
        for ep in spec["endpoints"]:
            set_by_relabel = [r.get("replacement") for r in ep.get("relabelings", []) if r.get("targetLabel") == "job"]
            if set_by_relabel:
                jobs = {set_by_relabel[-1]}
            elif services:
                label = spec.get("jobLabel")
                jobs = {s["metadata"].get("labels", {}).get(label) or s["metadata"]["name"] for s in services}
            else:
                pytest.skip(f"ServiceMonitor {sm['metadata']['name']} selects no Service in deploy/ yet")
            assert jobs == {job}, (
                f"ServiceMonitor {sm['metadata']['name']} makes job={sorted(jobs)}, {alert} watches job={job!r}: "
                f"add `relabelings: [{{targetLabel: job, replacement: {job}}}]` to its endpoint, "
                "or change the job in deploy/prometheus/rules.yaml and run deploy/prometheus/generate.py"
            )


def test_the_prober_service_monitor_scrapes_the_prober_metrics_port():
    """The prober's Service (from `fleet render`) has the port the
    ServiceMonitor names, on the prober's pods' metrics port (8081)."""
    (sm,) = [m for m in _monitors() if m["metadata"]["name"] == "fleet-prober"]
    assert sm["metadata"]["namespace"] == "fleet-system"
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["port"], ep["path"]) == ("metrics", "/metrics")
    wanted = sm["spec"]["selector"]["matchLabels"]
    assert wanted == {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/component": "prober"}
    objects = _deploy_objects()
    services = [o for o in objects if o["kind"] == "Service" and wanted.items() <= o["metadata"].get("labels", {}).items()]
    if not services:
        pytest.skip("`fleet render` prints no prober Service yet")
    assert [s["metadata"]["name"] for s in services] == [PROBER_JOB]
    (port,) = [p for p in services[0]["spec"]["ports"] if p["name"] == ep["port"]]
    assert port["port"] == 8081
