"""Fixtures of the deploy tests: deploy/ rendered like `kubectl kustomize`
(the default install and the opt-in deploy/monitoring), `fleet render` on a
config with one provider of each real type, and both together: what a
cluster holds after the install commands of docs/deploying.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.cli.render import render as render_workers
from fleet.config import load
from tests.deploy import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

THREE = """\
providers:
  - name: kvm-home
    type: kvm
    kvm:
      sshKeyFile: /etc/fleet/kvm-home/id_ed25519
      knownHostsFile: /etc/fleet/kvm-home/known_hosts
      hosts:
        - {name: nas1, address: "nas1.example.net:22", user: fleet}
  - name: gcp-eu
    type: gcp
    gcp:
      project: egress-proxies-eu
  - name: cluster
    type: kubernetes
    kubernetes: {}
"""


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


@pytest.fixture(scope="session")
def rendered() -> list[dict[str, Any]]:
    return kustomize.render(DEPLOY)


@pytest.fixture(scope="session")
def monitoring() -> list[dict[str, Any]]:
    return kustomize.render(DEPLOY / "monitoring")


@pytest.fixture(scope="session")
def three_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("render") / "providers.yaml"
    path.write_text(THREE)
    return path


@pytest.fixture(scope="session")
def workers(three_path: Path) -> list[dict[str, Any]]:
    return render_workers(load(str(three_path)), three_path.read_text())


@pytest.fixture(scope="session")
def installed(rendered, workers) -> list[dict[str, Any]]:
    """`kubectl apply -k deploy` and `fleet render -c THREE | kubectl apply -f -`."""
    return rendered + workers


def component(obj: dict[str, Any]) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def of_component(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [o for o in objects if component(o) == name]
