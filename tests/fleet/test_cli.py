"""The `fleet` CLI: exit codes, output shapes, and that bad input stops
everything before a process starts."""

import json

import pytest
import yaml

from fleet.cli import subcommands as cli
from fleet.cli import supervise

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
    bad.write_text(yaml.safe_dump({"providers": [{"name": "A_B", "type": "fake"}, {"name": "x", "type": "azure"}]}))
    code, _, err = run(capsys, "validate", "-c", str(bad))
    assert code == 2
    assert "2 problem(s)" in err
    assert "providers[0].name" in err and "'A_B'" in err and "providers[1].type" in err and "'azure'" in err


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


def test_exit_codes_are_documented():
    assert (cli.EXIT_OK, cli.EXIT_NOT_READY, cli.EXIT_BAD_INPUT, cli.EXIT_UNREACHABLE) == (0, 1, 2, 3)
    for code in ("0", "1", "2", "3"):
        assert f"- {code}:" in cli.__doc__


def test_get_with_redis_down_exits_3_without_the_password(capsys, config):
    code, _, err = run(capsys, "get", "ph", "-c", config, "--broker", "redis://:hunter2-pw@127.0.0.1:1/0")
    assert code == cli.EXIT_UNREACHABLE, err
    assert "cannot read results from Redis at redis://:***@127.0.0.1:1/0" in err
    assert "hunter2" not in err


def test_get_reads_redis(capsys, config, monkeypatch):
    import fakeredis

    from fleet.store import Store

    monkeypatch.setattr(Store, "from_url", classmethod(lambda cls, url: cls(fakeredis.FakeRedis())))
    code, out, _ = run(capsys, "get", "ph", "-c", config)
    assert code == 0 and out.splitlines()[1].startswith("ok ")
    assert run(capsys, "get", "ph", "zzz", "-c", config)[0] == cli.EXIT_NOT_READY


def test_get_judges_overdue_by_the_deployed_schedule(capsys, config, monkeypatch):
    """A 10 s deployment: a result 60 s old is overdue (2 x 10 s + 10 s), though
    this command's own default interval (1m) would call it fresh."""
    import time

    import fakeredis

    from fleet.celery import beat
    from fleet.health.results import CheckResult
    from fleet.health.stored import StoredResults
    from fleet.store import Store, keys

    r = fakeredis.FakeRedis()
    monkeypatch.setattr(Store, "from_url", classmethod(lambda cls, url, **_: cls(r)))
    now = time.time()
    StoredResults(Store(r)).save_if_newer(CheckResult("ok", "fake", True, now - 60, ()))
    code, out, err = run(capsys, "get", "ph", "-c", config)
    assert code == 0
    assert "AllTargetsReady" in out or "NoTargets" in out, out  # by the caller's 1m: fresh
    assert "no schedule published by beat" in err
    beat.publish_schedule(Store(r), beat.schedule_doc(10, 10, 30, "default", ["ok"], "beat-1", now))
    r.set(keys.BEAT_LAST_ROUND, repr(now - 1))
    _, out, err = run(capsys, "get", "ph", "-c", config)
    assert "CheckOverdue" in out and err == "", (out, err)
    assert "is a worker consuming queue provider.ok" in out  # beat sends rounds: the worker is the suspect


@pytest.mark.parametrize(
    ("runs", "delays"),
    [
        ([0.1] * 7, [1, 2, 4, 8, 16, 30, 30]),  # crash loop: doubling to 30s
        ([0.1, 0.1, 0.1, 61, 0.1], [1, 2, 4, 1, 2]),  # a run of 60s+ starts again from 1s
    ],
)
def test_restart_backoff(runs, delays):
    child = supervise.Child("worker:a", [], {})
    got, now = [], 1000.0
    for ran in runs:
        child.started = now
        now += ran
        got.append(supervise.next_restart(child, now))
    assert got == delays


class FakeProc:
    pids = iter(range(50000, 60000))

    def __init__(self, argv, env, **kw):
        self.argv, self.env, self.pid, self.returncode = argv, env, next(self.pids), None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.returncode = -15
        return self.returncode


def fake_up(monkeypatch, capsys, *argv, ticks=1, on_tick=None):
    """Run `fleet up` in-process with fake children for `ticks` loop turns."""
    procs: list[FakeProc] = []
    handlers = {}
    monkeypatch.setattr(supervise.subprocess, "Popen", lambda argv, env, **kw: procs.append(FakeProc(argv, env)) or procs[-1])
    monkeypatch.setattr(supervise.signal, "signal", lambda sig, fn: handlers.__setitem__(sig, fn))
    monkeypatch.setattr(supervise.os, "killpg", lambda pid, sig: None)
    clock = [0.0]
    monkeypatch.setattr(supervise.time, "monotonic", lambda: clock[0])
    turns = [0]

    def tick(_):
        turns[0] += 1
        clock[0] += 0.5
        if on_tick:
            on_tick(turns[0], procs)
        if turns[0] >= ticks:
            handlers[supervise.signal.SIGINT]()

    monkeypatch.setattr(supervise.time, "sleep", tick)
    code, _, err = run(capsys, "up", *argv)
    return code, err, procs


