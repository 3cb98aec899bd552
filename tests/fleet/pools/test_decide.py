"""fleet.pools.decide: one row per rule of its table, on pools parsed the way
the controller parses them (fleet.pools.model.parse_pool)."""

from __future__ import annotations

import dataclasses

import pytest

from fleet.pools import decide as rules
from fleet.pools.decide import Demand, decide, resolve, spread, template_hash
from fleet.pools.model import Member, PoolError, parse_pool

NOW = 1_000_000.0


def pool(replicas=10, providers=None, **spec):
    obj = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
           "metadata": {"name": "web", "namespace": "crawl", "uid": "u-pool", "generation": 1},
           "spec": {"replicas": replicas, "providers": providers or [{"provider": "a", "weight": 3},
                                                                    {"provider": "b", "weight": 1}], **spec}}
    return parse_pool(obj)


def hash_of(p, provider):
    return template_hash(p.spec, next(s for s in p.spec.providers if s.provider == provider))


def member(p, name, provider="a", *, age=1000.0, ready=True, ready_for=1000.0, created=True, hash_=None, **kw):
    return Member(name=name, uid=f"uid-{name}", provider=provider, created_at=NOW - age,
                  template_hash=hash_of(p, provider) if hash_ is None else hash_, created=created,
                  ready_since=(NOW - ready_for) if ready else None, **kw)


def fleet(p, counts, **kw):
    """Members: {provider: n}, all updated, Ready and available."""
    age = kw.pop("age", 1000.0)
    return [member(p, f"{prov}-{i}", prov, age=age + i, **kw) for prov, n in counts.items() for i in range(n)]


def by_provider(creates):
    out = {}
    for c in creates:
        out[c.provider] = out.get(c.provider, 0) + 1
    return out


def cond(decision, type_):
    return next(c for c in decision.status["conditions"] if c["type"] == type_)


# --- arithmetic -------------------------------------------------------------------


@pytest.mark.parametrize(("n", "shares", "want"), [
    (10, [("a", 3, None), ("b", 1, None)], {"a": 8, "b": 2}),  # 7.5 : 2.5, the tie to the earlier entry
    (10, [("a", 1, None), ("b", 3, None)], {"a": 3, "b": 7}),  # the tie goes to the earlier entry, whatever its weight
    (7, [("a", 1, None), ("b", 1, None), ("c", 1, None)], {"a": 3, "b": 2, "c": 2}),
    (10, [("a", 2, None), ("b", 1, None)], {"a": 7, "b": 3}),  # 6.67 : 3.33, the larger remainder
    (10, [("a", 3, 5), ("b", 1, None)], {"a": 5, "b": 5}),  # a capped: the rest to b
    (10, [("a", 3, 2), ("b", 1, 3)], {"a": 2, "b": 3}),  # both capped: a shortfall
    (0, [("a", 3, None), ("b", 1, None)], {"a": 0, "b": 0}),
])
def test_spread_is_largest_remainder_with_caps(n, shares, want):
    assert spread(n, shares) == want


@pytest.mark.parametrize(("value", "total", "up", "want"), [
    ("25%", 10, True, 3), ("25%", 10, False, 2), (2, 10, True, 2), ("0%", 10, True, 0), ("100%", 7, False, 7)])
def test_resolve_rounds_as_a_deployment(value, total, up, want):
    assert resolve(value, total, up) == want


# --- rows --------------------------------------------------------------------------


def test_spread_empty_pool_creates_by_weight():
    p = pool(10)
    d = decide(p, [], None, NOW)
    assert by_provider(d.creates) == {"a": 8, "b": 2}
    assert d.deletes == ()
    assert [(e["provider"], e["desired"]) for e in d.status["providers"]] == [("a", 8), ("b", 2)]


def test_a_provider_max_moves_its_share_and_says_so_when_short():
    p = pool(10, [{"provider": "a", "weight": 3, "max": 4}, {"provider": "b", "weight": 1, "max": 3}])
    d = decide(p, [], None, NOW)
    assert by_provider(d.creates) == {"a": 4, "b": 3}
    assert cond(d, "ScalingLimited")["status"] == "True" and cond(d, "ScalingLimited")["reason"] == rules.R_PROVIDER_MAX


