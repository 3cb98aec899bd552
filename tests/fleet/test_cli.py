"""The `fleet` CLI: exit codes, output shapes, and that bad input stops
everything before a process starts."""

import json

import pytest
import yaml

from fleet import cli

PROVIDERS = {
    "providers": [
        {"name": "ok", "type": "fake", "fake": {"targets": [{"name": "a", "details": {"k": "v"}}]}},
        {"name": "bad", "type": "fake", "fake": {"targets": [{"name": "b", "ready": False, "message": "refused"}]}},
    ]
}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(PROVIDERS))
    return str(path)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_ok(capsys, config):
    code, out, _ = run(capsys, "validate", "-c", config)
    assert code == 0
    assert out.strip() == f"{config}: ok, 2 provider(s) (ok, bad; types fake)"


def test_validate_lists_every_problem(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"providers": [{"name": "A_B", "type": "fake"}, {"name": "x", "type": "aws"}]}))
    code, _, err = run(capsys, "validate", "-c", str(bad))
    assert code == 2
    assert "2 problem(s)" in err
    assert "providers[0].name" in err and "'A_B'" in err and "providers[1].type" in err and "'aws'" in err


def test_flags_can_come_from_the_environment(capsys, config, monkeypatch):
    monkeypatch.setenv("FLEET_PROVIDERS_CONFIG", config)
    assert run(capsys, "validate")[0] == 0


def test_flags_win_over_the_environment(capsys, config, monkeypatch):
    monkeypatch.setenv("FLEET_PROVIDER_CHECK_INTERVAL", "5s")
    assert run(capsys, "validate", "-c", config, "--provider-check-interval", "10s")[0] == 0
    code, _, err = run(capsys, "validate", "-c", config)
    assert code == 2 and "--provider-check-interval must be 0 (off) or at least 10s, got 5s" in err


def test_check_json_shape_and_exit_code(capsys, config):
    code, out, _ = run(capsys, "check", "-c", config, "-o", "json")
    assert code == 1  # one target is not ready
    rows = json.loads(out)
    assert [r["provider"] for r in rows] == ["ok", "bad"]
    ok = rows[0]
    assert set(ok) >= {"provider", "type", "supported", "checkedAt", "targets"}
    assert (ok["type"], ok["supported"], ok["ready"]) == ("fake", True, "True")
    (t,) = ok["targets"]
    assert set(t) == {"name", "address", "ready", "reason", "message", "latencyMillis", "details"}
    assert t["details"] == {"k": "v"}
    assert rows[1]["targets"][0]["message"] == "refused"


def test_check_one_provider_ready_exits_zero(capsys, config):
    code, out, _ = run(capsys, "check", "-c", config, "-p", "ok")
    assert code == 0
    assert "ok" in out and "bad" not in out
    assert "NAME" in out.splitlines()[0] and "ok/a (fake): ready Reachable" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("check", "-p", "nope"), "provider 'nope' is not configured"),
        (("check", "--timeout", "soon"), "--timeout: invalid duration 'soon'"),
        (("check", "--timeout", "0"), "--timeout must be positive"),
        (("worker", "-p", "nope"), "provider 'nope' is not configured"),
        (("controller", "--provider-check-timeout", "2m"), "--provider-check-timeout must be at most the interval (1m0s), got 2m0s"),
        (("beat", "--log-format", "xml"), "--log-format must be text or json"),
        (("get", "pods"), "unknown resource 'pods'"),
    ],
)
def test_bad_input_exits_2_before_anything_starts(capsys, config, monkeypatch, argv, message):
    started = []
    monkeypatch.setattr(cli.os, "execvpe", lambda *a: started.append(a))
    code, _, err = run(capsys, *argv, "-c", config)
    assert code == 2, err
    assert message in err
    assert started == []


def test_start_commands_exec_celery_with_the_queue(capsys, config, monkeypatch):
    started = []
    monkeypatch.setattr(cli.os, "execvpe", lambda prog, argv, env: started.append((argv, env)))
    assert run(capsys, "worker", "-p", "ok", "-c", config, "--provider-check-interval", "30s")[0] == 0
    (argv, env), = started
    assert argv[argv.index("-Q") + 1] == "provider.ok"
    assert argv[argv.index("-n") + 1] == "ok@%h"
    assert env["FLEET_PROVIDERS_CONFIG"] == config and env["FLEET_PROVIDER_CHECK_INTERVAL"] == "30s"


def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for sub in ("validate", "check", "get", "worker", "controller", "beat", "up"):
        assert sub in out
