"""What the install commands (docs/deploying.md) install — deploy/ as kustomize renders it plus
`fleet render` — valid against the Kubernetes schemas (offline, strict), and
keeping the seed's promises: non-root, read-only root filesystem, a 64Mi
/tmp, 128Mi for the controller, a ServiceAccount per process with only the
rights it uses, one beat, Flower never open, probes that say something
true."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fleet.celery import routing
from fleet.cli import subcommands as cli
from fleet.cli.render import BROKER_SECRET, CONFIG_DIR, CONFIG_MAP, TMP_SIZE, UID
from tests.deploy import kustomize
from tests.deploy.conftest import DEPLOY, by_kind, component, pod

K8S_VERSION = "1.30"
# API groups of CRDs the schemas don't know (the Prometheus Operator's);
# their objects are checked structurally below.
CRD_GROUPS = ("monitoring.coreos.com/",)
FLEET_COMPONENTS = {"controller", "beat", "flower", "worker", "prober", "api", "gateway"}


def validate(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{kustomize.key(obj)}: {'.'.join(map(str, exc.path))}: {exc.message}") from None


def test_every_object_fits_the_kubernetes_schemas(installed, monitoring):
    assert len(installed) == len({kustomize.key(o) for o in installed}), "duplicate objects"
    validate(installed + monitoring)


def test_the_schema_check_is_not_vacuous(installed):
    (ctl,) = [o for o in installed if o["kind"] == "Deployment" and o["metadata"]["name"] == "fleet-controller"]
    bad = yaml.safe_load(yaml.safe_dump(ctl))
    pod(bad)["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True  # a typo strict mode must catch
    with pytest.raises(AssertionError, match="readOnlyRootFileSystem"):
        validate([bad])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the Python rendering stands alone")
@pytest.mark.parametrize("directory", [DEPLOY, DEPLOY / "monitoring", DEPLOY / "overlays" / "example"])
def test_kubectl_kustomize_renders_the_same(directory):
    out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True).stdout
    theirs = {kustomize.key(o): o for o in yaml.safe_load_all(out) if o}
    ours = {kustomize.key(o): o for o in kustomize.render(directory)}
    assert theirs == ours


def test_kustomizations_hold_only_what_the_python_rendering_knows():
    for kfile in DEPLOY.rglob("kustomization.yaml"):
        assert set(yaml.safe_load(kfile.read_text())) <= kustomize.SUPPORTED, kfile


def test_every_deployment_runs_in_the_envelope(installed):
    deployments = by_kind(installed, "Deployment")
    assert {component(d) for d in deployments.values()} == FLEET_COMPONENTS | {"redis"}
    for name, d in deployments.items():
        spec = pod(d)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        tmp = {v["name"]: v for v in spec["volumes"]}["tmp"]
        assert tmp == {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}, name
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"], name
            assert "memory" in c["resources"]["limits"], name


def test_fleet_processes_share_config_broker_and_image(installed):
    images = set()
    for d in by_kind(installed, "Deployment").values():
        if component(d) not in FLEET_COMPONENTS:
            continue
        spec = pod(d)
        assert spec["securityContext"]["runAsUser"] == UID
        (c,) = spec["containers"]
        images.add(c["image"])
        env = {e["name"]: e for e in c["env"]}
        assert env["FLEET_BROKER_URL"]["valueFrom"] == {"secretKeyRef": {"name": BROKER_SECRET, "key": "url"}}
        # reads no providers file, so nothing to roll it for (the image's default is unset)
        if component(d) in ("flower", "prober", "api", "gateway"):
            assert env["FLEET_PROVIDERS_CONFIG"]["value"] == ""
            assert not [v for v in spec["volumes"] if "configMap" in v]
            continue
        assert {"name": "config", "configMap": {"name": CONFIG_MAP}} in spec["volumes"]
        assert {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True} in c["volumeMounts"]
        assert env["FLEET_PROVIDERS_CONFIG"]["value"] == CONFIG_DIR + "/providers.yaml"
    assert len(images) == 1, "one image for every role"


def test_an_empty_providers_config_variable_means_none():
    from fleet.settings import Settings

    assert Settings.from_env({"FLEET_PROVIDERS_CONFIG": ""}).providers_config is None


def test_controller_memory_limit_is_the_seeds_128mi(installed):
    (c,) = pod(by_kind(installed, "Deployment")["fleet-controller"])["containers"]
    assert c["resources"]["limits"]["memory"] == "128Mi"


def test_beat_runs_active_and_standby(installed):
    """Two replicas behind the Redis lock (tests/integration/test_beat.py):
    a rolling update is safe, so is one pod dying."""
    beat = by_kind(installed, "Deployment")["fleet-beat"]
    assert beat["spec"]["replicas"] == 2
    assert beat["spec"]["strategy"] == {"type": "RollingUpdate"}


def test_flower_is_never_open(rendered):
    (c,) = pod(by_kind(rendered, "Deployment")["fleet-flower"])["containers"]
    env = {e["name"]: e for e in c["env"]}
    ref = env["FLOWER_BASIC_AUTH"]["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is False and ref["name"] == "fleet-flower"
    assert not any("basic" in a or "auth" in a for a in c["command"]), "no credentials on the command line"
    args = cli.parser().parse_args(c["command"][1:])
    assert args.fn is cli.cmd_flower  # which refuses to start without auth (test_probe_and_flower.py)
    svc = by_kind(rendered, "Service")["fleet-flower"]
    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"


# The processes that call the Kubernetes API: the controller, and the worker
# of the `kubernetes` provider in THREE (in-cluster).
API_CALLERS = {"fleet-controller", "fleet-worker-cluster"}


def test_each_process_has_its_own_service_account_and_only_api_callers_a_token(installed):
    accounts = by_kind(installed, "ServiceAccount")
    used = [pod(d)["serviceAccountName"] for d in by_kind(installed, "Deployment").values()]
    assert len(used) == len(set(used)) and set(used) <= set(accounts)
    for d in by_kind(installed, "Deployment").values():
        sa = pod(d)["serviceAccountName"]
        wants_token = sa in API_CALLERS
        assert pod(d)["automountServiceAccountToken"] is wants_token, sa
        assert accounts[sa].get("automountServiceAccountToken", True) is wants_token, sa


def test_only_api_callers_are_bound_and_the_controller_only_to_fleets_kinds_and_secret_reads(installed):
    bindings = [o for o in installed if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    subjects = {s["name"] for b in bindings for s in b["subjects"]}
    assert subjects == API_CALLERS | {"fleet-secrets"}  # the Job that creates the install's Secrets
    (secrets_role,) = [o for o in installed if o["kind"] == "Role" and o["metadata"]["name"] == "fleet-secrets"]
    assert secrets_role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]  # nothing else
    roles = by_kind(installed, "ClusterRole")
    rules = [r for b in bindings if b["subjects"][0]["name"] == "fleet-controller" for r in roles[b["roleRef"]["name"]]["rules"]]
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        if rule["apiGroups"] == [""]:  # core: only get on Secrets (a Proxy's cloudInit.secretRef)
            assert (rule["resources"], rule["verbs"]) == (["secrets"], ["get"])
            continue
        assert rule["apiGroups"] == ["crawl.example.com"]
        assert set(rule["resources"]) <= {"providerhealths", "providerhealths/status", "proxies", "proxies/status"}
        if set(rule["resources"]) & {"providerhealths", "providerhealths/status"}:
            assert "watch" not in rule["verbs"]  # uncached: never watched
        if set(rule["resources"]) & {"proxies", "proxies/status"}:
            assert not {"create", "delete", "deletecollection"} & set(rule["verbs"])  # people create and delete Proxies


def _parse(argv: list[str]):
    assert argv[0] == "fleet", argv
    return cli.parser().parse_args(argv[1:])


def test_commands_and_exec_probes_are_real_fleet_invocations(installed):
    expected = {"controller": cli.cmd_controller, "beat": cli.cmd_beat, "flower": cli.cmd_flower, "worker": cli.cmd_worker}
    for d in by_kind(installed, "Deployment").values():
        comp = component(d)
        if comp not in expected:
            continue
        (c,) = pod(d)["containers"]
        assert _parse(c["command"]).fn is expected[comp]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if "exec" in c.get(probe, {}):
                args = _parse(c[probe]["exec"]["command"])
                assert args.fn is cli.cmd_probe


def test_probes_say_something_true(installed):
    deployments = by_kind(installed, "Deployment")
    (ctl,) = pod(deployments["fleet-controller"])["containers"]
    # Ready only while Redis answers; alive while it serves (fleet/serving.py).
    assert ctl["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert ctl["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    (beat,) = pod(deployments["fleet-beat"])["containers"]
    assert beat["readinessProbe"]["exec"]["command"] == ["fleet", "probe", "ready"]
    (flower,) = pod(deployments["fleet-flower"])["containers"]
    assert flower["readinessProbe"]["httpGet"]["path"] == "/healthcheck"


def test_service_monitor_scrapes_the_controller_metrics_port(installed, monitoring):
    rendered = installed
    sm = by_kind(monitoring, "ServiceMonitor")["fleet-controller"]  # the prober's: tests/deploy/test_alerts.py
    assert sm["metadata"]["namespace"] == "fleet-system"
    (ep,) = sm["spec"]["endpoints"]
    assert ep["path"] == "/metrics"
    services = [
        s for s in by_kind(rendered, "Service").values()
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in services] == ["fleet-controller-metrics"]
    (port,) = [p for p in services[0]["spec"]["ports"] if p["name"] == ep["port"]]
    (c,) = pod(by_kind(rendered, "Deployment")["fleet-controller"])["containers"]
    (cport,) = [p for p in c["ports"] if p["name"] == port["targetPort"]]
    assert cport["containerPort"] == port["port"] == 8080
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLEET_METRICS_BIND_ADDRESS"] == ":8080"
    # and the Service selects exactly the controller's pods
    assert services[0]["spec"]["selector"] == by_kind(rendered, "Deployment")["fleet-controller"]["spec"]["selector"]["matchLabels"]


def test_everything_namespaced_is_in_fleet_system(installed, monitoring):
    ns = {o["metadata"]["name"] for o in installed if o["kind"] == "Namespace"}
    assert ns == {"fleet-system"}
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for o in installed + monitoring:
        if o["kind"] not in cluster_scoped:
            assert o["metadata"].get("namespace") == "fleet-system", kustomize.key(o)


def test_controller_queue_is_the_one_routing_declares(installed):
    (c,) = pod(by_kind(installed, "Deployment")["fleet-controller"])["containers"]
    from fleet.cli import commands

    argv = commands.controller_argv(_parse(c["command"]).concurrency)
    assert argv[argv.index("-Q") + 1] == routing.CONTROLLER_QUEUE
