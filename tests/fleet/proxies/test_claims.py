"""Namespace claims (`fleet.proxies.claims`): the pure judgement of a claim
Lease, one case per row; then `Claims` through the real kubernetes client
against the HTTP-level fake API (the real API server runs the same in
tests/integration/test_apiserver_scoping.py): two installations, an
overlap refused at start with the namespaces named, a lapsed claim taken,
`*` claiming on first sight."""

from __future__ import annotations

import pytest

from fleet import kube
from fleet.proxies import claims as c
from fleet.proxies.claims import CREATE, HELD, KEEP, RENEW, TAKE, Claims, Judgement, ScopeConflict, judge, micro_time
from fleet.settings import Settings

NOW = 1_800_000_000.0


def lease(holder: str | None = "b", renewed: float | None = NOW - 5, duration: object = 60) -> dict:
    spec: dict = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = micro_time(renewed)
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"name": "fleet-proxies", "resourceVersion": "7"}, "spec": spec}


@pytest.mark.parametrize(("case", "obj", "want"), [
    ("no claim yet", None, Judgement(CREATE)),
    ("ours, renewed just now", lease("a", NOW - 2), Judgement(KEEP, "a", 2.0)),
    ("ours, due for renewal", lease("a", NOW - 20), Judgement(RENEW, "a", 20.0)),
    ("ours, lapsed: renew it (no one else took it)", lease("a", NOW - 600), Judgement(RENEW, "a", 600.0)),
    ("ours without a renewal time", lease("a", None), Judgement(RENEW, "a", None)),
    ("another's, live", lease("b", NOW - 5), Judgement(HELD, "b", 5.0)),
    ("another's, renewed in the future (skewed clock): live", lease("b", NOW + 30), Judgement(HELD, "b", 0.0)),
    ("another's, lapsed", lease("b", NOW - 61), Judgement(TAKE, "b", 61.0)),
    ("another's at exactly its duration: lapsed", lease("b", NOW - 60), Judgement(TAKE, "b", 60.0)),
    ("another's without a renewal time: nothing vouches for it", lease("b", None), Judgement(TAKE, "b", None)),
    ("another's without a duration", lease("b", NOW - 1, None), Judgement(TAKE, "b", 1.0)),
    ("another's with a duration that is no number", lease("b", NOW - 1, "60"), Judgement(TAKE, "b", 1.0)),
    ("released (no holder)", lease(None, NOW - 1), Judgement(TAKE, "", 1.0)),
    ("no spec at all", {"metadata": {}}, Judgement(TAKE, "", None)),
])
def test_judge(case, obj, want):
    assert judge(obj, "a", NOW) == want, case


def test_the_conflict_message_names_each_namespace_its_holder_and_the_way_out():
    msg = c.conflict_message("a", {"team": Judgement(HELD, "c", 40.0), "crawl": Judgement(HELD, "b", 3.2)})
    assert "installation 'a' cannot serve the Proxies of 2 namespace(s)" in msg
    assert "crawl (installation 'b', renewed 3s ago), team (installation 'c', renewed 40s ago)" in msg
    assert "--proxy-namespaces" in msg and "kubectl -n NAMESPACE delete lease fleet-proxies" in msg


# --- against the fake API ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def make(kubeapi):
    clock = Clock()

    def build(installation: str, *scope: str) -> Claims:
        writer, _ = kube.connect(Settings(kubeconfig=kubeapi.kubeconfig_path, installation=installation))
        assert writer is not None
        return Claims(writer, installation, scope, clock=clock)

    build.clock = clock
    return build


def holder(kubeapi, ns: str) -> str:
    return kubeapi.objects[f"{ns}/fleet-proxies"]["spec"].get("holderIdentity", "")


def test_disjoint_installations_both_start_and_each_serves_its_own(make, kubeapi):
    a, b = make("a", "crawl-a"), make("b", "crawl-b", "shared-b")
    a.acquire()
    b.acquire()
    assert (a.held(), b.held()) == (["crawl-a"], ["crawl-b", "shared-b"])
    assert (holder(kubeapi, "crawl-a"), holder(kubeapi, "crawl-b")) == ("a", "b")
    assert a.allowed("crawl-a") and not a.allowed("crawl-b") and not b.allowed("crawl-a")
    lease_obj = kubeapi.objects["crawl-a/fleet-proxies"]
    assert lease_obj["metadata"]["labels"] == kube.labels_for("a")
    assert lease_obj["spec"]["leaseDurationSeconds"] == c.CLAIM_SECONDS


def test_an_overlap_is_refused_at_start_naming_it_and_writing_nothing(make, kubeapi):
    make("a", "crawl", "team").acquire()
    writes = len(kubeapi.writes())
    b = make("b", "other", "crawl")
    with pytest.raises(ScopeConflict, match=r"crawl \(installation 'a', renewed 0s ago\)") as err:
        b.acquire()
    named = str(err.value).split("serves: ", 1)[1].split(". Two", 1)[0]
    assert named == "crawl (installation 'a', renewed 0s ago)"  # only the overlap
    assert len(kubeapi.writes()) == writes  # judged first: nothing claimed, not even `other`
    assert "other/fleet-proxies" not in kubeapi.objects and b.held() == []


def test_a_restart_of_the_same_installation_keeps_its_claims(make, kubeapi):
    make("a", "crawl").acquire()
    again = make("a", "crawl")
    again.acquire()  # the same holder: no conflict
    assert again.held() == ["crawl"] and holder(kubeapi, "crawl") == "a"


