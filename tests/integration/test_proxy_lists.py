"""The steady state of Proxies as applied (issue 24): redis-server, one real
`fleet worker` per fake provider and a real `fleet controller` in standalone
mode. Once every Proxy is Running, a provider's queue gets one
`fleet.list_instances` per resync interval and no Get per Proxy (counted on
each worker's /metrics, the calls it ran); an instance deleted behind
fleet's back (from the fake's shared `stateFile`, as a backend would lose it)
is found by the next list and created again; a provider whose list fails
(the fake's `faultsFile`) keeps its Proxies Running, makes none of them due,
and is asked again after a back-off that grows. Redis bounds one message at
2mb, as deployed: a list of 12,000 instances crosses it compressed, and one
too large even so gets each of its Running Proxies a Get per interval."""

from __future__ import annotations

import itertools
import json
import re
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from fleet.store import keys
from fleet.testing.procs import free_port, wait_for
from providers.base import Instance, State
from providers.fake import Table
from tests.integration.test_standalone_rules import MANIFEST

pytestmark = pytest.mark.integration

PROVIDERS = ("edge", "core")
PER_PROVIDER = 6
RESYNC = 4.0  # --proxy-resync-interval
_SERIES = re.compile(r'^proxy_operator_provider_requests_total\{op="(\w+)",provider="(\w+)",result="(\w+)"\} ([0-9.e+]+)$',
                     re.MULTILINE)


