"""`fleet validate --proxies PATH`: the controller's parser, its verdicts
listed, exit 2 on any. Every malformed manifest of
tests/fleet/proxies/test_manifests.py is run through it (in-process), and
the real CLI once as a subprocess on a directory holding all of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleet.cli import subcommands as cli
from fleet.proxies.manifests import load_manifests
from tests.fleet.proxies.test_manifests import BAD_VALUES, GOOD, MALFORMED_DOCUMENTS, SENTINEL, setting

PROVIDERS = {"providers": [{"name": "kvm", "type": "fake"}]}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def bad_files(directory: Path) -> list[Path]:
    """One file per malformed case, each followed by a good document (so the
    count of valid Proxies is checked as well)."""
    files = []
    for i, (obj, _) in enumerate(BAD_VALUES):
        path = directory / f"value-{i:03d}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False) + "---\n" + GOOD.format(name=f"ok-value-{i}"))
        files.append(path)
    for i, (text, _, _) in enumerate(MALFORMED_DOCUMENTS):
        path = directory / f"document-{i:03d}.yaml"
        path.write_text(text + "---\n" + GOOD.format(name=f"ok-document-{i}"))
        files.append(path)
    return files


def test_every_malformed_manifest_is_refused_with_the_controllers_verdict(capsys, tmp_path):
    for path in bad_files(tmp_path):
        proxies, errors = load_manifests(str(path))
        assert errors, f"{path.name}: the parser accepts it: the case proves nothing here"
        code, out, err = run(capsys, "validate", "--proxies", str(path))
        assert code == 2, (path.name, out, err)
        lines = err.rstrip("\n").split("\n")
        assert lines[0] == (f"fleet validate: {path}: {len(errors)} problem(s) in the Proxy manifests "
                            f"({len(proxies)} valid); the controller applies none of these:")
        assert lines[1:] == [str(e) for e in errors]
        assert all(line.startswith(f"{path}#") for line in lines[1:])  # file#document: field: why
        assert out == ""


def test_valid_manifests_are_counted(capsys, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("---\n".join(GOOD.format(name=n) for n in "abc"))
    assert run(capsys, "validate", "--proxies", str(path)) == (0, f"{path}: ok, 3 Proxy manifest(s), 0 ProxyPool manifest(s)\n", "")


def test_with_the_providers_file_both_are_checked_and_statuses_are_notes(capsys, tmp_path):
    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump(PROVIDERS))
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.format(name="a") + "---\n" + GOOD.format(name="b").replace("provider: kvm", "provider: gcp"))
    code, out, err = run(capsys, "validate", "-c", str(config), "--proxies", str(path))
    assert code == 0
    assert out == f"{config}: ok, 1 provider(s) (kvm; types fake)\n{path}: ok, 2 Proxy manifest(s), 0 ProxyPool manifest(s)\n"
    assert err == ("note: default/b: spec.provider 'gcp' is not in the providers file: the controller reports it "
                   "Failed (ProviderNotConfigured) until it is\n")

    config.write_text(yaml.safe_dump({"providers": [{"name": "A_B", "type": "fake"}]}))
    path.write_text(yaml.safe_dump(setting("spec.port", 99999)))
    code, _, err = run(capsys, "validate", "-c", str(config), "--proxies", str(path))
    assert code == 2
    assert "providers[0].name" in err  # the providers file's problems and the manifests' both listed
    assert f"{path}#1: spec.port: must be an integer from 1 to 65535, got 99999" in err


def test_nothing_to_validate_is_bad_input(capsys):
    code, _, err = run(capsys, "validate")
    assert code == 2 and "--providers-config (-c) or --proxies" in err
    assert "--gateway-clients-file, --gateway-rules-file" in err


RULES = """\
rules:
  - name: shop
    domains: ["*.shop.example"]
    actions: {cooldown: 30m, retries: 1}
  - domains: ["*"]
    actions: {cooldown: soon}