def test_a_claim_not_renewed_lapses_and_is_taken_and_the_old_holder_stops(make, kubeapi):
    a = make("a", "crawl")
    a.acquire()
    make.clock.t += c.CLAIM_SECONDS + 1  # a stopped renewing (its controller gone) for longer than the duration
    b = make("b", "crawl")
    b.acquire()
    assert holder(kubeapi, "crawl") == "b" and b.allowed("crawl")
    assert not a.allowed("crawl")  # its own claim lapsed: it cannot vouch for it any more
    a.renew()  # back: finds b holding it, and leaves it alone
    assert a.held() == [] and not a.allowed("crawl") and holder(kubeapi, "crawl") == "b"


def test_renewal_moves_the_renew_time_only_when_due(make, kubeapi):
    a = make("a", "crawl")
    a.acquire()
    first = kubeapi.objects["crawl/fleet-proxies"]["spec"]["renewTime"]
    make.clock.t += 5
    a.renew()
    assert kubeapi.objects["crawl/fleet-proxies"]["spec"]["renewTime"] == first  # fresh: no write
    make.clock.t += c.RENEW_EVERY
    a.renew()
    assert kubeapi.objects["crawl/fleet-proxies"]["spec"]["renewTime"] == micro_time(make.clock.t)


def test_every_namespace_claims_on_first_sight_and_leaves_anothers_alone(make, kubeapi):
    make("b", "team-b").acquire()
    wide = make("w", "*")
    with pytest.raises(ScopeConflict, match="team-b"):
        wide.acquire()  # b serves a namespace already: `*` would overlap it
    make.clock.t += c.CLAIM_SECONDS + 1  # b's claim lapses (b stopped)
    wide.acquire()
    assert wide.allowed("crawl") and holder(kubeapi, "crawl") == "w"  # claimed when first met
    late = make("c", "team-c")
    late.acquire()  # a namespace `*` has not met yet: c may claim it
    assert not wide.allowed("team-c")  # ...and `*` leaves it alone from then on
    with pytest.raises(ScopeConflict, match=r"crawl \(installation 'w'"):
        make("d", "crawl").acquire()  # one `*` met is refused to others


def test_a_race_lost_at_start_releases_what_was_claimed(make, kubeapi):
    """Two installations judged a namespace free at once; the one whose create
    lost refuses and gives back the namespaces it did claim."""
    a = make("a", "x", "contested")
    real_read = a.writer.read
    reads = {"n": 0}

    def read(resource, ns, name):
        out = real_read(resource, ns, name)
        if ns == "contested":
            reads["n"] += 1
            if reads["n"] == 2:  # between a's judgement and its create, b claims it
                make("b", "contested").acquire()
                return None
        return out

    a.writer.read = read
    with pytest.raises(ScopeConflict, match="contested"):
        a.acquire()
    assert holder(kubeapi, "contested") == "b"
    assert holder(kubeapi, "x") == "" and a.held() == []  # released: another installation may take it at once


# --- the cluster source, scoped (fleet.proxies.cluster) --------------------------------------------


def px(name: str, ns: str) -> dict:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": name, "namespace": ns},
            "spec": {"provider": "edge"}}


def run_cluster(kubeapi, installation: str, *scope: str):
    import threading

    from fleet.proxies.cluster import Cluster

    writer, _ = kube.connect(Settings(kubeconfig=kubeapi.kubeconfig_path, installation=installation))
    claims = Claims(writer, installation, scope)
    cl = Cluster(writer, namespaces=scope, claims=claims)
    cl.claim()
    stop, changed = threading.Event(), []
    t = threading.Thread(target=cl.run, args=(stop, changed.extend), daemon=True)
    t.start()
    return cl, stop, t, changed


def wait(cond, what: str, timeout: float = 10.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def test_the_cluster_source_watches_only_its_namespaces_one_watch_each(kubeapi):
    for ns in ("a", "b", "other"):
        kubeapi.add(px("p", ns), plural="proxies")
    cl, stop, t, changed = run_cluster(kubeapi, "inst", "a", "b")
    try:
        wait(cl.ready, "both namespaces listed")
        assert cl.keys() == ["a/p", "b/p"] and cl.get("other/p") is None
        kubeapi.add(px("q", "other"), plural="proxies")
        kubeapi.add(px("q", "b"), plural="proxies")
        wait(lambda: "b/q" in list(cl.keys()), "b/q seen")
        served = cl.keys()  # a list: what the reconciler resyncs
        assert "other/q" not in served and "other/q" not in changed
    finally:
        stop.set()
        t.join(10)
    watches = {r.path for r in kubeapi.requests if r.query.get("watch")}
    assert watches == {"/apis/crawl.example.com/v1alpha1/namespaces/a/proxies",
                       "/apis/crawl.example.com/v1alpha1/namespaces/b/proxies"}  # never cluster-wide


def test_with_every_namespace_a_namespace_another_installation_serves_is_invisible(kubeapi):
    kubeapi.add(px("p", "free"), plural="proxies")
    cl, stop, t, _ = run_cluster(kubeapi, "wide", "*")
    try:
        wait(cl.ready, "listed")
        assert cl.get("free/p") is not None  # claimed on first sight
        make_b = Claims(cl.writer, "b", ("theirs2",))
        make_b.acquire()
        kubeapi.add(px("p", "theirs2"), plural="proxies")
        wait(lambda: "theirs2/p" in cl._cache, "theirs2/p in the watch cache")
        served = cl.keys()
        assert cl.get("theirs2/p") is None and "theirs2/p" not in served  # b's: never reconciled here
        assert holder(kubeapi, "free") == "wide" and holder(kubeapi, "theirs2") == "b"
    finally:
        stop.set()
        t.join(10)
