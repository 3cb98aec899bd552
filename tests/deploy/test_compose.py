"""docker-compose.yml checked without a container engine: valid against the Compose Specification's JSON schema
(tests/deploy/compose-spec.json), every fleet service's command a real `fleet` invocation, every variable a real
setting with a valid value, every mounted file there, every file a setting names mounted, and the proxies'
network namespace publishing the ports of its members. Running the same commands: tests/integration/
test_compose_stack.py.

compose-spec.json is the Compose Specification's schema, schema/compose-spec.json of
https://github.com/compose-spec/compose-spec at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6 (2026-06-23),
under the Apache License 2.0 (tests/deploy/compose-spec.LICENSE). Docker Compose validates with the same file.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from fleet.cli import subcommands as cli
from fleet.config import load as load_config
from fleet.gateway.clients import parse_clients
from fleet.settings import OPTIONS, Settings, SettingsError, parse_bind_address
from tests.deploy import compose as cf

SCHEMA = cf.ROOT / "tests/deploy/compose-spec.json"
# Variables of fleet services that are not fleet settings, each read by the command named.
NOT_SETTINGS = {"FLOWER_BASIC_AUTH": "fleet flower"}
# fleet-image services whose command is not `fleet`: the namespace holder.
OTHER_COMMANDS = {cf.NET: ["sleep", "infinity"]}
# Settings that name a file or directory the process reads.
PATH_SETTINGS = {o.env for o in OPTIONS if o.check == "path"} - {"FLEET_KUBECONFIG", "FLEET_KUBE_CONTEXT"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return cf.load()


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)  # its $schema: draft-07
    return jsonschema.Draft7Validator(schema)


def test_the_file_is_valid_compose(compose, validator):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


@pytest.mark.parametrize("break_it", [
    lambda c: c["services"]["gateway"].update(network="service:net"),  # a misspelt key
    lambda c: c["services"]["api"]["depends_on"]["tokens"].update(condition="service_done"),
    lambda c: c["services"]["redis"].update(command=42),
    lambda c: c.update(volume={}),
], ids=["unknown-key", "bad-condition", "bad-type", "unknown-top-level"])
def test_the_schema_bites(compose, validator, break_it):
    broken = copy.deepcopy(compose)
    break_it(broken)
    assert list(validator.iter_errors(broken))


def test_every_command_is_a_real_fleet_invocation(compose):
    config = load_config(str(cf.ROOT / "deploy/compose/providers.yaml"))
    for name, svc in cf.fleet_services(compose, profiles=True).items():
        argv = svc["command"]
        if name in OTHER_COMMANDS:
            assert argv == OTHER_COMMANDS[name]
            continue
        assert argv[0] == "fleet", name
        args = cli.parser().parse_args(argv[1:])  # SystemExit on an unknown command or flag
        if args.fn is cli.cmd_worker:
            assert config.get(args.provider).type == "local", name
            assert name == f"worker-{args.provider}"
        test = (svc.get("healthcheck") or {}).get("test") or []
        if test[1:2] == ["fleet"]:
            cli.parser().parse_args(test[2:])


def test_every_variable_is_a_setting_with_a_valid_value(compose):
    envs = {o.env for o in OPTIONS}
    for name, svc in cf.fleet_services(compose, profiles=True).items():
        env = cf.environment(svc, {})
        unknown = set(env) - envs - set(NOT_SETTINGS)
        assert not unknown, f"{name}: {sorted(unknown)} are no settings (fleet/settings.py)"
        try:
            Settings.from_sources({}, env).validate()
        except SettingsError as exc:
            pytest.fail(f"{name}: {exc}")


def test_mounted_files_exist_and_every_file_a_setting_names_is_mounted(compose):
    volumes = set(compose["volumes"])
    for name, svc in cf.fleet_services(compose, profiles=True).items():
        for source, _ in cf.mounts(svc):
            if source.startswith("./"):
                assert (cf.ROOT / source).is_file(), f"{name}: {source} is missing"
            else:
                assert source in volumes, f"{name}: volume {source} is not declared"
        for var, path in cf.environment(svc, {}).items():
            if var in PATH_SETTINGS and path:
                assert cf.source_of(svc, path), f"{name}: {var}={path} is not mounted"


def test_the_tokens_volume_is_written_once_and_read_by_the_gateway_and_the_api(compose):
    services = compose["services"]
    tokens = services["tokens"]
    assert tokens["restart"] == "no" and tokens["command"] == ["fleet", "token", "init"]
    made = cf.environment(tokens, {})
    for reader, var in (("gateway", "FLEET_GATEWAY_CLIENTS_FILE"), ("api", "FLEET_API_TOKEN_FILE")):
        svc = services[reader]
        path = cf.environment(svc, {})[var]
        assert path == made[var], reader
        assert cf.source_of(svc, path)[0] == cf.source_of(tokens, path)[0] == "tokens"
        assert any(t == "/etc/fleet/tokens" and v.endswith(":ro") for v in svc["volumes"] for t in [v.split(":")[1]])
        assert svc["depends_on"]["tokens"]["condition"] == "service_completed_successfully"


def test_the_made_clients_file_is_one_the_gateway_reads(tmp_path):
    from fleet.cli import tokens

    path = tmp_path / "clients.yaml"
    assert tokens.write_new(str(path), tokens.clients_text("crawler", tokens.new_token()))
    assert not tokens.write_new(str(path), "clients: {}\n"), "an existing file is left as it is"
    (client,) = parse_clients(path.read_bytes()).values()
    assert client.name == "crawler" and len(client.token) == 43
    assert path.stat().st_mode & 0o077 == 0
    assert [p.name for p in tmp_path.iterdir()] == ["clients.yaml"], "no temporary file left"


def test_the_proxies_namespace_publishes_its_members_ports_on_loopback(compose):
    services = compose["services"]
    members = {n for n, s in services.items() if s.get("network_mode") == f"service:{cf.NET}"}
    assert members == {"worker-local", "gateway", "prober"}
    published = set(services[cf.NET]["ports"])
    binds = {"gateway": "FLEET_GATEWAY_BIND_ADDRESS", "prober": "FLEET_PROBER_METRICS_BIND_ADDRESS"}
    for name, var in binds.items():
        _, port = parse_bind_address(cf.environment(services[name], {})[var], var)
        assert f"127.0.0.1:{port}:{port}" in published, name
        assert "ports" not in services[name], "a member's ports are the namespace's"
        assert services[name]["depends_on"][cf.NET]["condition"] == "service_started"
    assert services[cf.NET]["init"] is True and services["worker-local"]["init"] is True
    # the Squids listen on 127.0.0.1 of the namespace: only its members reach them
    (provider,) = load_config(str(cf.ROOT / "deploy/compose/providers.yaml")).providers
    assert provider.block.bindAddress == "127.0.0.1" and provider.block.sources() == ["127.0.0.0/8"]
    assert provider.block.stateDir.startswith("/tmp/"), "the only writable place of the container"


def test_the_proxies_lie_in_the_providers_port_range():
    import yaml

    (provider,) = load_config(str(cf.ROOT / "deploy/compose/providers.yaml")).providers
    lo, hi = provider.block.ports
    items = yaml.safe_load((cf.ROOT / "deploy/compose/proxies.yaml").read_text())["items"]
    assert len(items) == 2
    assert all(p["spec"]["provider"] == provider.name and lo <= p["spec"]["port"] <= hi for p in items)
