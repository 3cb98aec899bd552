"""Replacing a pool member as applied, in standalone mode: the PoolController
over `InRedis`, the real standalone Proxy `Reconciler` provisioning members
on a fake provider (tests/fleet/proxies/test_standalone.py's world: one
fakeredis with the lease scripts' Lua, a clock the test moves), the pool
loop's `Inputs` reading Redis, and the real lease store (`fleet.store.leases`).

- uniqueEgressIP: verdicts written as the prober writes them (`judge` on the
  stored state, `put_verdict`) give two Running members one egress address:
  the later one is replaced surge-first (reason `egress`), the earlier
  stays; a verdict on another uid is not the member's.
- rotation by maxAge with maxUnavailable 0: a lease held on the old member
  renews while its replacement is provisioning, and answers `revoked` only
  once the replacement is Ready and the old member is deleted."""

from __future__ import annotations

import json
import random

import pytest

from fleet.pools.controller import PoolController
from fleet.pools.metrics import PoolSeries
from fleet.pools.runtime import Inputs
from fleet.pools.standalone import InRedis
from fleet.prober.decide import Outcome, Thresholds, judge, restored
from fleet.proxies.model import POOL_OWNER
from fleet.store.leases import Granted, LeaseCall, NotRenewed, RenewCall, Renewed
from tests.fleet.proxies.test_standalone import world  # noqa: F401

PER_MEMBER = 4

POOL = """\
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {{name: web, namespace: crawl}}
spec:
  replicas: {replicas}
  providers: [{{provider: edge}}]
  template: {{port: 3128}}
  strategy: {{maxSurge: 1, maxUnavailable: 0}}
{extra}"""


@pytest.fixture
def pw(world):  # noqa: F811
    def due(keys_):
        for k in keys_:
            world.store.proxies.schedule(k, world.clock.t)

    world.inputs = Inputs(world.store.leases, PER_MEMBER, clock=world.clock, verdicts=world.store.proxies.verdicts)
    world.series = PoolSeries()
    world.where = InRedis(world.store.pools, world.objects, str(world.dir), "test", clock=world.clock, on_change=due)
    world.ctl = PoolController(world.where, clock=world.clock, rng=random.Random(5), usage=world.inputs.usage,
                               demand=world.inputs.demand, egress=world.inputs.egress, series=world.series)

    def run_pass() -> None:
        world.inputs.refresh()
        world.ctl.run_once()

    def cycle(n: int = 1, seconds: float = 10.0) -> None:
        for _ in range(n):
            world.step(seconds)
            run_pass()
            world.step()

    world.run_pass, world.cycle = run_pass, cycle
    return world


def write(w, replicas: int, **extra: object) -> None:
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in extra.items())
    (w.dir / "web.yaml").write_text(POOL.format(replicas=replicas, extra=lines))


def members(w) -> list[str]:
    """The live members, oldest first."""
    ps = [p for p in w.objects.all() if p.pool == "web" and POOL_OWNER in p.annotations and not p.deleting]
    return [p.name for p in sorted(ps, key=lambda p: (p.created_at, p.name))]


def phase(w, name: str) -> str:
    p = w.proxy(name)
    return "gone" if p is None else "Deleting" if p.deleting else p.status.phase


def probe(w, name: str, egress: str) -> None:
    """One good probe of the member's endpoint that echoed `egress`, judged and written as the prober does."""
    key = f"crawl/{name}"
    ep = json.loads(w.store.proxies.endpoints()[key])
    state = restored(ep["uid"], w.store.proxies.verdict(key))
    _, verdict = judge(state, Outcome(True, "200 in 3 ms", egress), key, ep["ip"], w.clock.t, Thresholds())
    assert verdict is not None and verdict.egress_ip == egress
    w.store.proxies.put_verdict(key, verdict.encode(), w.clock.t)


def replaced(w) -> dict[str, float]:
    fam = next(m for m in w.series.collect() if m.name == "proxy_operator_pool_replacements")
    return {s.labels["reason"]: s.value for s in fam.samples if s.name.endswith("_total")}


# --- uniqueEgressIP ----------------------------------------------------------------------------


