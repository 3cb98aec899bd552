"""`fleet render`: the controller, beat, and one worker Deployment per
configured provider, each worker with its queue and worker name from the one
command line, its own ServiceAccount, RBAC only where it talks to this
cluster, and only its own credentials, mounted optional; every pod template
carrying the providers ConfigMap's hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import yaml

from fleet.cli import commands
from fleet.cli import subcommands as cli
from fleet.cli.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_MAP,
    INSTALLATION_LABEL,
    NODE_ANNOTATION,
    QUEUE_ANNOTATION,
    RenderError,
    credentials_secret,
    render,
)
from fleet.config import load
from fleet.settings import Settings
from tests.deploy.conftest import THREE, by_kind, of_component, pod
from tests.deploy.test_manifests import validate

NAMES = ["kvm-home", "gcp-eu", "cluster"]


def secret_volumes(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in pod(d)["volumes"] if "secret" in v]


def mounts(d: dict[str, Any]) -> dict[str, str]:
    (c,) = pod(d)["containers"]
    return {m["name"]: m["mountPath"] for m in c["volumeMounts"]}


def test_three_providers_three_worker_deployments(workers):
    deployments = by_kind(of_component(workers, "worker"), "Deployment")
    assert sorted(deployments) == sorted(f"fleet-worker-{n}" for n in NAMES)
    assert set(by_kind(workers, "Deployment")) == set(deployments) | {"fleet-controller", "fleet-beat", "fleet-prober", "fleet-api",
                                                                      "fleet-gateway"}
    validate(workers)
    for name in NAMES:
        d = deployments[f"fleet-worker-{name}"]
        (c,) = pod(d)["containers"]
        args = cli.parser().parse_args(c["command"][1:])
        assert c["command"][0] == "fleet" and args.fn is cli.cmd_worker and args.provider == name
        argv = commands.worker_argv(args.provider, args.concurrency)
        assert argv[argv.index("-Q") + 1] == d["metadata"]["annotations"][QUEUE_ANNOTATION] == f"provider.{name}"
        assert argv[argv.index("-n") + 1] == d["metadata"]["annotations"][NODE_ANNOTATION] == f"{name}@%h"
        assert pod(d)["serviceAccountName"] == f"fleet-worker-{name}"
        assert c["readinessProbe"]["exec"]["command"] == ["fleet", "probe", "ready"]
        assert c["livenessProbe"]["exec"]["command"] == ["fleet", "probe", "live", "-p", name]
        assert cli.parser().parse_args(c["livenessProbe"]["exec"]["command"][1:]).fn is cli.cmd_probe
        # provider-call metrics: served on the port the container declares, and the setting is valid
        env = {e["name"]: e.get("value") for e in c["env"]}
        port = int(env["FLEET_WORKER_METRICS_BIND_ADDRESS"].rsplit(":", 1)[1])
        assert c["ports"] == [{"name": "metrics", "containerPort": port}]
        Settings(worker_metrics_bind_address=env["FLEET_WORKER_METRICS_BIND_ADDRESS"]).validate()


def test_each_worker_mounts_only_its_own_credentials_optionally(workers):
    deployments = by_kind(workers, "Deployment")
    for name in NAMES:
        d = deployments[f"fleet-worker-{name}"]
        for v in secret_volumes(d):
            assert v["secret"]["secretName"] == credentials_secret(name)
            assert v["secret"]["optional"] is True
        (c,) = pod(d)["containers"]
        assert all(m.get("readOnly") for m in c["volumeMounts"] if m["mountPath"] != "/tmp")

    kvm = deployments["fleet-worker-kvm-home"]
    (vol,) = secret_volumes(kvm)
    assert vol["secret"]["items"] == [{"key": "id_ed25519", "path": "id_ed25519"}, {"key": "known_hosts", "path": "known_hosts"}]
    assert mounts(kvm)[vol["name"]] == "/etc/fleet/kvm-home"

    gcp = deployments["fleet-worker-gcp-eu"]
    (vol,) = secret_volumes(gcp)
    assert vol["secret"]["items"] == [{"key": "application_default_credentials.json", "path": "application_default_credentials.json"}]
    (c,) = pod(gcp)["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CLOUDSDK_CONFIG"] == mounts(gcp)[vol["name"]]

    assert secret_volumes(deployments["fleet-worker-cluster"]) == []
    # nobody else's variables either
    for name in ("kvm-home", "cluster"):
        (c,) = pod(deployments[f"fleet-worker-{name}"])["containers"]
        assert "CLOUDSDK_CONFIG" not in {e["name"] for e in c["env"]}


def test_only_the_kubernetes_worker_gets_a_token_and_pod_rights(workers):
    accounts = by_kind(workers, "ServiceAccount")
    deployments = by_kind(workers, "Deployment")
    for name in NAMES:
        sa = f"fleet-worker-{name}"
        in_cluster = name == "cluster"
        assert accounts[sa]["automountServiceAccountToken"] is in_cluster
        assert pod(deployments[sa])["automountServiceAccountToken"] is in_cluster
    rbac = [o for o in of_component(workers, "worker") if o["apiVersion"].startswith("rbac.")]
    assert sorted(o["kind"] for o in rbac) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    for binding in [o for o in rbac if o["kind"].endswith("Binding")]:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fleet-worker-cluster", "namespace": "fleet-system"}]
    # only the cluster-wide list is cluster-scoped; the rest is a Role in the proxies' namespace
    (cluster_role,) = by_kind(rbac, "ClusterRole").values()
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    (role,) = by_kind(rbac, "Role").values()
    assert role["metadata"]["namespace"] == "fleet-system"  # `namespace:` unset: the worker's own
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get"]}]


def _hashes(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {n: d["spec"]["template"]["metadata"].get("annotations", {}).get(CONFIG_HASH_ANNOTATION, "")
            for n, d in by_kind(objects, "Deployment").items()}


def _reads_config(d: dict[str, Any]) -> bool:
    return any(v.get("configMap", {}).get("name") == CONFIG_MAP for v in pod(d)["volumes"])


def test_the_config_map_is_the_file_and_its_hash_rolls_every_process_that_reads_it(installed, workers, tmp_path):
    (cm,) = by_kind(workers, "ConfigMap").values()
    assert cm["data"]["providers.yaml"] == THREE
    digest = hashlib.sha256(THREE.encode()).hexdigest()
    readers = {n for n, d in by_kind(installed, "Deployment").items() if _reads_config(d)}
    assert {"fleet-controller", "fleet-beat"} | {f"fleet-worker-{n}" for n in NAMES} == readers
    # every Deployment that mounts the ConfigMap, from either command, carries its hash
    assert {n: h for n, h in _hashes(installed).items() if n in readers} == dict.fromkeys(readers, digest)
    changed = tmp_path / "p.yaml"
    changed.write_text(THREE + "# edited\n")
    rolled = {n: h for n, h in _hashes(render(load(str(changed)), changed.read_text())).items() if h}
    assert set(rolled) == readers
    assert digest not in rolled.values() and len(set(rolled.values())) == 1


def test_a_kubeconfig_is_mounted_instead_of_a_token(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("providers:\n  - name: other\n    type: kubernetes\n    kubernetes: {kubeconfig: /etc/fleet/other/kubeconfig}\n")
    objs = render(load(str(path)), path.read_text())
    validate(objs)
    assert [o for o in of_component(objs, "worker") if o["apiVersion"].startswith("rbac.")] == []
    (d,) = by_kind(of_component(objs, "worker"), "Deployment").values()
    assert pod(d)["automountServiceAccountToken"] is False
    (vol,) = secret_volumes(d)
    assert vol["secret"]["items"] == [{"key": "kubeconfig", "path": "kubeconfig"}]


def test_a_fake_provider_gets_nothing(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("providers:\n  - name: demo\n    type: fake\n    fake: {}\n")
    objs = render(load(str(path)), path.read_text())
    assert [o["kind"] for o in of_component(objs, "worker")] == ["ServiceAccount", "Deployment"]
    (d,) = by_kind(of_component(objs, "worker"), "Deployment").values()
    assert secret_volumes(d) == [] and pod(d)["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("key_file", "problem"),
    [
        ("id_ed25519", "absolute"),
        ("/etc/fleet/../x/id", "absolute, normalised"),
        ("/tmp/keys/id", "hidden by the mount"),
        ("/etc/id", "hidden by the mount"),
        ("/etc/fleet/config/id", "hidden by the mount"),
    ],
)
def test_unmountable_credential_paths_are_refused(tmp_path, key_file, problem):
    path = tmp_path / "p.yaml"
    path.write_text(
        "providers:\n  - name: kvm\n    type: kvm\n    kvm:\n"
        f"      sshKeyFile: {key_file}\n      insecureIgnoreHostKey: true\n"
        "      hosts: [{name: h, address: 'h.example.net:22', user: u}]\n"
    )
    with pytest.raises(RenderError, match=problem):
        render(load(str(path)), path.read_text())


def test_cli_prints_yaml_or_json(three_path, capsys):
    assert cli.main(["render", "-c", str(three_path), "--image", "reg.example/fleet:1", "--namespace", "proxies"]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(by_kind(objs, "Deployment")) == 8  # controller, beat, prober, api, gateway, three workers
    for d in by_kind(objs, "Deployment").values():
        assert d["metadata"]["namespace"] == "proxies"
        assert d["metadata"]["labels"][INSTALLATION_LABEL] == "proxies"  # the installation defaults to the namespace
        assert pod(d)["containers"][0]["image"] == "reg.example/fleet:1"
    assert cli.main(["render", "-c", str(three_path), "--namespace", "proxies", "--installation", "eu-1"]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {o["metadata"]["labels"][INSTALLATION_LABEL] for o in objs} == {"eu-1"}
    assert cli.main(["render", "-c", str(three_path), "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(objs)


def test_cli_reports_an_unmountable_config_as_bad_input(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(
        "providers:\n  - name: kvm\n    type: kvm\n    kvm:\n      sshKeyFile: key\n      insecureIgnoreHostKey: true\n"
        "      hosts: [{name: h, address: 'h.example.net:22', user: u}]\n"
    )
    assert cli.main(["render", "-c", str(path)]) == cli.EXIT_BAD_INPUT
    assert "credential file 'key' must be an absolute" in capsys.readouterr().err


CLOUDS = """\
providers:
  - name: ec2
    type: aws
    aws: {region: eu-west-1, allowedSources: [203.0.113.0/24]}
  - name: hz
    type: hetzner
    hetzner: {token: SENTINEL-hcloud-token, allowedSources: [203.0.113.0/24]}
  - name: gcp-eu
    type: gcp
    gcp: {project: my-project}
