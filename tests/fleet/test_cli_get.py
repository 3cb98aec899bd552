"""`fleet get` with kubectl's habits, in-process on fakeredis: -A, -o wide
and -o name for every resource, --watch's change detection (a fake reader
and clock), `fleet describe`, `fleet version`, and a closed pipe."""

from __future__ import annotations

import json
import time

import fakeredis
import pytest

from fleet.cli import listing
from fleet.cli import subcommands as cli
from fleet.cli.common import Unreachable
from fleet.proxies.model import Condition, Proxy, ProxySpec, ProxyStatus
from fleet.proxies.standalone import encode
from fleet.store import Store, keys
from providers.base import Placement

CREATED = "2024-05-01T12:00:00Z"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)


@pytest.fixture
def redis(monkeypatch):
    r = fakeredis.FakeRedis()
    monkeypatch.setattr(Store, "from_url", classmethod(lambda cls, url, **_: cls(r)))
    return r


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def proxy(name, namespace="crawl", **kw):
    status = kw.pop("status", ProxyStatus(phase="Running", provider_id="local://a", ip="127.0.0.1", port=31280,
                                          egress_ip="203.0.113.9", member=kw.pop("member", "own"),
                                          conditions=(Condition("Ready", "True", "Running", "", 1, CREATED),)))
    spec = kw.pop("spec", ProxySpec(provider="squid", placement=Placement(region="fsn1")))
    return Proxy(namespace=namespace, name=name, uid=f"u-{name}", generation=1, spec=spec, status=status,
                 created_at=CREATED, **kw)


def put(r, *proxies):
    r.hset(keys.PX_OBJECTS, mapping={p.key: encode(p) for p in proxies})


# --- -A ------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (("get", "px", "-A", "-n", "crawl"), "-A/--all-namespaces and -n/--namespace cannot be given together"),
    (("get", "pools", "-n", "crawl", "--all-namespaces"), "-A/--all-namespaces and -n/--namespace cannot be given"),
    (("get", "px", "a", "-A"), "a NAME cannot be looked up across all namespaces (-A)"),
    (("get", "sessions", "-A", "-n", "acme"), "cannot be given together"),
])
def test_all_namespaces_is_refused_with_a_namespace_or_a_name(capsys, redis, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("fleet get: ") and message in err, err


def test_all_namespaces_lists_every_namespace_as_no_namespace_does(capsys, redis):
    put(redis, proxy("a"), proxy("b", namespace="web"))
    code, out, _ = run(capsys, "get", "px", "-A")
    assert code == 0 and out == run(capsys, "get", "px")[1]
    assert out.splitlines()[0].split()[0] == "NAMESPACE" and len(out.splitlines()) == 3


# --- -o wide, -o name -----------------------------------------------------------------


def test_get_px_wide_and_name(capsys, redis):
    put(redis, proxy("a", pool="web"), proxy("b", namespace="web", member="upstream/socks5"),
        proxy("c", namespace="web", status=ProxyStatus(phase="Pending")))
    code, out, _ = run(capsys, "get", "px", "-o", "wide")
    assert code == 0
    head, a, b, c = (line.split() for line in out.splitlines())
    assert head == ["NAMESPACE", "NAME", "PROVIDER", "PHASE", "IP", "PORT", "READY", "AGE", "MEMBER", "REGION", "ZONE",
                    "POOL", "EGRESS", "IP", "INSTANCE"]
    assert a[:7] == ["crawl", "a", "squid", "Running", "127.0.0.1", "31280", "True"]
    assert a[8:] == ["own", "fsn1", "<none>", "web", "203.0.113.9", "local://a"]
    assert b[:2] == ["web", "b"] and b[8] == "upstream/socks5" and b[11] == "<none>"
    assert c[:3] == ["web", "c", "squid"] and c[-6] == "<none>"  # not Running yet: no member written
    assert "MEMBER" not in run(capsys, "get", "px")[1]  # a wide column, as the CRD's priority 1
    assert run(capsys, "get", "px", "-o", "name")[1].splitlines() == [
        "proxy.crawl.example.com/crawl/a", "proxy.crawl.example.com/web/b", "proxy.crawl.example.com/web/c"]
    assert run(capsys, "get", "px", "-n", "crawl", "-o", "name")[1] == "proxy.crawl.example.com/a\n"
    assert run(capsys, "get", "px", "a", "-n", "crawl", "-o", "wide")[1].splitlines()[0].split()[0] == "NAME"


def test_get_px_name_and_wide_when_nothing_is_there_say_so_on_stderr(capsys, redis):
    for output in ("name", "wide"):
        code, out, err = run(capsys, "get", "px", "-o", output)
        assert (code, out) == (0, "") and "No Proxies in Redis" in err
    code, _, err = run(capsys, "get", "px", "zz", "-o", "name")
    assert code == 1 and "proxy 'zz' not found" in err


def test_get_ph_wide_and_name(capsys, redis, tmp_path):
    import yaml

    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump({"providers": [{"name": "ok", "type": "fake"}, {"name": "bad", "type": "fake"}]}))
    redis.set(keys.worker("ok", "ok@host-1"), "1")
    redis.set(keys.worker("ok", "ok@host-2"), "1")
    code, out, _ = run(capsys, "get", "ph", "-c", str(config), "-o", "wide")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "READY", "TARGETS", "LAST", "CHECK", "REASON", "WORKERS", "MESSAGE"]
    ok = next(line for line in lines if line.startswith("ok "))
    bad = next(line for line in lines if line.startswith("bad "))
    assert ok.split()[6] == "2" and bad.split()[6] == "0"
    assert run(capsys, "get", "ph", "-c", str(config), "-o", "name")[1].splitlines() == [
        "providerhealth.crawl.example.com/ok", "providerhealth.crawl.example.com/bad"]
    # ph has no namespace: -A with a NAME is fine there, as kubectl takes -A on a cluster-scoped kind
    assert run(capsys, "get", "ph", "ok", "-A", "-c", str(config), "-o", "name")[1] == "providerhealth.crawl.example.com/ok\n"


