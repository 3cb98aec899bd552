"""README.md: short (at most 200 lines, no line a paragraph long), its links lead somewhere, and every
command line in it runs. Its ```sh blocks run, in order, in one bash in a temporary directory, with `fleet`, `pip`,
`sudo`, `apt-get`, `curl`, `kubectl` and `make` as recording stand-ins on the PATH: the files its
heredocs write are real, so `fleet validate` checks them for real; a command that would start servers
or needs Redis is parsed by the real `fleet` parser and its `--help` runs; the rest is held to what it
names (an extra in pyproject.toml, a package in ci/apt-packages.txt, a kustomization, a Makefile
target, the gateway's address)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
# Pages other branches are writing (the crawler's guide, the Kubernetes install): README points at them
# already. Once they are in docs/, this set empties.
# `fleet` commands that read files only: run for real. The others start servers or read Redis.
OFFLINE = {"validate", "version", "render", "check"}

SHIM = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(os.environ["README_RECORD"], "a") as f:
    f.write(json.dumps([name, *sys.argv[1:]]) + "\\n")
if name == "fleet":
    import subprocess
    offline = {offline!r}
    args = sys.argv[1:]
    run = args if args and args[0] in offline else args[:1] + ["--help"]
    sys.exit(subprocess.run([sys.executable, "-m", "fleet.cli", *run], stdout=subprocess.DEVNULL).returncode)
if name == "sudo":
    os.execvp(sys.argv[1], sys.argv[1:])
"""


def test_readme_is_at_most_200_lines_none_a_paragraph_long():
    lines = TEXT.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail into a docs page"
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_readme_links_lead_to_files():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", TEXT)
    local = [link for link in links if not re.match(r"\w+://", link)]
    assert local, "README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []
    assert "docs/reference/commands.md" in local, "README points at the generated commands page"


def _blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", TEXT, re.M | re.S)


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> list[tuple[int, list[str], Path]]:
    """The sh blocks run in one bash, in order, in one directory: (0, argv, directory) of every command the
    stand-ins saw."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name in ("fleet", "pip", "sudo", "apt-get", "curl", "kubectl", "make"):
        path = bin_dir / name
        path.write_text(SHIM.format(python=sys.executable, offline=OFFLINE))
        path.chmod(0o755)
    work = tmp_path_factory.mktemp("readme")
    record = work / "record.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "README_RECORD": str(record),
           "PYTHONPATH": str(ROOT), "HOME": str(work)}
    env = {k: v for k, v in env.items() if not k.startswith("FLEET_")}
    script = "\n".join(_blocks())  # one shell, as a reader runs them: the crawler's block uses the first's $TOKEN
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    return [(0, json.loads(line), work) for line in record.read_text().splitlines()]


def _commands(ran, name: str) -> list[list[str]]:
    return [argv[1:] for _, argv, _ in ran if argv[0] == name]


def test_every_command_line_of_readme_ran(ran):
    """Each command line of each sh block reached a stand-in (none is left untested), in order."""
    expected = []
    for block in _blocks():
        for line in re.sub(r"<<'EOF'\n.*?^EOF$", "<<'EOF'", block, flags=re.M | re.S).splitlines():
            words = shlex.split(line, comments=True)
            if words and "=" not in words[0]:
                expected += words[:2] if words[0] == "sudo" else words[:1]  # sudo's stand-in runs the next one
    assert [argv[0] for _, argv, _ in ran] == [w for w in expected if w not in ("cat", "printf")]


def test_the_fleet_lines_parse_and_the_offline_ones_pass(ran):
    from fleet.cli.subcommands import parser

    fleet = _commands(ran, "fleet")
    assert {argv[0] for argv in fleet} >= {"validate", "up", "get"}
    for argv in fleet:
        parser().parse_args(argv)  # argparse exits 2 on a flag or choice the command does not take
    # the validate line ran for real on the files the heredocs wrote (the shim exits with fleet's code)


def test_the_quick_start_files_are_what_fleet_reads(ran):
    import yaml

    from fleet.config import load
    from fleet.gateway.clients import parse_clients
    from fleet.proxies.manifests import parse_proxy

    work = ran[0][2]
    config = load(str(work / "providers.yaml"))
    assert [p.type for p in config.providers] == ["local"]
    proxy = parse_proxy(yaml.safe_load((work / "proxies.yaml").read_text()))
    assert proxy.spec.provider == config.providers[0].name
    assert list(parse_clients((work / "clients.yaml").read_text())) == ["acme"]


def test_pip_apt_and_make_lines_name_what_exists(ran):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for argv in _commands(ran, "pip"):
        assert argv[0] == "install"
        m = re.fullmatch(r"([\w.-]+)\[([\w,]+)\]", argv[-1])
        assert m, argv
        assert m.group(1) == project["name"]
        assert set(m.group(2).split(",")) <= set(project["optional-dependencies"])
    apt = set((ROOT / "ci/apt-packages.txt").read_text().split())
    for argv in _commands(ran, "apt-get"):
        assert argv[0] == "install" and {a for a in argv[1:] if not a.startswith("-")} <= apt, argv
    makefile = (ROOT / "Makefile").read_text()
    for argv in _commands(ran, "make"):
        assert re.search(rf"^{re.escape(argv[0])}:", makefile, re.M), argv


def test_the_kubectl_lines_apply_a_kustomization(ran):
    kubectl = _commands(ran, "kubectl")
    assert ["apply", "-k"] in [argv[:2] for argv in kubectl]
    for argv in kubectl:
        if argv[:2] == ["apply", "-k"]:
            path = ROOT / argv[2]
            if not path.exists():
                pytest.skip(f"{argv[2]} comes with the Kubernetes install's branch")
            from tests.deploy import kustomize

            assert kustomize.render(path)


def test_the_curl_lines_go_through_the_gateway_as_a_client_of_the_file(ran):
    from fleet.gateway.clients import parse_clients
    from fleet.settings import Settings, parse_bind_address

    port = parse_bind_address(Settings().gateway_bind_address, "--gateway-bind-address")[1]
    clients = parse_clients((ran[0][2] / "clients.yaml").read_text())
    curls = _commands(ran, "curl")
    assert curls
    for argv in curls:
        proxy = urlsplit(argv[argv.index("-x") + 1])
        assert proxy.hostname == "127.0.0.1" and proxy.port == port
        assert proxy.username.split("-")[0] in clients and proxy.password.encode() == clients["acme"].token
