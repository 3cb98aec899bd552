"""One trace per round: beat's round span → publish → the provider worker's
run and `provider.check` spans → the callback's publish → the controller's
run and `fleet.record` spans, across the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration


def test_spans_nest_across_the_celery_hops(redis_server, tmp_path):
    cfg = tmp_path / "providers.yaml"
    cfg.write_text(yaml.safe_dump({"providers": [
        {"name": "edge-a", "type": "fake", "fake": {"targets": [{"name": "t1"}], "latencyMs": 5}},
        {"name": "edge-b", "type": "fake", "fake": {"targets": [{"name": "t2", "ready": False}]}},
    ]}))
    env = {**os.environ, "FLEET_PROVIDERS_CONFIG": str(cfg), "FLEET_BROKER_URL": redis_server.url,
           "FLEET_METRICS_BIND_ADDRESS": "0", "FLEET_LOG_LEVEL": "warning", "FLEET_PROVIDER_CHECK_INTERVAL": "10s"}
    env.pop("FLEET_KUBECONFIG", None)
    probe = Path(__file__).with_name("tracing_probe.py")
    out = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    spans = json.loads(out.stdout)
    by_id = {s["id"]: s for s in spans}

    def chain(span):
        names = []
        while span:
            names.append(span["name"])
            span = by_id.get(span["parent"])
        return list(reversed(names))

    (round_span,) = [s for s in spans if s["name"] == "fleet.round"]
    assert round_span["parent"] is None and round_span["attributes"]["fleet.providers"] == 2
    records = [s for s in spans if s["name"] == "fleet.record"]
    assert sorted(r["attributes"]["provider.name"] for r in records) == ["edge-a", "edge-b"]
    for rec in records:
        assert rec["trace"] == round_span["trace"], "one trace per round"
        path = chain(rec)
        assert path[0] == "fleet.round"
        assert "run/fleet.check_provider" in path and "run/fleet.record_check" in path
        assert path.index("apply_async/fleet.check_provider") < path.index("run/fleet.check_provider") \
            < path.index("apply_async/fleet.record_check") < path.index("run/fleet.record_check") < path.index("fleet.record")
    checks = {s["attributes"]["provider.name"]: s for s in spans if s["name"] == "provider.check"}
    assert set(checks) == {"edge-a", "edge-b"}
    assert checks["edge-b"]["attributes"]["provider.targets_not_ready"] == 1
    assert chain(checks["edge-a"])[-2] == "run/fleet.check_provider"
