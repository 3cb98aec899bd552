"""`fleet gc`'s report (pure) and its refusals; the command end to end is in
tests/integration/test_gc.py."""

from __future__ import annotations

import json

import pytest
import yaml

from fleet.cli import gc
from fleet.cli import subcommands as cli
from fleet.gc.answers import ListAnswer
from fleet.gc.decide import Listed

NOW = 1_700_000_000.0


def test_the_report_and_its_table():
    listed = [("lab", ListAnswer(instances=(Listed("local/a", "u1", created_at=NOW - 3600, installation="prod"),
                                            Listed("local/b", "", created_at=None, installation="prod")), malformed=1)),
              ("broken", ListAnswer(failed="transient: Not a directory"))]
    report = gc.decide(listed, frozenset(), "prod", 600.0, NOW)
    assert report["providers"] == [
        {"provider": "lab", "skipped": None, "message": "", "listed": 2, "malformed": 1},
        {"provider": "broken", "skipped": "list-failed", "message": "transient: Not a directory", "listed": 0, "malformed": 0}]
    assert [(r["instance"], r["ageSeconds"], r["verdict"]) for r in report["instances"]] == [
        ("local/a", 3600.0, "delete"), ("local/b", None, "keep")]
    lines = gc.render(report, "table", "prod", 600.0, 0).splitlines()
    assert lines[0].split() == list(gc.HEAD)
    assert lines[1].split()[:5] == ["lab", "local/a", "u1", "1h", "delete"]
    assert lines[2].split()[:5] == ["lab", "local/b", "-", "unknown", "keep"]
    assert lines[3].split()[:5] == ["broken", "-", "-", "-", "skipped"]
    assert lines[-1] == ("dry run (installation prod, min age 10m, 0 live Proxies): 1 would be deleted, nothing was; "
                         "1 malformed entries left out")
    doc = json.loads(gc.render(report, "json", "prod", 600.0, 0))
    assert doc["installation"] == "prod" and doc["minAgeSeconds"] == 600.0 and len(doc["instances"]) == 2


@pytest.fixture
def config(tmp_path, monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": [{"name": "lab", "type": "fake"}]}))
    return str(path)


def test_a_dry_run_without_a_proxies_source_refuses(capsys, config):
    assert cli.main(["gc", "--dry-run", "-c", config]) == cli.EXIT_BAD_INPUT
    assert "no Proxies source" in capsys.readouterr().err


def test_an_unknown_provider_is_bad_input(capsys, config, tmp_path):
    assert cli.main(["gc", "--dry-run", "-c", config, "--proxies", str(tmp_path), "-p", "nope"]) == cli.EXIT_BAD_INPUT