def test_a_refusing_provider_has_its_share_moved_to_the_others():
    p = pool(10)
    ms = fleet(p, {"a": 5, "b": 2})
    ms += [member(p, "a-q1", "a", created=False, ready=False, refused=True),
           member(p, "a-q2", "a", created=False, ready=False, refused=True)]
    d = decide(p, ms, None, NOW)
    assert {x.name for x in d.deletes} == {"a-q1", "a-q2"}  # the stuck ones go
    assert by_provider(d.creates) == {"b": 3}  # a keeps its 5 working, b takes the other 3
    sl = cond(d, "ScalingLimited")
    assert (sl["status"], sl["reason"]) == ("True", rules.R_REFUSED) and "a" in sl["message"]
    assert d.status["providers"][0]["refusedAt"]


def test_a_refusal_is_held_after_the_refused_members_are_gone():
    p = pool(10)
    first = decide(p, fleet(p, {"a": 5, "b": 2}) + [member(p, "a-q", "a", created=False, ready=False, refused=True)],
                   None, NOW)
    later = dataclasses.replace(p, status=parse_pool({**_obj(p), "status": first.status}).status)
    d = decide(later, fleet(p, {"a": 5, "b": 5}), None, NOW + 60)
    assert d.creates == () and d.deletes == ()  # a is still capped at 5: no create there yet
    d = decide(later, fleet(p, {"a": 5, "b": 5}), None, NOW + rules.REFUSAL_HOLD + 1)
    assert d.status["providers"][0]["desired"] == 8 and "refusedAt" not in d.status["providers"][0]
    # back to 8:2, surge-first: 3 more on a (maxSurge 25% of 10), b's 3 extra kept until those are available
    assert by_provider(d.creates) == {"a": 3} and d.deletes == ()


def _obj(p):
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
            "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid, "generation": p.generation},
            "spec": {"replicas": p.spec.replicas, "providers": [{"provider": s.provider, "weight": s.weight}
                                                                for s in p.spec.providers]}}


def test_scale_down_order_not_created_then_unhealthy_then_outdated_then_cooldowns_then_leases_then_oldest():
    p = pool(3, [{"provider": "a"}], strategy={"maxUnavailable": "100%"})
    ms = [
        member(p, "young", age=10, leases=5),
        member(p, "old", age=5000, leases=5),
        member(p, "few-leases", age=10, leases=1),
        member(p, "cooling", age=10, leases=5, cooldowns=2),
        member(p, "outdated", age=10, leases=9, hash_="other"),
        member(p, "failed", age=10, failed=True, ready=False),
        member(p, "pending", age=10, created=False, ready=False),
    ]
    d = decide(p, ms, None, NOW)
    names = [x.name for x in d.deletes]
    assert names == ["pending", "failed", "outdated", "cooling"]  # 7 → 3 (the failed one by remediation)
    d2 = decide(dataclasses.replace(p, spec=dataclasses.replace(p.spec, replicas=1)), ms, None, NOW)
    assert [x.name for x in d2.deletes] == ["pending", "failed", "outdated", "cooling", "few-leases", "old"]


def test_scale_down_keeps_replicas_minus_max_unavailable_available():
    p = pool(5, [{"provider": "a"}], strategy={"maxSurge": 1, "maxUnavailable": 0})
    ms = fleet(p, {"a": 10})
    ms += [member(p, f"n{i}", "a", ready=True, ready_for=0.0) for i in range(2)]  # Ready, not yet available? (minReady 0)
    d = decide(p, ms, None, NOW)
    assert len(d.deletes) == 7 and d.creates == ()


def test_rotation_by_age_is_surge_first():
    p = pool(4, [{"provider": "a"}], maxAgeSeconds=3600, strategy={"maxSurge": 1, "maxUnavailable": 0})
    ms = fleet(p, {"a": 4}, age=4000)  # all past maxAge
    d = decide(p, ms, None, NOW)
    assert len(d.creates) == 1 and d.deletes == ()  # the new one first, nothing deleted
    new = member(p, "new", "a", age=1, ready=False)
    d = decide(p, ms + [new], None, NOW)
    assert d.creates == () and d.deletes == ()  # wait for it to be available
    new = member(p, "new", "a", age=1, ready=True, ready_for=1)
    d = decide(p, ms + [new], None, NOW)
    assert [x.reason for x in d.deletes] == [rules.ROTATION] and len(d.creates) == 1  # one out, the next one in


def test_rotation_with_max_unavailable_deletes_first():
    p = pool(4, [{"provider": "a"}], maxAgeSeconds=3600, strategy={"maxSurge": 0, "maxUnavailable": 1})
    d = decide(p, fleet(p, {"a": 4}, age=4000), None, NOW)
    assert len(d.deletes) == 1 and len(d.creates) == 1