def test_get_sessions_wide_and_name(capsys, redis):
    now = time.time()
    redis.zadd(keys.LEASE_SESSIONS, {"gw/acme/s1": now + 90, "gw/other/s2": now + 60})  # soonest to lapse last
    redis.set(keys.LEASE_STICKY + "gw/acme/s1", "crawl/a")
    redis.hset(keys.LEASE_LIFE + "gw/acme/s1", mapping={"born": now - 5, "uses": 3, "score": 0})
    redis.hset(keys.PX_ENDPOINTS, "crawl/a", json.dumps({"uid": "u-a", "ip": "127.0.0.1", "port": 31280}))
    redis.hset(keys.PROBE_VERDICTS, "crawl/a", json.dumps({"uid": "u-a", "healthy": True, "egressIP": "203.0.113.9"}))
    code, out, _ = run(capsys, "get", "sessions", "-o", "wide")
    assert code == 0
    rows = {line.split()[1]: line.split() for line in out.splitlines()[1:]}
    assert out.splitlines()[0].split()[-3:] == ["ENDPOINT", "EGRESS", "IP"]
    assert rows["s1"][-2:] == ["127.0.0.1:31280", "203.0.113.9"]
    assert rows["s2"][2] == "<moving>" and rows["s2"][-2:] == ["<none>", "<none>"]
    assert run(capsys, "get", "sessions", "-o", "name")[1].splitlines() == ["session/acme/s1", "session/other/s2"]
    assert run(capsys, "get", "sessions", "-n", "acme", "-o", "name")[1] == "session/s1\n"


