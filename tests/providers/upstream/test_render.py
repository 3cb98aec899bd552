"""`fleet render` for an upstream provider: its credential files (and
listFile, which may carry `user:pass@`) are mounted read-only in its own
worker only, from the Secret `fleet-<name>-credentials` the operator makes;
the ConfigMap every process mounts holds only their paths."""

from __future__ import annotations

from fleet.cli.render import credentials_secret, render
from fleet.config import load
from tests.deploy.conftest import by_kind, pod

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
    for other, d in deployments.items():
        if other not in ("fleet-worker-dc", "fleet-worker-resi"):
            assert not any(v.get("secret", {}).get("secretName", "").endswith("-credentials") for v in pod(d)["volumes"]), other