def test_jitter_spreads_the_age_limit_per_member():
    p = pool(40, [{"provider": "a"}], maxAgeSeconds=3600, maxAgeJitterSeconds=3600,
             strategy={"maxSurge": "100%", "maxUnavailable": 0})
    ms = fleet(p, {"a": 40}, age=3600 + 1800)
    d = decide(p, ms, None, NOW)
    assert 5 < len(d.creates) < 35  # some past their own limit, some not
    assert rules.jitter("uid-a-0", 3600) == rules.jitter("uid-a-0", 3600)


def test_a_template_change_rotates_only_the_members_it_changes():
    p = pool(4, [{"provider": "a", "weight": 1}, {"provider": "b", "weight": 1, "placement": {"zone": "z2"}}],
             strategy={"maxSurge": 2})
    ms = fleet(p, {"a": 2}) + [member(p, f"b-{i}", "b", hash_="old-b") for i in range(2)]
    d = decide(p, ms, None, NOW)
    assert by_provider(d.creates) == {"b": 2} and d.deletes == ()
    assert d.status["updatedReplicas"] == 2
    new = [member(p, f"b-new-{i}", "b", age=5, ready_for=5) for i in range(2)]
    d = decide(p, ms + new, None, NOW)  # the new ones available: the old ones go, counted as a template change
    assert sorted((x.name, x.reason) for x in d.deletes) == [("b-0", rules.TEMPLATE), ("b-1", rules.TEMPLATE)]


def test_the_decision_says_max_unavailable_and_whether_remediation_is_blocked():
    p = pool(10, [{"provider": "a"}], strategy={"maxSurge": 0, "maxUnavailable": "25%"},
             remediation={"maxUnhealthy": 1, "unhealthyAfterSeconds": 60})
    d = decide(p, fleet(p, {"a": 10}), None, NOW)
    assert (d.max_unavailable, d.remediation_blocked) == (2, False)  # 25% of 10 rounds down
    sick = [member(p, f"sick-{i}", "a", ready=False, unhealthy_since=NOW - 120) for i in range(2)]
    d = decide(p, fleet(p, {"a": 8}) + sick, None, NOW)
    assert d.remediation_blocked and d.deletes == ()
    rounded = pool(3, [{"provider": "a"}], strategy={"maxSurge": "10%", "maxUnavailable": 0})
    assert decide(rounded, fleet(rounded, {"a": 3}), None, NOW).max_unavailable == 0  # surge rounds up to 1


def test_remediation_replaces_unhealthy_members_within_max_unhealthy():
    p = pool(10, [{"provider": "a"}], remediation={"maxUnhealthy": 2, "unhealthyAfterSeconds": 60})
    ms = fleet(p, {"a": 8})
    ms += [member(p, "sick", "a", ready=False, unhealthy_since=NOW - 120),
           member(p, "just-sick", "a", ready=False, unhealthy_since=NOW - 10)]  # not for unhealthyAfter yet
    d = decide(p, ms, None, NOW)
    assert [(x.name, x.reason) for x in d.deletes] == [("sick", rules.REMEDIATION)]
    assert len(d.creates) == 1
    assert cond(d, "RemediationAllowed")["status"] == "True"


def test_above_max_unhealthy_nothing_is_replaced_not_even_by_rotation():
    p = pool(10, [{"provider": "a"}], maxAgeSeconds=3600, remediation={"maxUnhealthy": "40%"})
    ms = fleet(p, {"a": 4})
    ms += [member(p, f"sick{i}", "a", ready=False, unhealthy_since=NOW - 600, age=9999) for i in range(6)]
    d = decide(p, ms, None, NOW)
    assert d.deletes == () and d.creates == ()
    ra = cond(d, "RemediationAllowed")
    assert (ra["status"], ra["reason"]) == ("False", rules.R_TOO_MANY) and "6 unhealthy" in ra["message"]
    assert d.status["unhealthyReplicas"] == 6


# --- uniqueEgressIP ---------------------------------------------------------------------


def on_ip(p, name, ip, *, age=1000.0, running=True, **kw):
    return member(p, name, "a", age=age, running=running, egress_ip=ip, **kw)


