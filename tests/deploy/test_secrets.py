"""Issue 8, item 3 (secrets): a secret field of the providers file (kvm
`vendorData`, cloud-init that may hold passwords) never lands in the
ConfigMap every process mounts: `fleet render` moves it into a Secret that
only that provider's worker mounts, and points the ConfigMap's copy at the
mounted file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from fleet.cli.render import CONFIG_MAP, SECRETS_DIR, render, secrets_secret
from fleet.config import load, parse
from providers.kvm.config import KvmConfig
from tests.deploy.conftest import by_kind, pod
from tests.deploy.test_manifests import validate

SENTINEL = "vendor-sentinel-6f1c"
TEXT = f"""\
providers:
  # comment
  - name: kvm-home
    type: kvm
    kvm:
      sshKeyFile: /etc/fleet/kvm-home/id_ed25519
      knownHostsFile: /etc/fleet/kvm-home/known_hosts
      vendorData: |
        #cloud-config
        password: {SENTINEL}
      hosts:
        - {{name: nas1, address: "nas1.example.net:22", user: fleet}}
  - name: kvm-lab
    type: kvm
    kvm:
      sshKeyFile: /etc/fleet/kvm-lab/id_ed25519
      insecureIgnoreHostKey: true
      hosts:
        - {{name: lab, address: "lab.example.net:22", user: fleet}}
  - name: cluster
    type: kubernetes
    kubernetes: {{}}
"""


def rendered(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "providers.yaml"
    path.write_text(TEXT)
    return render(load(str(path)), TEXT)


def secret_names(d: dict[str, Any]) -> set[str]:
    return {v["secret"]["secretName"] for v in pod(d)["volumes"] if "secret" in v}


def test_the_sentinel_is_only_in_its_providers_secret(tmp_path):
    objs = rendered(tmp_path)
    validate(objs)
    holders = [o for o in objs if SENTINEL in json.dumps(o)]
    assert [(o["kind"], o["metadata"]["name"]) for o in holders] == [("Secret", secrets_secret("kvm-home"))]
    assert SENTINEL in holders[0]["stringData"]["vendorData"]
    copy = by_kind(objs, "ConfigMap")[CONFIG_MAP]["data"]["providers.yaml"]
    assert [line.strip() for line in copy.splitlines() if "vendorData" in line] == [f"vendorDataFile: {SECRETS_DIR}/vendorData"]


def test_only_that_providers_worker_mounts_it(tmp_path):
    objs = rendered(tmp_path)
    mounting = {n for n, d in by_kind(objs, "Deployment").items() if secrets_secret("kvm-home") in secret_names(d)}
    assert mounting == {"fleet-worker-kvm-home"}
    d = by_kind(objs, "Deployment")["fleet-worker-kvm-home"]
    (c,) = pod(d)["containers"]
    (vol,) = [v for v in pod(d)["volumes"] if v.get("secret", {}).get("secretName") == secrets_secret("kvm-home")]
    assert vol["secret"]["items"] == [{"key": "vendorData", "path": "vendorData"}]
    assert {"name": vol["name"], "mountPath": SECRETS_DIR, "readOnly": True} in c["volumeMounts"]
    for name in ("fleet-worker-kvm-lab", "fleet-worker-cluster", "fleet-controller", "fleet-beat"):
        assert not any(m["mountPath"] == SECRETS_DIR for m in pod(by_kind(objs, "Deployment")[name])["containers"][0]["volumeMounts"])


def test_the_config_maps_copy_points_at_the_mounted_file_and_loads(tmp_path):
    objs = rendered(tmp_path)
    copy = by_kind(objs, "ConfigMap")[CONFIG_MAP]["data"]["providers.yaml"]
    config = parse(yaml.safe_load(copy))
    home, lab = config.get("kvm-home").block, config.get("kvm-lab").block
    assert isinstance(home, KvmConfig) and home.vendorData == "" and home.vendorDataFile == f"{SECRETS_DIR}/vendorData"
    assert lab.vendorData == lab.vendorDataFile == ""
    # what the worker reads from the file is what the file said
    mounted = tmp_path / "vendorData"
    mounted.write_text(by_kind(objs, "Secret")[secrets_secret("kvm-home")]["stringData"]["vendorData"])
    assert home.model_copy(update={"vendorDataFile": str(mounted)}).vendor_data() == load(str(tmp_path / "providers.yaml")).get(
        "kvm-home"
    ).block.vendorData


def test_without_secrets_the_config_map_is_the_file_verbatim(tmp_path):
    text = "".join(line for line in TEXT.splitlines(keepends=True) if "vendorData" not in line and "cloud-config" not in line
                   and SENTINEL not in line)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    objs = render(load(str(path)), text)
    assert by_kind(objs, "ConfigMap")[CONFIG_MAP]["data"]["providers.yaml"] == text
    assert by_kind(objs, "Secret") == {}


def test_a_worker_without_the_mounted_file_fails_the_create_permanently_and_says_why(tmp_path):
    import pytest

    from providers import base
    from providers.base import CreateRequest, Deadline
    from providers.kvm.provider import new

    cfg = KvmConfig.model_validate({
        "sshKeyFile": "/etc/fleet/kvm-home/id_ed25519", "insecureIgnoreHostKey": True, "vendorDataFile": str(tmp_path / "missing"),
        "machineTypes": {"small": {"vcpus": 1, "memoryMiB": 512}}, "images": {"u": {"url": "https://example.net/u.qcow2"}},
        "hosts": [{"name": "nas1", "address": "127.0.0.1:1", "user": "fleet"}],
    })
    with pytest.raises(base.Permanent) as err:
        new("kvm-home", cfg).create(CreateRequest(name="p1", uid="u1"), Deadline.after(5))
    assert "vendorDataFile" in str(err.value) and "No such file" in str(err.value) and err.value.op == "create"
