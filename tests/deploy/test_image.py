"""The Dockerfile and docker-compose.yml, checked by parsing them (no Docker
engine runs here): one slim non-root image for every role, libvirt's client
library and nothing to build with at run time; compose runs the manifests'
commands, one worker per provider of the example config, with queues, image
and ports lining up."""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from fleet.cli import commands
from fleet.cli import subcommands as cli
from fleet.cli.render import CONFIG_PATH, TMP_SIZE, UID, render
from fleet.config import load
from tests.deploy.conftest import ROOT, by_kind, pod

EXAMPLE = ROOT / "deploy/compose/providers.yaml"  # compose's providers (docs/compose.md)
# compose's services that run no role of deploy/: the proxies' network namespace and the one-shot token maker
NOT_ROLES = {"net", "tokens"}
BUILD_ONLY = ("gcc", "g++", "make", "pkg-config", "libc6-dev", "build-essential")


# --- Dockerfile -------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def args_defaults(text: str) -> dict[str, str]:
    out = {}
    for word, rest in instructions(text):
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            out[k] = v
    return out


def base_of(stage: list[tuple[str, str]], defaults: dict[str, str]) -> str:
    ref = stage[0][1].split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], ref)


def apt_installed(stage: list[tuple[str, str]]) -> set[str]:
    pkgs: set[str] = set()
    for word, rest in stage:
        if word != "RUN":
            continue
        for cmd in re.split(r"&&|;", rest):
            tokens = shlex.split(cmd)
            if tokens[:2] == ["apt-get", "install"]:
                pkgs |= {t for t in tokens[2:] if not t.startswith("-")}
    return pkgs


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for word, rest in stage:
        if word == "ENV":
            for tok in shlex.split(rest):
                k, _, v = tok.partition("=")
                env[k] = v
    return env


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_final_stage_is_slim_and_has_no_build_tools(dockerfile):
    defaults = args_defaults(dockerfile)
    build, final = stages(dockerfile)
    assert base_of(final, defaults) == base_of(build, defaults) == "python:3.11-slim-bookworm"  # the venv's python is the same
    assert apt_installed(final) == {"libvirt0", "squid"}  # squid: the local provider's proxy
    assert {"libvirt-dev", "pkg-config", "gcc"} <= apt_installed(build)
    text = " ".join(rest for _, rest in final)
    assert not any(re.search(rf"\b{re.escape(tool)}\b", text) for tool in BUILD_ONLY)
    assert not any(p.endswith("-dev") for p in apt_installed(final))
    assert ("COPY", "--from=build /opt/fleet /opt/fleet") in final


def test_the_image_installs_every_runtime_extra_and_package(dockerfile):
    build, _ = stages(dockerfile)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (install,) = [rest for word, rest in build if word == "RUN" and "pip install" in rest]
    assert "-c constraints.txt" in install, "the image installs the versions the tests ran with"
    extras = set(re.search(r"\.\[([\w,]+)\]", install).group(1).split(","))
    assert extras == {"kvm", "gcp", "aws", "hetzner", "flower", "api"} and extras <= set(project["project"]["optional-dependencies"])
    copied = {src for word, rest in build if word == "COPY" for src in rest.split()[:-1]}
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", "README.md", "constraints.txt"} <= copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not set(ignored) & (packages | {"pyproject.toml", "README.md"})


def test_non_root_and_read_only_friendly(dockerfile):
    _, final = stages(dockerfile)
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] == str(UID) and users[-1].split(":")[0] != "0"
    assert f"--uid {UID}" in " ".join(rest for word, rest in final if word == "RUN")
    env = env_of(final)
    assert env["PATH"].startswith("/opt/fleet/bin:")
    assert env["HOME"] == "/tmp" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["FLEET_PROVIDERS_CONFIG"] == CONFIG_PATH
    workdir = [rest for word, rest in final if word == "WORKDIR"][-1]
    assert not workdir.startswith("/tmp"), "python -m puts the working directory on sys.path: keep it read-only"


def test_the_role_is_the_command(dockerfile, installed):
    _, final = stages(dockerfile)
    assert not [w for w, _ in final if w == "ENTRYPOINT"], "manifests and compose give the whole command"
    (cmd,) = [rest for word, rest in final if word == "CMD"]
    assert yaml.safe_load(cmd)[0] == "fleet"
    exposed = {int(p) for word, rest in final if word == "EXPOSE" for p in rest.split()}
    ports = {p["containerPort"] for d in by_kind(installed, "Deployment").values() for c in pod(d)["containers"]
             if c["image"].startswith("ghcr.io/example/fleet") for p in c.get("ports", ())}
    assert ports == exposed == {8080, 5555, 9090, 8081, 8090, 8888, 8083}