def test_get_pools_wide_and_name_standalone(capsys, redis, tmp_path):
    manifests = tmp_path / "pools.yaml"
    manifests.write_text("""\
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {name: web, namespace: crawl}
spec:
  replicas: 3
  providers: [{provider: squid, weight: 2}, {provider: edge}]
  autoscale: {min: 1, max: 6}
  template: {port: 3128}
""")
    code, out, err = run(capsys, "get", "pools", "--proxies", str(manifests), "-o", "wide")
    assert code == 0, err
    head, row = (line.split() for line in out.splitlines())
    assert head == ["NAMESPACE", "NAME", "DESIRED", "READY", "AVAILABLE", "AGE", "UP-TO-DATE", "UNHEALTHY", "PROVIDERS",
                    "AUTOSCALE"]
    assert row[:3] == ["crawl", "web", "3"] and row[-2:] == ["squid:2,edge:1", "1-6"]
    assert run(capsys, "get", "pools", "--proxies", str(manifests), "-o", "name")[1] == \
        "proxypool.crawl.example.com/crawl/web\n"
    assert run(capsys, "get", "pools", "web", "-n", "crawl", "--proxies", str(manifests), "-o", "name")[1] == \
        "proxypool.crawl.example.com/web\n"


# --- --watch: the loop on a fake reader and clock --------------------------------------


def px_listing(rows: dict[str, tuple[str, str]], note: str = "") -> listing.Listing:
    """A listing of NAME PHASE AGE rows (AGE moves by itself)."""
    items = [listing.Item(k, (k, phase, age), f"proxy.crawl.example.com/{k}", {"name": k, "phase": phase})
             for k, (phase, age) in rows.items()]
    return listing.Listing(("NAME", "PHASE", "AGE"), items, "No Proxies", lambda fmt: "doc", note=note, volatile=(2,))


class Feed:
    """The reads a watch gets, in order (an exception is raised), and what it printed."""

    def __init__(self, *reads):
        self.reads, self.out, self.err, self.slept = list(reads), [], [], []

    def read(self):
        got = self.reads.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got

    def watch(self, fmt="table"):
        first = self.read()
        listing.watch(self.read, first, fmt, out=self.out.append, err=self.err.append, sleep=self.slept.append,
                      retry=(Unreachable,), reads=len(self.reads))
        return self


def test_watch_prints_the_table_then_only_what_changed_but_the_age():
    feed = Feed(
        px_listing({"a": ("Running", "5s"), "bb": ("Pending", "1s")}),
        px_listing({"a": ("Running", "7s"), "bb": ("Pending", "3s")}),  # only the ages moved: nothing printed
        px_listing({"a": ("Running", "9s"), "bb": ("Running", "5s")}),  # bb changed
        px_listing({"a": ("Running", "11s"), "bb": ("Running", "7s"), "c": ("Pending", "0s")}),  # c is new
        px_listing({"a": ("Running", "13s"), "c": ("Pending", "2s")}),  # bb is gone: its last row once more
    ).watch()
    assert feed.out == [
        "NAME   PHASE     AGE\na      Running   5s\nbb     Pending   1s",
        "bb     Running   5s",  # padded to the header's widths
        "c      Pending   0s",
        "bb     Running   7s",
    ]
    assert feed.slept == [listing.WATCH_INTERVAL] * 4 and feed.err == []


def test_watch_of_nothing_says_so_then_prints_the_header_with_the_first_object():
    feed = Feed(px_listing({}), px_listing({}), px_listing({"a": ("Running", "1s")})).watch()
    assert feed.err == ["No Proxies"]
    assert feed.out == ["NAME   PHASE     AGE\na      Running   1s"]


def test_watch_says_a_failing_read_once_and_goes_on():
    down = Unreachable("cannot read Proxies from Redis at redis://127.0.0.1:1/0: Connection refused")
    feed = Feed(px_listing({"a": ("Running", "1s")}), down, down, down,
                px_listing({"a": ("Failed", "9s")}), px_listing({"a": ("Failed", "11s")})).watch()
    assert feed.err == [f"fleet get: {down} (trying again every 2s)", "fleet get: reading again"]
    assert feed.out == ["NAME   PHASE     AGE\na      Running   1s", "a      Failed    9s"]