def test_egress_duplicates_are_the_later_created_and_replaced_surge_first():
    p = pool(4, [{"provider": "a"}], uniqueEgressIP=True, strategy={"maxSurge": 1, "maxUnavailable": 0},
             remediation={"maxUnhealthy": 2})
    ms = [on_ip(p, "first", "198.51.100.7", age=3000), on_ip(p, "later", "198.51.100.7", age=2000),
          on_ip(p, "latest", "198.51.100.7", age=1000), on_ip(p, "own", "198.51.100.8", age=500)]
    d = decide(p, ms, None, NOW)
    assert len(d.creates) == 1 and d.deletes == ()  # the new one first, nothing deleted
    assert d.status["updatedReplicas"] == 4  # a duplicate has the current template: it is not "outdated" in status
    assert "2 sharing an egress address" in cond(d, "RemediationAllowed")["message"]
    d = decide(p, ms + [member(p, "new", "a", age=1, ready=False)], None, NOW)
    assert d.creates == () and d.deletes == ()  # wait for it to be available
    d = decide(p, ms + [member(p, "new", "a", age=1, ready_for=1)], None, NOW)
    # one out (of the two duplicates the older, by the scale-down order), the next one in; "first" stays
    assert [(x.name, x.reason) for x in d.deletes] == [("later", rules.EGRESS)] and len(d.creates) == 1


def test_the_egress_rule_is_off_by_default_and_ignores_unknown_and_not_running_members():
    same = "203.0.113.9"
    off = pool(3, [{"provider": "a"}])
    assert decide(off, [on_ip(off, f"m{i}", same, age=100 + i) for i in range(3)], None, NOW).creates == ()
    p = pool(3, [{"provider": "a"}], uniqueEgressIP=True)
    ms = [on_ip(p, "m0", same, age=300), on_ip(p, "m1", same, age=200, running=False),  # Replacing, say
          on_ip(p, "m2", "", age=100), on_ip(p, "m3", "", age=50)]  # no egress known yet: no duplicates
    d = decide(p, ms[:3], None, NOW)
    assert d.creates == () and d.deletes == ()
    d = decide(p, ms, None, NOW)  # one too many: an ordinary scale-down, not an egress replacement
    assert [x.reason for x in d.deletes] == [rules.SCALE_DOWN]


def test_egress_replacement_within_max_unavailable_deletes_first():
    p = pool(3, [{"provider": "a"}], uniqueEgressIP=True, strategy={"maxSurge": 0, "maxUnavailable": 1})
    ms = [on_ip(p, "first", "192.0.2.1", age=300), on_ip(p, "later", "192.0.2.1", age=200), on_ip(p, "x", "192.0.2.2")]
    d = decide(p, ms, None, NOW)
    assert [(x.name, x.reason) for x in d.deletes] == [("later", rules.EGRESS)] and len(d.creates) == 1


def test_egress_duplicates_count_under_the_breaker():
    p = pool(10, [{"provider": "a"}], uniqueEgressIP=True, remediation={"maxUnhealthy": "40%"})
    nat = [on_ip(p, f"m{i}", "192.0.2.50", age=1000 + i) for i in range(10)]  # a provider NATs them all through one
    d = decide(p, nat, None, NOW)
    assert d.deletes == () and d.creates == () and d.remediation_blocked
    ra = cond(d, "RemediationAllowed")
    assert (ra["status"], ra["reason"]) == ("False", rules.R_TOO_MANY) and "9 sharing an egress address" in ra["message"]
    # with the unhealthy: 3 sick + 2 duplicates > 4, so neither is replaced
    ms = [on_ip(p, f"ok{i}", f"192.0.2.{i}") for i in range(5)] + [on_ip(p, "dup1", "192.0.2.0", age=10),
                                                                   on_ip(p, "dup2", "192.0.2.1", age=10)]
    ms += [member(p, f"sick{i}", "a", ready=False, unhealthy_since=NOW - 600) for i in range(3)]
    d = decide(p, ms, None, NOW)
    assert d.deletes == () and d.creates == () and d.remediation_blocked
    d = decide(p, ms[:-1], None, NOW)  # 2 sick + 2 duplicates: within
    assert sorted(x.reason for x in d.deletes) == [rules.REMEDIATION] * 2 and len(d.creates) == 5  # 1 short, 2+2 replaced


