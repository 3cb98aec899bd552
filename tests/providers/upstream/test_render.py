"""`fleet render` for an upstream provider: its credential files (and
listFile, which may carry `user:pass@`) are mounted read-only in its own
worker, and in the gateway and the prober (who dial its members) at
/etc/fleet/upstreams/<name>/ as list, username, password, from the Secret
`fleet-<name>-credentials` the operator makes; no other process and no other
provider's Secret; the ConfigMap every process mounts holds only their paths."""

from __future__ import annotations

from fleet.cli.render import UPSTREAM_SECRETS_DIR, credentials_secret, render
from fleet.config import load
from tests.deploy.conftest import THREE, by_kind, pod

TEXT = """\
providers:
  - name: dc
    type: upstream
    upstream:
      mode: list
      proxies: ["http://203.0.113.7:8080"]
      listFile: /etc/fleet/dc/proxies.txt
      usernameFile: /etc/fleet/dc/username
      passwordFile: /etc/fleet/dc/password
  - name: resi
    type: upstream
    upstream:
      mode: vendor
      endpoint: http://gate.vendor.example:7777
      usernameTemplate: "{user}-session-{session}-country-{country}"
      usernameFile: /etc/fleet/resi/username
      passwordFile: /etc/fleet/resi/password
"""


def test_only_each_providers_worker_mounts_its_credentials(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text(TEXT)
    deployments = by_kind(render(load(str(path)), TEXT), "Deployment")
    for name, files in (("dc", ["password", "proxies.txt", "username"]), ("resi", ["password", "username"])):
        d = deployments[f"fleet-worker-{name}"]
        (vol,) = [v for v in pod(d)["volumes"] if v.get("secret", {}).get("secretName") == credentials_secret(name)]
        assert [i["key"] for i in vol["secret"]["items"]] == files
        assert {"name": vol["name"], "mountPath": f"/etc/fleet/{name}", "readOnly": True} in pod(d)["containers"][0]["volumeMounts"]
    for dialer, var in (("fleet-gateway", "FLEET_GATEWAY_UPSTREAM_SECRETS_DIR"),
                        ("fleet-prober", "FLEET_PROBER_UPSTREAM_SECRETS_DIR")):
        spec = pod(deployments[dialer])
        mounted = {v["secret"]["secretName"]: v for v in spec["volumes"]
                   if v.get("secret", {}).get("secretName", "").endswith("-credentials")}
        assert sorted(mounted) == [credentials_secret("dc"), credentials_secret("resi")]
        assert [(i["key"], i["path"]) for i in mounted[credentials_secret("dc")]["secret"]["items"]] == [
            ("proxies.txt", "list"), ("username", "username"), ("password", "password")]
        assert [(i["key"], i["path"]) for i in mounted[credentials_secret("resi")]["secret"]["items"]] == [
            ("username", "username"), ("password", "password")]
        (container,) = spec["containers"]
        assert {"name": var, "value": UPSTREAM_SECRETS_DIR} in container["env"]
        for name in ("dc", "resi"):
            assert {"name": mounted[credentials_secret(name)]["name"], "mountPath": f"{UPSTREAM_SECRETS_DIR}/{name}",
                    "readOnly": True} in container["volumeMounts"]
    for other, d in deployments.items():
        if other not in ("fleet-worker-dc", "fleet-worker-resi", "fleet-gateway", "fleet-prober"):
            assert not any(v.get("secret", {}).get("secretName", "").endswith("-credentials") for v in pod(d)["volumes"]), other


def test_without_upstream_providers_the_gateway_mounts_no_credentials(tmp_path):
    text = THREE  # a kvm provider's key is its worker's only
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    deployments = by_kind(render(load(str(path)), text), "Deployment")
    for dialer in ("fleet-gateway", "fleet-prober"):
        spec = pod(deployments[dialer])
        assert not any(v.get("secret", {}).get("secretName", "").endswith("-credentials") for v in spec["volumes"])
        assert not any(e["name"].endswith("UPSTREAM_SECRETS_DIR") for e in spec["containers"][0]["env"])