def calls(port: int) -> Counter[tuple[str, str]]:
    """The calls a worker ran, by (op, result), from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: Counter[tuple[str, str]] = Counter()
    for op, _provider, result, value in _SERIES.findall(text):
        out[(op, result)] += int(float(value))
    return out


def by_op(c: Counter[tuple[str, str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (op, _), n in c.items():
        out[op] += n
    return out


@pytest.fixture
def lab(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    providers = [{"name": n, "type": "fake", "fake": {"stateFile": str(tmp_path / f"{n}.json"),
                                                      "faultsFile": str(tmp_path / f"{n}-faults.json")}}
                 for n in PROVIDERS]
    stack = make_stack(redis_server.url, providers, FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROXY_RESYNC_INTERVAL=f"{RESYNC:g}s", FLEET_PROVIDER_CALL_TIMEOUT="10s",
                       FLEET_PROVIDER_CHECK_INTERVAL="0")
    stack.ports = {}
    for n in PROVIDERS:
        stack.ports[n] = free_port()
        stack.env["FLEET_WORKER_METRICS_BIND_ADDRESS"] = f"127.0.0.1:{stack.ports[n]}"
        stack.worker(n)
    stack.controller()
    stack.wait_ready(*(f"worker:{n}" for n in PROVIDERS), "controller")
    for n in PROVIDERS:
        for i in range(PER_PROVIDER):
            (manifests / f"{n}-{i}.yaml").write_text(MANIFEST.format(name=f"{n}-{i}", provider=n, port=3128))
    r = redis_server.client()
    stack.redis = r
    wait_for(lambda: all_running(r), 90, "every Proxy Running")
    return stack


def phases(r) -> dict[str, tuple[str, float]]:
    out = {}
    for k, v in r.hgetall(keys.PX_PHASE).items():
        phase, _, since = v.decode().partition("|")
        out[k.decode()] = (phase, float(since or 0))
    return out


def all_running(r) -> bool:
    got = phases(r)
    return len(got) == len(PROVIDERS) * PER_PROVIDER and {p for p, _ in got.values()} == {"Running"}


def snapshot(stack) -> dict[str, Counter[str]]:
    return {n: by_op(calls(stack.ports[n])) for n in PROVIDERS}


def delta(after: dict[str, Counter[str]], before: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
    return {n: after[n] - before[n] for n in PROVIDERS}


def lose_instance(stack, provider: str, victim: str) -> tuple[str, float]:
    """Delete the Proxy `victim`'s instance from the fake's backend, as a cloud would lose it: its id, and when."""
    instance = json.loads(stack.redis.hget(keys.PX_ENDPOINTS, victim))["instance"]
    with Table(str(stack.tmp / f"{provider}.json")).open() as table:
        del table[instance]
    return instance, time.time()


def test_running_proxies_cost_one_list_per_provider_per_interval_not_a_get_each(lab):
    time.sleep(RESYNC + 1)  # the lists sent while they came up are answered
    before = snapshot(lab)
    time.sleep(3 * RESYNC)
    got = delta(snapshot(lab), before)
    for n in PROVIDERS:
        # three intervals: about three lists; a Get per Running Proxy per interval would be 3 × 6 here
        assert 2 <= got[n]["list"] <= 4, got
        assert got[n]["get"] == 0 and got[n]["create"] == 0 and got[n]["delete"] == 0, got
    assert all_running(lab.redis)


def test_an_instance_deleted_behind_fleets_back_is_created_again_within_about_one_interval(lab):
    time.sleep(RESYNC + 1)
    victim = "crawl/edge-3"
    before = snapshot(lab)
    instance, gone_at = lose_instance(lab, "edge", victim)

    def back() -> bool:
        with Table(str(lab.tmp / "edge.json")).open() as table:
            here = instance in table
        phase, since = phases(lab.redis)[victim]
        return here and phase == "Running" and since > gone_at

    wait_for(back, 3 * RESYNC + 10, f"{victim} created again and Running")
    took = time.time() - gone_at
    # the next list (≤ one interval), its Get, the create, one poll (1 s): slack for a loaded machine
    assert took <= RESYNC + 6, f"{took:.1f} s to create it again"
    got = delta(snapshot(lab), before)
    assert got["edge"]["create"] == 1, got
    assert 1 <= got["edge"]["get"] <= 3, got  # the vanished one's and its new instance's polls: no one else's
    assert got["core"]["get"] == 0 and got["core"]["create"] == 0, got
    assert all_running(lab.redis)


def test_a_failing_list_keeps_its_proxies_running_and_backs_off(lab):
    time.sleep(RESYNC + 1)
    r = lab.redis
    before = snapshot(lab)
    (lab.tmp / "core-faults.json").write_text('{"list": "Transient"}')
    failed_at: list[float] = []  # when each failed list was answered (its count moved on core's worker)
    seen_phases: set[str] = set()
    end = time.monotonic() + 4 * RESYNC + 2
    last = 0
    while time.monotonic() < end:
        n = calls(lab.ports["core"])[("list", "transient")]
        failed_at.extend([time.monotonic()] * (n - last))
        last = n
        seen_phases |= {p for k, (p, _) in phases(r).items() if k.startswith("crawl/core-")}
        time.sleep(0.05)
    got = delta(snapshot(lab), before)
    assert seen_phases == {"Running"}, seen_phases  # not Failed, not Unknown: the answer is in doubt, not them
    assert got["core"]["get"] == 0 and got["core"]["create"] == 0, got  # no Get storm
    assert len(failed_at) >= 4, (failed_at, got)
    failures = int(r.hget(keys.PX_LIST_FAILURES, "core") or 0)
    assert failures >= len(failed_at) - 1, failures
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(failed_at)]
    # asked again after 1, 2, 4 s (capped at the interval, 4 s): it grows, and it is no busy loop
    assert gaps[0] <= 1.9 and gaps[1] >= 1.4 and gaps[2] >= 3.0, gaps
    assert all(g <= RESYNC + 1.5 for g in gaps), gaps
    assert 2 <= got["edge"]["list"] <= 6 and got["edge"]["get"] == 0, got  # the other provider's lists go on

    (lab.tmp / "core-faults.json").unlink()
    wait_for(lambda: r.hget(keys.PX_LIST_FAILURES, "core") is None, RESYNC + 5, "core's list to succeed again")
    assert by_op(calls(lab.ports["core"]))["get"] == before["core"]["get"]
    assert all_running(r)
    out = lab.fleet("get", "px", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert {i["status"]["phase"] for i in json.loads(out.stdout)["items"]} == {"Running"}


def crowd(stack, provider: str, n: int) -> None:
    """`n` instances of another installation on the provider's backend (random ids, as a cloud's): listed, nobody's Proxy."""
    now = datetime.now(UTC)
    with Table(str(stack.tmp / f"{provider}.json")).open() as table:
        for _ in range(n):
            pid = f"fake/other-{uuid.uuid4().hex[:16]}"
            table[pid] = Instance(pid, State.RUNNING, "127.0.0.9", str(uuid.uuid4()), now, "other", "crawl")