def test_autoscale_from_demand_within_min_and_max_with_stabilisation():
    p = pool(2, [{"provider": "a"}], autoscale={"min": 2, "max": 10, "targetUtilization": 50,
                                                "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 300})
    d = decide(p, fleet(p, {"a": 2}), Demand(held=3, refused=3, per_member=2), NOW)
    assert d.scale_to == 6 and d.desired == 6 and len(d.creates) == 4  # 6 / (2 × 50%)
    big = decide(p, fleet(p, {"a": 2}), Demand(held=100, refused=0, per_member=2), NOW)
    assert big.scale_to == 10 and cond(big, "ScalingLimited")["reason"] == rules.R_AT_MAX
    # down: the highest recommendation of the last 300 s holds
    p6 = dataclasses.replace(p, spec=dataclasses.replace(p.spec, replicas=6))
    d = decide(p6, fleet(p, {"a": 6}), Demand(0, 0, 2), NOW + 100, history=[(NOW, 6)])
    assert d.scale_to is None and d.desired == 6
    d = decide(p6, fleet(p, {"a": 6}), Demand(0, 0, 2), NOW + 400, history=[(NOW, 6)])
    assert d.scale_to == 2  # min
    assert cond(d, "ScalingLimited")["reason"] == rules.R_AT_MIN


def test_autoscale_up_window_takes_the_lowest_recommendation():
    p = pool(2, [{"provider": "a"}], autoscale={"min": 1, "max": 10, "targetUtilization": 100,
                                                "scaleUpStabilizationSeconds": 60})
    d = decide(p, fleet(p, {"a": 2}), Demand(8, 0, 1), NOW, history=[(NOW - 30, 2)])
    assert d.scale_to is None  # a burst: 2 was recommended 30 s ago
    d = decide(p, fleet(p, {"a": 2}), Demand(8, 0, 1), NOW, history=[(NOW - 90, 2), (NOW - 30, 8)])
    assert d.scale_to == 8


def test_no_demand_no_autoscaling():
    p = pool(3, [{"provider": "a"}], autoscale={"min": 1, "max": 10})
    assert decide(p, fleet(p, {"a": 3}), None, NOW).scale_to is None


def test_available_and_progressing_conditions():
    p = pool(4, [{"provider": "a"}], minReadySeconds=300, progressDeadlineSeconds=60)
    ms = fleet(p, {"a": 2}) + [member(p, f"n{i}", "a", ready_for=10) for i in range(2)]
    d = decide(p, ms, None, NOW)
    assert d.status["readyReplicas"] == 4 and d.status["availableReplicas"] == 2
    assert cond(d, "Available")["status"] == "False"  # maxUnavailable 0: 4 wanted
    assert (cond(d, "Progressing")["status"], cond(d, "Progressing")["reason"]) == ("True", rules.R_UPDATING)
    stuck = dataclasses.replace(p, status=parse_pool({**_obj(p), "spec": {**_obj(p)["spec"], "replicas": 4},
                                                      "status": d.status}).status)
    d2 = decide(stuck, ms, None, NOW + 61)
    assert (cond(d2, "Progressing")["status"], cond(d2, "Progressing")["reason"]) == ("False", rules.R_DEADLINE)
    done = decide(p, fleet(p, {"a": 4}), None, NOW)
    assert (cond(done, "Progressing")["reason"], cond(done, "Available")["status"]) == (rules.R_COMPLETE, "True")


def test_a_member_of_a_provider_no_longer_listed_is_rotated_out():
    p = pool(2, [{"provider": "a"}], strategy={"maxSurge": 1})
    ms = fleet(p, {"a": 2}) + [member(p, "gone-0", "gone", hash_="x")]
    d = decide(p, ms, None, NOW)
    assert [(x.name, x.reason) for x in d.deletes] == [("gone-0", rules.TEMPLATE)]


def test_a_deleting_pool_does_nothing():
    p = dataclasses.replace(pool(3), deleting=True)
    d = decide(p, [], None, NOW)
    assert (d.creates, d.deletes, d.status) == ((), (), {})


def test_members_being_deleted_do_not_count():
    p = pool(2, [{"provider": "a"}])
    ms = fleet(p, {"a": 2}) + [dataclasses.replace(member(p, "x"), deleting=True)]
    d = decide(p, ms, None, NOW)
    assert d.status["replicas"] == 2 and d.deletes == () and d.creates == ()


@pytest.mark.parametrize(("spec", "words"), [
    ({"providers": []}, "spec.providers"),
    ({"strategy": {"maxSurge": 0, "maxUnavailable": "0%"}}, "cannot both be 0"),
    ({"strategy": {"maxSurge": "120%"}}, "percent"),
    ({"replicas": True}, "spec.replicas"),
    ({"autoscale": {"min": 3, "max": 1}}, "min must not exceed max"),
    ({"template": {"port": 0}}, "spec.template.port"),
    ({"template": {"bogus": 1}}, "spec.template: unknown field 'bogus'"),
    ({"uniqueEgressIP": "yes"}, "spec.uniqueEgressIP: must be true or false"),
])
def test_bad_pools_are_refused_with_the_field(spec, words):
    obj = _obj(pool(1))
    obj["spec"].update(spec)
    with pytest.raises(PoolError, match=words.replace("(", r"\(")):
        parse_pool(obj)