def test_watch_names_and_objects():
    reads = [px_listing({"a": ("Running", "1s"), "b": ("Running", "1s")}), px_listing({"a": ("Failed", "3s"), "b": ("Running", "3s")})]
    assert Feed(*reads).watch("name").out == [
        "proxy.crawl.example.com/a\nproxy.crawl.example.com/b", "proxy.crawl.example.com/a"]
    feed = Feed(*reads).watch("json")
    first, end = json.JSONDecoder().raw_decode(feed.out[0])  # one document per object
    assert first == {"name": "a", "phase": "Running"} and json.loads(feed.out[0][end:]) == {"name": "b", "phase": "Running"}
    assert json.loads(feed.out[1]) == {"name": "a", "phase": "Failed"}
    yaml_out = Feed(*reads).watch("yaml").out
    assert yaml_out[1] == "---\nname: a\nphase: Failed"


def test_watch_note_is_said_once():
    feed = Feed(px_listing({"a": ("Running", "1s")}, note="judging overdue by 1m"),
                px_listing({"a": ("Running", "1s")}, note="")).watch()
    assert feed.err == ["judging overdue by 1m"]


def test_get_watch_ends_quietly_on_ctrl_c_with_exit_0(capsys, redis, monkeypatch):
    put(redis, proxy("a"))
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 2:
            put(redis, proxy("a", status=ProxyStatus(phase="Failed")))
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    code, out, err = run(capsys, "get", "px", "--watch", "-n", "crawl")
    assert code == 0 and err == "" and naps == [2.0, 2.0, 2.0]
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "PROVIDER", "PHASE"] and lines[1].split()[:3] == ["a", "squid", "Running"]
    assert lines[2].split()[:3] == ["a", "squid", "Failed"] and len(lines) == 3


def test_get_watch_whose_first_read_fails_exits_3(capsys):
    code, out, err = run(capsys, "get", "px", "-w", "--broker", "redis://127.0.0.1:1/0")
    assert code == 3 and out == "" and "cannot read Proxies from Redis" in err


def test_get_watch_of_a_name_not_there_exits_1(capsys, redis):
    code, _, err = run(capsys, "get", "px", "zz", "-w")
    assert code == 1 and "proxy 'zz' not found" in err


# --- describe ---------------------------------------------------------------------------


def test_describe_px_shows_spec_conditions_leases_and_cooldowns(capsys, redis):
    now = time.time()
    put(redis, proxy("a", pool="web"))
    redis.hset(keys.PX_PHASE, "crawl/a", f"Running|{now - 120}")
    redis.hset(keys.PX_ENDPOINTS, "crawl/a", json.dumps({"uid": "u-a", "ip": "127.0.0.1", "port": 31280}))
    redis.hset(keys.LEASE_DOCS, "lease-1", json.dumps({"proxy": "crawl/a", "target": "example.com", "sticky": "",
                                                       "granted": now - 10, "expires": now + 50}))
    redis.zadd(keys.LEASE_HELD + "crawl/a", {"lease-1": now + 50, "lease-old": now - 5})
    redis.zadd(keys.LEASE_COOL_TARGET, {"crawl/a|shop.example": now + 300, "crawl/a|gone.example": now - 1,
                                        "crawl/ab|other.example": now + 300})
    redis.zadd(keys.LEASE_COOL_GLOBAL, {"crawl/a": now + 30})
    redis.hset(keys.LEASE_ERRORS, "crawl/a", 2)
    code, out, err = run(capsys, "describe", "px", "a", "-n", "crawl")
    assert code == 0, err
    fields = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines()
              if ":" in line and not line.startswith("    ")}
    assert fields["Name"] == "a" and fields["Namespace"] == "crawl" and fields["Provider"] == "squid"
    assert fields["Member"] == "own" and fields["Egress IP"] == "203.0.113.9"
    assert fields["Labels"] == "crawl.example.com/pool=web" and fields["Placement"] == "region=fsn1"
    assert fields["Leases"] == "1 open" and fields["Cooldowns"] == "2 in force" and fields["Error reports"] == "2 in a row"
    assert fields["Phase since"].startswith("Running since ") and "ago)" in fields["Phase since"]
    assert "lease-1" in out and "lease-old" not in out and "example.com" in out
    assert "shop.example" in out and "* (global)" in out and "gone.example" not in out and "other.example" not in out
    assert "Ready" in out and "Running" in out  # the condition's row
    # the forms `fleet get -o name` prints, and every namespace without -n
    assert run(capsys, "describe", "proxy.crawl.example.com/crawl/a")[1] == out
    assert run(capsys, "describe", "px/a")[1] == out
    assert run(capsys, "describe", "px", "a")[1] == out