def test_a_list_of_twelve_thousand_instances_crosses_a_redis_bounded_at_2mb(lab):
    """~3.6 MB as plain JSON in base64, over the bulk length Redis takes (this one as the deployed):
    compressed it crosses, so the next list still finds an instance deleted behind fleet's back."""
    crowd(lab, "edge", 12_000)
    time.sleep(RESYNC + 1)
    victim = "crawl/edge-2"
    before = snapshot(lab)
    _, gone_at = lose_instance(lab, "edge", victim)
    wait_for(lambda: phases(lab.redis)[victim][1] > gone_at and phases(lab.redis)[victim][0] == "Running",
             3 * RESYNC + 20, f"{victim} created again and Running")
    got = delta(snapshot(lab), before)
    assert got["edge"]["create"] == 1 and got["edge"]["get"] <= 3, got  # found by the list: no Get per Proxy
    assert calls(lab.ports["edge"])[("list", "permanent")] == 0
    assert lab.redis.hget(keys.PX_LIST_FAILURES, "edge") is None
    assert all_running(lab.redis)


def test_a_list_too_large_even_compressed_gets_each_running_proxy_a_get_per_interval(lab):
    """Past what one answer may take (here ~38,000 instances), the worker answers `ListTooLarge`
    instead of a message Redis would refuse: edge's six Running Proxies get their own Get about once an
    interval, none goes Unknown or Failed, and core's list goes on as before."""
    crowd(lab, "edge", 60_000)
    wait_for(lambda: calls(lab.ports["edge"])[("list", "permanent")] >= 1, 2 * RESYNC + 20, "a too-large list answer")
    before = snapshot(lab)
    time.sleep(3 * RESYNC)
    got = delta(snapshot(lab), before)
    assert 2 <= got["edge"]["list"] <= 4, got
    assert 2 * PER_PROVIDER <= got["edge"]["get"] <= 4 * PER_PROVIDER, got  # once per Proxy per interval, about
    assert got["edge"]["create"] == 0 and got["core"]["get"] == 0, got
    assert lab.redis.hget(keys.PX_LIST_FAILURES, "edge") is None  # not an outage: no back-off
    assert all_running(lab.redis)


def test_gc_collects_an_orphan_among_twelve_thousand_instances(lab):
    """GC's list answer crosses the same 2mb bound compressed: a sweep (`fleet gc`, as beat sends it) of
    a provider with 12,000 listed instances deletes the one orphan of ours and nothing else."""
    with Table(str(lab.tmp / "edge.json")).open() as table:
        ours = next(iter(table.values())).installation
        table["fake/orphan"] = Instance("fake/orphan", State.RUNNING, "127.0.0.8", str(uuid.uuid4()),
                                        datetime.now(UTC) - timedelta(hours=2), ours, "crawl")
    crowd(lab, "edge", 12_000)
    sent = lab.fleet("gc")
    assert sent.returncode == 0, sent.stderr

    def collected() -> bool:
        with Table(str(lab.tmp / "edge.json")).open() as table:
            return "fake/orphan" not in table

    wait_for(collected, 60, f"the orphan collected:\n{lab.log('controller')[-3000:]}")
    with Table(str(lab.tmp / "edge.json")).open() as table:
        assert len(table) == 12_000 + PER_PROVIDER  # the others' and the Proxies' instances kept
    assert all_running(lab.redis)
