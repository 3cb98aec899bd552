"""The gcp type is registered, builds without touching the network, and is
wired into the health-check pipeline: `fleet check` shows the project Ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import google.auth

from fleet.cli import main
from providers import registry
from providers.gcp.config import GcpConfig
from providers.gcp.provider import GcpProvider
from tests.providers.gcp.conftest import PROJECT


def test_registered():
    assert "gcp" in registry.TYPES
    assert registry.config_model("gcp") is GcpConfig


def test_building_touches_nothing(fake, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("ADC looked up at construction")

    monkeypatch.setattr(google.auth, "default", boom)
    p = registry.build("gcp-eu", "gcp", GcpConfig(project=PROJECT, apiEndpoint=fake.url))
    assert isinstance(p, GcpProvider)
    assert fake.requests == []


def providers_file(tmp_path, url: str) -> str:
    path = tmp_path / "providers.yaml"
    path.write_text(f"providers:\n- name: gcp-eu\n  type: gcp\n  gcp:\n    project: {PROJECT}\n    apiEndpoint: {url}\n")
    return str(path)


def test_fleet_check_shows_the_project_ready(fake, tmp_path):
    host = fake.url.removeprefix("http://")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "GCE_", "FLEET_"))}
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GCE_METADATA_HOST=host, GCE_METADATA_IP=host)

    out = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "check", "-c", providers_file(tmp_path, fake.url), "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["provider"], row["type"], row["ready"]) == ("gcp-eu", "gcp", "True")
    (target,) = row["targets"]
    assert (target["name"], target["ready"], target["reason"]) == (PROJECT, True, "Reachable")
    assert target["details"]["principal"] == fake.service_account
    assert [r.path for r in fake.api_requests()] == [f"/compute/v1/projects/{PROJECT}/aggregated/instances"]


def test_fleet_check_in_process_reports_forbidden(fake, adc, tmp_path, capsys):
    fake.script(
        "GET",
        "aggregated/instances",
        403,
        {
            "error": {
                "code": 403,
                "message": "Compute Engine API has not been used",
                "errors": [{"reason": "accessNotConfigured"}],
            }
        },
    )

    code = main(["check", "-c", providers_file(tmp_path, fake.url), "-o", "json"])

    (row,) = json.loads(capsys.readouterr().out)
    assert code != 0
    (target,) = row["targets"]
    assert (target["ready"], target["reason"]) == (False, "Forbidden")
    assert target["details"]["errorReason"] == "accessNotConfigured"
