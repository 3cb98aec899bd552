"""ProviderHealth status writes on a real kube-apiserver (issue 24's KEP-589
rule, `fleet.health.decide.should_write`) through the whole pipeline: a
check every second (sent as beat sends them; beat itself refuses an
interval under 10 s), a real fake-provider worker runs it, the real
controller records it and writes the status, authenticated as its rendered
ServiceAccount. Every write is seen on an admin's watch of the object.

- With nothing changing (a 300 ms check's real time moving by a few ms), the
  status is written about once a `--status-heartbeat` (10 s, the least it
  may be), not once a round as before; a write between heartbeats is one
  whose latency moved past the band (a loaded machine's lateness is real).
- A flapping target (`flapEvery` rounds up, as many down) changes the
  verdict every few rounds: each change is one write, and the rounds
  between write nothing (heartbeat 1m).
- Checks stopped, CheckOverdue is written as soon as it is due (2
  intervals + the timeout, 21 s), not at the next heartbeat.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from fleet.health.decide import latency_moved
from fleet.testing.procs import wait_for
from tests.integration.test_apiserver_proxies import Installations

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

class Writes:
    """Every MODIFIED event of one ProviderHealth on an admin's watch: (monotonic time, Ready status, reason,
    the targets down, the targets' latencyMillis)."""

    def __init__(self, server, name: str) -> None:
        from fleet import kube
        from fleet.kube import PROVIDER_HEALTH
        from fleet.settings import Settings

        api, _ = kube.api_client(Settings(kubeconfig=server.kubeconfig))
        self.name = name
        self.events: list[tuple[float, str, str, str, tuple[int, ...]]] = []
        self.stop = threading.Event()
        self.watcher = kube.Watcher(api, PROVIDER_HEALTH, self._on)
        self.thread = threading.Thread(target=self.watcher.run, args=(self.stop,), daemon=True)
        self.thread.start()
        assert self.watcher.synced.wait(10)

    def _on(self, kind: str, obj: dict) -> None:
        if obj["metadata"]["name"] != self.name or kind != "MODIFIED" or not obj.get("status"):
            return
        ready = next((c for c in obj["status"].get("conditions") or () if c.get("type") == "Ready"), {})
        targets = obj["status"].get("targets") or ()
        down = sorted(t["name"] for t in targets if not t.get("ready"))
        latencies = tuple(int(t.get("latencyMillis") or 0) for t in targets)
        self.events.append((time.monotonic(), ready.get("status", ""), ready.get("reason", ""), ",".join(down),
                            latencies))

    def since(self, t: float) -> list[tuple[float, str, str, str, tuple[int, ...]]]:
        return [e for e in self.events if e[0] >= t]

    def with_previous(self, window: list) -> list[tuple[float, str, str, str, tuple[int, ...]]]:
        """`window` (a run of events) and the write before it."""
        first = self.events.index(window[0])
        return self.events[first - 1:first + len(window)]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def latency_moved_past_band(a: tuple, b: tuple) -> bool:
    """Whether a target's latencyMillis moved from event `a` to `b` by what the rule writes (a loaded machine's
    lateness is real latency)."""
    return any(latency_moved(x, y) for x, y in zip(a[4], b[4], strict=True))


@pytest.fixture
def installations(kube_server, redis_server, tmp_path):
    inst = Installations(kube_server, redis_server.url, tmp_path)
    yield inst
    inst.stop()


class Rounds:
    """A check of `provider` every `every` s from a thread, as beat would send it at that interval."""

    def __init__(self, stack, provider: str, every: float = 1.0) -> None:
        self.stack, self.provider, self.every = stack, provider, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.stack.send_check(self.provider, timeout=1.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def start(installations, kube_ns, provider: str, fake: dict, heartbeat: str):
    # interval 10s: the controller's CheckOverdue is due 2 × 10 + 1 s after the last result
    stack = installations.start(f"fleet-{kube_ns}", provider, kube_ns, providers=[{"name": provider, "type": "fake", "fake": fake}],
                                FLEET_PROVIDER_CHECK_INTERVAL="10s", FLEET_PROVIDER_CHECK_TIMEOUT="1s",
                                FLEET_STATUS_HEARTBEAT=heartbeat)
    stack.wait_ready(f"worker:{provider}", "controller")
    return stack


def name_for(kube_ns: str, what: str) -> str:
    return f"{what}-{kube_ns.split('-', 1)[1]}"[:40]


def test_nothing_changing_is_written_about_once_a_heartbeat_not_once_a_round(kube_server, installations, kube_ns):
    provider = name_for(kube_ns, "calm")
    # a 300 ms check: the latency band is 60 ms (20%), wider than a loaded machine's usual lateness
    stack = start(installations, kube_ns, provider, {"targets": [{"name": "a"}, {"name": "b"}], "latencyMs": 300}, "10s")
    writes = Writes(kube_server, provider)
    rounds = Rounds(stack, provider)
    try:
        wait_for(lambda: writes.events, 60, f"a write of {provider}:\n{stack.log('controller')[-3000:]}")
        t0 = time.monotonic()
        time.sleep(25)  # 25 rounds
        steady = writes.since(t0)
    finally:
        rounds.close()
        writes.close()
    assert 2 <= len(steady) <= 6, steady  # about a heartbeat's writes, where every round wrote before (25)
    # each write is a heartbeat's (10 s after the last) or a latency that moved past the band (a loaded machine's
    # lateness is real latency); nothing else
    written = writes.with_previous(steady)
    for a, b in itertools.pairwise(written):
        assert b[0] - a[0] >= 10 - 1.5 or latency_moved_past_band(a, b), written
    assert {e[1:4] for e in steady} == {("True", "AllTargetsReady", "")}, steady
    assert "forbidden" not in stack.log("controller").lower()


def test_each_verdict_change_is_written_and_an_overdue_check_at_once(kube_server, installations, kube_ns):
    provider = name_for(kube_ns, "flap")
    fake = {"targets": [{"name": "a"}, {"name": "b"}], "flapRatio": 0.5, "flapEvery": 4, "latencyMs": 300}
    stack = start(installations, kube_ns, provider, fake, "1m")
    writes = Writes(kube_server, provider)
    rounds = Rounds(stack, provider)
    try:
        wait_for(lambda: len(writes.events) >= 2, 60, f"two writes of {provider}:\n{stack.log('controller')[-3000:]}")
        t0 = time.monotonic()
        time.sleep(16)  # 16 rounds: a flip every 4
        window = writes.since(t0)
        rounds.close()
        stopped = time.monotonic()
        wait_for(lambda: any(e[2] == "CheckOverdue" for e in writes.since(stopped)), 40,
                 f"CheckOverdue written: {writes.since(stopped)}")
    finally:
        rounds.close()
        writes.close()
    # each write a change: one target down, then none; or, between flips, a latency that moved past the band
    # (a loaded machine's lateness is real latency)
    assert window, writes.events
    written = writes.with_previous(window)
    flips = [b for a, b in itertools.pairwise(written) if a[3] != b[3]]
    assert 3 <= len(flips) <= 5, window  # about 4 flips; 16 writes before
    for a, b in itertools.pairwise(written):
        assert a[3] != b[3] or latency_moved_past_band(a, b), written
    overdue = next(e for e in writes.events if e[0] >= stopped and e[2] == "CheckOverdue")
    # due 21 s after the last result (about when the checks stopped); the heartbeat (1m) is not waited for
    assert overdue[0] - stopped <= 21 + 4, (overdue[0] - stopped, writes.since(stopped))
    assert overdue[1] == "Unknown"
