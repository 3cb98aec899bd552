"""The prober's rendered objects (issue 13): a Deployment running `fleet
prober`, its `fleet-prober` Service on the `metrics` port (8081), and a
ServiceAccount without a token and without any RBAC: it needs Redis only."""

from __future__ import annotations

from fleet.cli import subcommands as cli
from fleet.cli.prober import cmd_prober
from fleet.cli.render import PROBER_PORT
from fleet.settings import Settings
from tests.deploy.conftest import by_kind, of_component, pod


def test_the_prober_deployment_service_and_account(workers):
    objs = of_component(workers, "prober")
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Service", "ServiceAccount"]
    assert {o["metadata"]["name"] for o in objs} == {"fleet-prober"}
    (d,) = by_kind(objs, "Deployment").values()
    assert d["spec"]["replicas"] == 1
    assert d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "prober"
    spec = pod(d)
    assert spec["serviceAccountName"] == "fleet-prober" and spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    assert c["command"] == ["fleet", "prober"] and cli.parser().parse_args(c["command"][1:]).fn is cmd_prober
    assert c["ports"] == [{"name": "metrics", "containerPort": PROBER_PORT}] and PROBER_PORT == 8081
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez"), ("startupProbe", "/livez")):
        assert c[probe]["httpGet"] == {"path": path, "port": "metrics"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLEET_PROBER_METRICS_BIND_ADDRESS"] == f":{PROBER_PORT}" and env["FLEET_PROVIDERS_CONFIG"] == ""
    Settings(prober_metrics_bind_address=env["FLEET_PROBER_METRICS_BIND_ADDRESS"]).validate()
    assert not [v for v in spec["volumes"] if "configMap" in v or "secret" in v]
    (sa,) = by_kind(objs, "ServiceAccount").values()
    assert sa["automountServiceAccountToken"] is False
    (svc,) = by_kind(objs, "Service").values()
    assert svc["spec"] == {"selector": d["spec"]["selector"]["matchLabels"],
                           "ports": [{"name": "metrics", "port": PROBER_PORT, "targetPort": "metrics"}]}


def test_nothing_grants_the_prober_kubernetes_rights(installed):
    for o in installed:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert all(s.get("name") != "fleet-prober" for s in o.get("subjects", ())), o["metadata"]["name"]