"""
TOKEN = "0123456789abcdef0123"


def test_the_gateway_rules_file_is_checked_as_the_gateway_reads_it(capsys, tmp_path, monkeypatch):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES.replace("soon", "45m"))
    assert run(capsys, "validate", "--gateway-rules-file", str(path)) == (0, f"{path}: ok, 2 rule(s)\n", "")
    path.write_text(RULES + "    sessions: {maxUses: 0}\n")
    code, out, err = run(capsys, "validate", "--gateway-rules-file", str(path))
    assert (code, out) == (2, "")
    assert err == (f"fleet validate: {path}: the rules file is not usable; the gateway refuses it:\n"
                   f"{path}:6: rules[1].actions.cooldown: must be a duration like 30s or 10m (got 'soon')\n"
                   f"{path}:7: rules[1].sessions.maxUses: must be a whole number from 1 to 1000000 (got 0)\n")
    code, _, err = run(capsys, "validate", "--gateway-rules-file", str(tmp_path / "missing.yaml"))
    assert code == 2 and f"cannot read --gateway-rules-file {tmp_path / 'missing.yaml'}: No such file" in err
    monkeypatch.setenv("FLEET_GATEWAY_RULES_FILE", str(path))  # as the gateway's environment names it
    assert run(capsys, "validate")[0] == 2


def test_the_gateway_clients_file_is_checked_too_its_tokens_never_shown(capsys, tmp_path):
    clients = tmp_path / "clients.yaml"
    clients.write_text(f"clients: {{acme: {{token: {TOKEN}}}, bob: {{token: {TOKEN}x}}}}\n")
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: []\n")
    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump(PROVIDERS))
    assert run(capsys, "validate", "-c", str(config), "--gateway-clients-file", str(clients),
               "--gateway-rules-file", str(rules)) == (
        0, f"{config}: ok, 1 provider(s) (kvm; types fake)\n{clients}: ok, 2 client(s)\n{rules}: ok, 0 rule(s)\n", "")
    clients.write_text(f"clients: {{acme: {{token: {TOKEN}, ports: [0]}}}}\n")
    code, out, err = run(capsys, "validate", "--gateway-clients-file", str(clients), "--gateway-rules-file", str(rules))
    assert (code, out) == (2, f"{rules}: ok, 0 rule(s)\n")
    assert err == (f"fleet validate: --gateway-clients-file {clients}: client acme: ports must be a list of port "
                   'numbers or "*"\n')
    assert TOKEN not in out + err


def test_the_real_cli_on_a_directory_of_every_bad_case_and_a_symlink_loop(tmp_path):
    directory = tmp_path / "proxies"
    directory.mkdir()
    bad_files(directory)
    os.symlink("loop-b.yaml", directory / "loop-a.yaml")
    os.symlink("loop-a.yaml", directory / "loop-b.yaml")
    (directory / "secret.yaml").write_text(yaml.safe_dump(setting("spec.cloudInit", {"inline": SENTINEL, "bad": 1})))
    proxies, errors = load_manifests(str(directory))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    got = subprocess.run([sys.executable, "-m", "fleet.cli", "validate", "--proxies", str(directory)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, got.stderr
    lines = got.stderr.rstrip("\n").split("\n")
    assert lines[1:] == [str(e) for e in errors]
    assert f"{directory}/loop-a.yaml: cannot read the file: Too many levels of symbolic links" in lines
    assert len({e.source for e in errors}) == len(BAD_VALUES) + len(MALFORMED_DOCUMENTS) + 3  # each bad file, once or more
    valid = len(proxies)
    assert valid == len(BAD_VALUES) + sum(goes_on for _, _, goes_on in MALFORMED_DOCUMENTS)
    assert f"({valid} valid)" in lines[0]
    assert SENTINEL not in got.stderr + got.stdout

    (directory / "value-000.yaml").unlink()  # the rest of it, valid or not, still counted the same way
    env["FLEET_PROXIES"] = str(directory)
    got = subprocess.run([sys.executable, "-m", "fleet.cli", "validate"], env=env, capture_output=True, text=True,
                         timeout=120)
    gone = sum(e.source.startswith(f"{directory}/value-000.yaml") for e in errors)
    assert got.returncode == 2 and len(got.stderr.rstrip("\n").split("\n")) - 1 == len(errors) - gone


POOL = """\
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {{name: web}}
spec: {{replicas: 2, providers: [{{provider: kvm, weight: {weight}}}], template: {{port: 3128}}}}
"""


def test_proxypools_beside_the_proxies_are_checked_too(capsys, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.format(name="a") + "---\n" + POOL.format(weight=1))
    assert run(capsys, "validate", "--proxies", str(path)) == (
        0, f"{path}: ok, 1 Proxy manifest(s), 1 ProxyPool manifest(s)\n", "")
    path.write_text(GOOD.format(name="a") + "---\n" + POOL.format(weight=0))
    code, _, err = run(capsys, "validate", "--proxies", str(path))
    assert code == 2 and f"{path}#2: spec.providers[0].weight: must be at least 1" in err


FIVE_PROBLEMS = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata:
  name: Bad_Name
spec:
  provider: kvm
  port: 99999
  placement:
    zone: 5
  colour: blue
extra: 1
---
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {name: fine}
spec: {provider: kvm}
"""


def test_a_manifest_with_five_problems_reports_five_in_the_files_order_with_their_lines(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(FIVE_PROBLEMS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    got = subprocess.run([sys.executable, "-m", "fleet.cli", "validate", "--proxies", str(path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2
    head, *lines = got.stderr.rstrip("\n").split("\n")
    assert "5 problem(s) in the Proxy manifests (1 valid)" in head
    assert [(line.split(": ")[1], line.rpartition(" (line ")[2]) for line in lines] == [
        ("metadata.name", "4)"), ("spec.port", "7)"), ("spec.placement.zone", "9)"), ("spec.colour", "10)"),
        ("extra", "11)"),
    ]
    assert all(line.startswith(f"{path}#1: ") for line in lines)
