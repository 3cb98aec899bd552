"""The lease API's rendered objects (issue 14): a Deployment running `fleet
api` with its token from the `fleet-api-token` Secret, the `fleet-api`
Service on 8090, a ServiceAccount without a token or RBAC; and `fleet up`
runs it when it has a token."""

from __future__ import annotations

from fleet.cli import commands, supervise
from fleet.cli import subcommands as cli
from fleet.cli.api import cmd_api
from fleet.cli.render import API_PORT, API_TOKEN_KEY, API_TOKEN_SECRET
from fleet.settings import Settings
from tests.deploy.conftest import by_kind, of_component, pod


def test_the_api_deployment_service_and_account(workers):
    objs = of_component(workers, "api")
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Service", "ServiceAccount"]
    assert {o["metadata"]["name"] for o in objs} == {"fleet-api"}
    (d,) = by_kind(objs, "Deployment").values()
    assert d["spec"]["replicas"] == 2 and d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "api"
    spec = pod(d)
    assert spec["serviceAccountName"] == "fleet-api" and spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    assert c["command"] == ["fleet", "api"] and cli.parser().parse_args(c["command"][1:]).fn is cmd_api
    assert c["ports"] == [{"name": "http", "containerPort": API_PORT}] and API_PORT == 8090
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    env = {e["name"]: e for e in c["env"]}
    assert env["FLEET_API_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": API_TOKEN_SECRET, "key": API_TOKEN_KEY}}
    assert "FLEET_INSECURE_NO_AUTH" not in env and env["FLEET_PROVIDERS_CONFIG"]["value"] == ""
    Settings(api_bind_address=env["FLEET_API_BIND_ADDRESS"]["value"]).validate()
    (svc,) = by_kind(objs, "Service").values()
    assert svc["spec"] == {"selector": d["spec"]["selector"]["matchLabels"],
                           "ports": [{"name": "http", "port": API_PORT, "targetPort": "http"}]}


def test_nothing_grants_the_api_kubernetes_rights(installed):
    for o in installed:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert all(s.get("name") != "fleet-api" for s in o.get("subjects", ())), o["metadata"]["name"]


def test_fleet_up_runs_the_api_only_with_a_token_or_insecure(capsys):
    assert supervise.api(Settings(), {}, {}) == []
    assert "lease API off" in capsys.readouterr().err
    (child,) = supervise.api(Settings(), {"FLEET_API_TOKEN": "t" * 32}, {})
    assert child.argv == commands.api_argv() and child.env["FLEET_API_BIND_ADDRESS"] == "127.0.0.1:8090"
    (child,) = supervise.api(Settings(insecure_no_auth=True, api_bind_address="127.0.0.1:9999"), {},
                             {"FLEET_API_BIND_ADDRESS": "127.0.0.1:9999"})
    assert "FLEET_API_BIND_ADDRESS" not in child.env