def test_the_later_of_two_members_on_one_egress_address_is_replaced_surge_first(pw):
    write(pw, 2, uniqueEgressIP=True)
    pw.cycle(3)
    first, second = members(pw)
    write(pw, 3, uniqueEgressIP=True)  # the third is created later than both
    pw.cycle(3)
    third = next(n for n in members(pw) if n not in (first, second))
    assert all(phase(pw, n) == "Running" for n in (first, second, third))
    probe(pw, first, "198.51.100.7")
    probe(pw, second, "198.51.100.8")
    # a verdict on another uid under the third's key (a Proxy since replaced) is not the third's
    pw.store.proxies.put_verdict(f"crawl/{third}", json.dumps({"uid": "someone-else", "healthy": True, "since": 0,
                                                                "message": "", "egressIP": "198.51.100.7"}), pw.clock.t)
    pw.cycle(2)
    assert members(pw) == [first, second, third] and pw.ctl.counters.creates == 3
    probe(pw, third, "198.51.100.7")  # the first's address
    pw.step(1)
    pw.run_pass()
    pw.step()  # the reconciler takes the new member
    surge = next(n for n in members(pw) if n not in (first, second, third))
    assert phase(pw, surge) == "Provisioning" and phase(pw, third) == "Running"  # the new one first
    pw.run_pass()
    assert phase(pw, third) == "Running" and pw.ctl.counters.deletes == {}  # not before the new one is Ready
    pw.step(10)  # the surge member Running
    assert phase(pw, surge) == "Running"
    pw.run_pass()
    assert phase(pw, third) == "Deleting" and pw.ctl.counters.deletes == {"egress": 1}
    assert replaced(pw)["egress"] == 1
    pw.cycle(2)
    assert members(pw) == [first, second, surge] and phase(pw, third) == "gone"
    probe(pw, surge, "198.51.100.9")
    pw.cycle(3)
    assert members(pw) == [first, second, surge] and pw.ctl.counters.creates == 4  # steady


def test_without_the_rule_a_shared_egress_address_replaces_nothing(pw):
    write(pw, 2)
    pw.cycle(3)
    a, b = members(pw)
    probe(pw, a, "198.51.100.7")
    probe(pw, b, "198.51.100.7")
    pw.cycle(3)
    assert members(pw) == [a, b] and pw.ctl.counters.deletes == {}


# --- leases on a rotated member ------------------------------------------------------------------


def test_a_rotated_members_lease_renews_until_its_replacement_is_ready_then_is_revoked(pw):
    write(pw, 1, maxAgeSeconds=60)
    pw.cycle(2)
    (old,) = members(pw)
    assert phase(pw, old) == "Running"
    call = LeaseCall(lease_id="a" * 32, target="example.com", expires=pw.clock.t + 600, max_per_proxy=PER_MEMBER, pool="web", ttl=600)
    got = pw.store.leases.lease(call, pw.clock.t, 0.0)
    assert isinstance(got, Granted) and got.proxy == f"crawl/{old}"

    def renew() -> Renewed | NotRenewed:
        answer, _ = pw.store.leases.renew(RenewCall(lease_id="a" * 32, ttl=600.0, default_ttl=600.0, max_per_proxy=PER_MEMBER), pw.clock.t)
        return answer

    pw.step(60)  # past maxAge
    pw.run_pass()
    pw.step()  # the reconciler takes the new member
    (new,) = [n for n in members(pw) if n != old]
    assert phase(pw, new) == "Provisioning" and phase(pw, old) == "Running"  # surge-first
    for _ in range(3):  # the replacement provisioning: the old member stays, its lease renews
        answer = renew()
        assert isinstance(answer, Renewed) and answer.proxy == f"crawl/{old}"
        pw.step(3)
        pw.run_pass()
        assert phase(pw, new) == "Provisioning" and phase(pw, old) == "Running"
    pw.step(1)  # the replacement's poll: Running and Ready
    assert pw.proxy(new).status.condition("Ready").status == "True"
    assert isinstance(renew(), Renewed)  # still the old one's until the pool deletes it
    pw.run_pass()
    assert phase(pw, old) == "Deleting" and pw.ctl.counters.deletes == {"rotation": 1}
    pw.step()  # the Proxy reconciler takes the deletion: the endpoint goes
    assert renew() == NotRenewed("revoked", "gone")
    pw.cycle(2)
    assert members(pw) == [new] and phase(pw, old) == "gone"