"""


def test_aws_and_hetzner_workers_get_only_their_own_credentials(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(CLOUDS)
    objs = render(load(str(path)), path.read_text())
    validate(objs)
    deployments = by_kind(of_component(objs, "worker"), "Deployment")
    assert [o for o in of_component(objs, "worker") if o["apiVersion"].startswith("rbac.")] == []

    def env(name: str) -> dict[str, str]:
        (c,) = pod(deployments[f"fleet-worker-{name}"])["containers"]
        return {e["name"]: e.get("value") for e in c["env"]}

    aws = deployments["fleet-worker-ec2"]
    (vol,) = secret_volumes(aws)
    assert vol["secret"] == {"secretName": credentials_secret("ec2"), "optional": True, "defaultMode": 0o440,
                             "items": [{"key": "config", "path": "config"}, {"key": "credentials", "path": "credentials"}]}
    assert mounts(aws)[vol["name"]] == "/var/run/secrets/fleet/aws"
    assert env("ec2")["AWS_SHARED_CREDENTIALS_FILE"] == "/var/run/secrets/fleet/aws/credentials"
    assert env("ec2")["AWS_CONFIG_FILE"] == "/var/run/secrets/fleet/aws/config"
    assert pod(aws)["automountServiceAccountToken"] is False

    hz = deployments["fleet-worker-hz"]
    names = {v["secret"]["secretName"] for v in secret_volumes(hz)}
    assert names == {credentials_secret("hz"), "fleet-hz-secrets"}
    # the inline token left the ConfigMap for the hz worker's own Secret
    holders = [o for o in objs if "SENTINEL-hcloud-token" in json.dumps(o)]
    assert [(o["kind"], o["metadata"]["name"]) for o in holders] == [("Secret", "fleet-hz-secrets")]
    (cm,) = by_kind(objs, "ConfigMap").values()
    assert "tokenFile: /etc/fleet/secrets/token" in cm["data"]["providers.yaml"]

    # nobody else's credentials or variables
    for name in ("hz", "gcp-eu"):
        assert not any(k.startswith("AWS_") for k in env(name))
    for name in ("ec2", "gcp-eu"):
        d = deployments[f"fleet-worker-{name}"]
        assert {v["secret"]["secretName"] for v in secret_volumes(d)} == {credentials_secret(name)}
    assert "CLOUDSDK_CONFIG" not in env("ec2") and "CLOUDSDK_CONFIG" not in env("hz")


def test_cli_renders_a_role_per_proxy_namespace_and_refuses_a_bad_one(three_path, capsys, monkeypatch):
    monkeypatch.delenv("FLEET_PROXY_NAMESPACES", raising=False)
    assert cli.main(["render", "-c", str(three_path), "--namespace", "fleet-a", "--proxy-namespaces", "crawl,team-b"]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "Role"}
    assert {("crawl", "fleet:fleet-a:controller"), ("team-b", "fleet:fleet-a:controller")} <= roles
    controller = by_kind(objs, "Deployment")["fleet-controller"]
    assert {"name": "FLEET_PROXY_NAMESPACES", "value": "crawl,team-b"} in pod(controller)["containers"][0]["env"]
    assert cli.main(["render", "-c", str(three_path), "--proxy-namespaces", "Crawl"]) == cli.EXIT_BAD_INPUT
    assert "--proxy-namespaces: 'Crawl' is not a namespace name" in capsys.readouterr().err