def test_up_binds_loopback_and_gives_flower_generated_credentials(monkeypatch, capsys, config):
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("FLOWER_AUTH", raising=False)
    code, err, procs = fake_up(monkeypatch, capsys, "-c", config)
    assert code == 0
    flower = next(p for p in procs if "flower" in p.argv)
    assert "--address=127.0.0.1" in flower.argv
    user, _, password = flower.env["FLOWER_BASIC_AUTH"].partition(":")
    assert user == "fleet" and len(password) >= 20
    assert err.count(password) == 1
    for p in procs:
        assert p.env["FLEET_METRICS_BIND_ADDRESS"] == "127.0.0.1:8080"
        if p is not flower:
            assert "FLOWER_BASIC_AUTH" not in p.env


def test_up_keeps_the_users_bind_address_and_flower_auth(monkeypatch, capsys, config):
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "ops:mine")
    monkeypatch.setenv("FLEET_METRICS_BIND_ADDRESS", ":9100")
    code, err, procs = fake_up(monkeypatch, capsys, "-c", config)
    assert code == 0 and "mine" not in err and "generated" not in err
    assert next(p for p in procs if "flower" in p.argv).env["FLOWER_BASIC_AUTH"] == "ops:mine"
    assert {p.env["FLEET_METRICS_BIND_ADDRESS"] for p in procs} == {":9100"}
    code, _, procs = fake_up(monkeypatch, capsys, "-c", config, "--no-flower", "--metrics-bind-address", "127.0.0.1:9")
    assert {p.env["FLEET_METRICS_BIND_ADDRESS"] for p in procs} == {"127.0.0.1:9"}


def test_up_restarts_what_exits_after_its_delay(monkeypatch, capsys, config):
    def on_tick(turn, procs):
        if turn == 2:
            procs[0].returncode = -9  # worker:ok

    code, err, procs = fake_up(monkeypatch, capsys, "-c", config, "--no-flower", ticks=8, on_tick=on_tick)
    assert code == 0
    assert "fleet up: worker:ok exited with -9; restarting in 1s" in err
    assert "stopping everything" not in err
    restarted = [p for p in procs if p.argv == procs[0].argv]
    assert len(restarted) == 2 and f"fleet up: restarted worker:ok (pid {restarted[1].pid})" in err
    assert len(procs) == 5  # 2 workers, controller, beat, and the one restart


def test_every_commands_help_renders():
    """argparse %-formats help text: a setting whose help holds a bare % (the
    heartbeat's "20%") broke `fleet get --help` once."""
    import argparse

    from fleet.cli import subcommands

    root = subcommands.parser()
    assert root.format_help()
    subs = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    assert subs
    for sub in subs:
        for name, p in sub.choices.items():
            assert p.format_help(), name
            for nested in (a for a in p._actions if isinstance(a, argparse._SubParsersAction)):
                for inner in nested.choices.values():
                    assert inner.format_help()


def test_a_local_provider_without_squid_refuses_to_start_its_worker_or_fleet_up(capsys, tmp_path, monkeypatch):
    """Where the worker runs, a local provider needs squid: `fleet worker` and `fleet up` say so and start nothing
    (a worker without it would only fail every create). `fleet render` and the controller run elsewhere: no check."""
    cfg = tmp_path / "providers.yaml"
    cfg.write_text(yaml.safe_dump({"providers": [
        {"name": "here", "type": "local", "local": {"squidPath": str(tmp_path / "no-squid")}},
        {"name": "ok", "type": "fake", "fake": {"targets": [{"name": "t"}]}}]}))
    started = []
    monkeypatch.setattr(cli.os, "execvpe", lambda *a: started.append(a))
    monkeypatch.setattr(supervise, "run", lambda *a: started.append(a))
    want = (f"provider here: the local provider runs Squid, and squidPath {tmp_path}/no-squid is not an executable "
            "file: install Debian's squid package (apt-get install squid; fleet's image has it) or set squidPath")
    for argv in (("worker", "-p", "here"), ("up", "--no-flower")):
        code, _, err = run(capsys, *argv, "-c", str(cfg))
        assert (code, err.strip()) == (2, f"fleet {argv[0]}: {want}")
    assert started == []
    assert run(capsys, "worker", "-p", "ok", "-c", str(cfg))[0] == 0  # another provider's worker is not its business
    assert run(capsys, "render", "-c", str(cfg))[0] == 0