def test_describe_px_not_found_exits_1_and_bad_kind_exits_2(capsys, redis):
    code, _, err = run(capsys, "describe", "px", "zz", "-n", "crawl")
    assert code == 1 and "proxy 'zz' not found in namespace 'crawl'" in err
    code, _, err = run(capsys, "describe", "pods", "zz")
    assert code == 2 and "fleet describe knows px" in err


def test_describe_ph(capsys, redis, tmp_path):
    import yaml

    from fleet.health.results import CheckResult
    from fleet.health.stored import StoredResults
    from providers.base import TargetStatus

    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump({"providers": [{"name": "ok", "type": "fake"}]}))
    StoredResults(Store(redis)).save_if_newer(CheckResult(
        "ok", "fake", True, time.time() - 3,
        (TargetStatus("a", "10.0.0.1:22", True, "Reachable", "", 0.012, {"k": "v"}),)))
    redis.set(keys.worker("ok", "ok@host-1"), "1")
    code, out, err = run(capsys, "describe", "ph", "ok", "-c", str(config))
    assert code == 0, err
    assert "Name:                ok" in out and "Workers:             ok@host-1" in out and "Reachable" in out and "k=v" in out
    assert run(capsys, "describe", "ph", "zz", "-c", str(config))[0] == 1


# --- version, a closed pipe ---------------------------------------------------------------


def test_describe_pools_standalone_and_a_name_not_there(capsys, redis, tmp_path):
    manifests = tmp_path / "pools.yaml"
    manifests.write_text("""\
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {name: web, namespace: crawl}
spec:
  replicas: 3
  providers: [{provider: squid, weight: 2}, {provider: edge}]
  autoscale: {min: 1, max: 6}
  template: {port: 3128}
""")
    code, out, err = run(capsys, "describe", "pools", "--proxies", str(manifests))
    assert code == 0, err
    fields = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
    assert fields["Name"] == "web" and fields["Namespace"] == "crawl" and fields["Kind"] == "proxypool.crawl.example.com"
    assert fields["Providers"] == "squid (weight 2), edge (weight 1)" and fields["Autoscale"] == "min=1, max=6"
    assert "Conditions" in fields
    assert run(capsys, "describe", "proxypool.crawl.example.com/web", "-n", "crawl", "--proxies", str(manifests))[1] == out
    code, out, err = run(capsys, "describe", "pools", "nope", "-n", "crawl", "--proxies", str(manifests))
    assert (code, out) == (1, "") and "proxypool 'nope' not found" in err


def test_version(capsys):
    import tomllib
    from importlib import metadata
    from pathlib import Path

    from fleet.cli.subcommands import DISTRIBUTION

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == DISTRIBUTION

    code, out, _ = run(capsys, "version")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"fleet {metadata.version(DISTRIBUTION)}" and lines[1].startswith("python 3.")
    info = json.loads(run(capsys, "version", "-o", "json")[1])
    assert set(info) >= {"fleet", "python"}
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"fleet {metadata.version(DISTRIBUTION)}\n"


def test_a_reader_gone_before_the_output_is_flushed_exits_141_quietly():
    """`fleet version | (reader already gone)`: the little output sits in the buffer until the end, where main's
    flush finds the pipe closed; stdout is pointed at /dev/null so the interpreter's own last flush stays quiet."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "PYTHONUNBUFFERED"}  # buffered
    try:
        got = subprocess.run([sys.executable, "-m", "fleet.cli", "version"], stdout=w, stderr=subprocess.PIPE,
                             timeout=60, check=False, env=env)
    finally:
        os.close(w)
    assert got.returncode == 141 and got.stderr == b"", got.stderr.decode()


def test_a_closed_pipe_exits_141_quietly(capsys, monkeypatch):
    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_version", closed)
    code, _, err = run(capsys, "version")
    assert code == cli.EXIT_BROKEN_PIPE == 141 and err == ""