# --- docker-compose.yml -------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def fleet_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose["services"].items() if s.get("image") == "fleet:dev"}


def test_one_worker_per_example_provider_and_nothing_else(compose):
    names = load(str(EXAMPLE)).names()
    assert set(compose["services"]) == ({"redis", "controller", "beat", "flower", "prober", "api", "gateway"} | NOT_ROLES
                                        | {f"worker-{n}" for n in names})
    for n in names:
        argv = compose["services"][f"worker-{n}"]["command"]
        args = cli.parser().parse_args(argv[1:])
        assert args.fn is cli.cmd_worker and args.provider == n
        celery = commands.worker_argv(args.provider, args.concurrency)
        assert celery[celery.index("-Q") + 1] == f"provider.{n}"


def test_compose_runs_the_manifests_commands(compose, rendered):
    manifests = {}
    for d in by_kind(rendered + render(load(str(EXAMPLE)), EXAMPLE.read_text()), "Deployment").values():
        labels = d["metadata"]["labels"]
        role = labels["app.kubernetes.io/component"]
        if role == "worker":
            role = f"worker-{labels['fleet.crawl.example.com/provider']}"
        manifests[role] = pod(d)["containers"][0]["command"]
    for name, svc in fleet_services(compose).items():
        if name in NOT_ROLES:
            continue
        assert svc["command"] == manifests[name], name
        assert svc["command"][0] == "fleet"
        cli.parser().parse_args(svc["command"][1:])  # a real invocation, or SystemExit


def test_compose_services_share_image_envelope_config_and_broker(compose):
    services = fleet_services(compose)
    assert set(services) == set(compose["services"]) - {"redis"}
    redis = compose["services"]["redis"]
    for name, svc in services.items():
        assert svc["build"] == "." and svc["read_only"] is True, name
        assert int(svc["user"].split(":")[0]) == UID, name
        assert svc["tmpfs"] == [f"/tmp:size={TMP_SIZE.replace('Mi', 'm')},mode=1777"], name
        assert svc["cap_drop"] == ["ALL"], name
        env = svc["environment"]
        assert env["FLEET_PROVIDERS_CONFIG"] == CONFIG_PATH
        assert f"./{EXAMPLE.relative_to(ROOT)}:{CONFIG_PATH}:ro" in svc["volumes"]
        broker = urlsplit(env["FLEET_BROKER_URL"])
        assert (broker.hostname, broker.port) == ("redis", 6379)
        if name in NOT_ROLES:  # neither uses Redis, nor has anything to check
            assert svc["depends_on"] == {} and svc["healthcheck"] == {"disable": True}, name
            continue
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
        test = svc["healthcheck"]["test"]
        if test[1] == "fleet":
            assert cli.parser().parse_args(test[2:]).fn is cli.cmd_probe
    assert redis["read_only"] is True and redis["user"] != "0"
    assert redis["command"][0] == "redis-server"


def test_ports_line_up(compose):
    ctl, flower = compose["services"]["controller"], compose["services"]["flower"]
    bind = ctl["environment"]["FLEET_METRICS_BIND_ADDRESS"]
    assert ctl["ports"] == [f"127.0.0.1:{bind.rsplit(':', 1)[1]}:{bind.rsplit(':', 1)[1]}"]
    args = cli.parser().parse_args(flower["command"][1:])
    assert flower["ports"] == [f"127.0.0.1:{args.port}:{args.port}"]
    assert "redis" not in {p for s in compose["services"].values() for p in s.get("ports", ())}
    assert all(p.startswith("127.0.0.1:") for s in compose["services"].values() for p in s.get("ports", ()))


def test_compose_flower_auth_comes_from_the_environment_not_the_file(compose):
    env = compose["services"]["flower"]["environment"]
    assert env["FLOWER_BASIC_AUTH"] == "${FLOWER_BASIC_AUTH:-}"  # and `fleet flower` refuses to start without it


def test_controller_keeps_the_memory_envelope(compose):
    assert compose["services"]["controller"]["mem_limit"] == "128m"
