"""The generic writer (`fleet.kube.Writer`) against the HTTP-level fake API,
through the real kubernetes client: the same code for a cluster-scoped and
a namespaced kind, the feature's `decide` applied as it answers. The
ProviderHealth behaviour (ownership, RBAC, CRD errors, field manager) is in
tests/fleet/health/test_ownership.py and test_recording.py."""

import json
import logging

import pytest
from kubernetes import client

from fleet.kube import (
    FIELD_MANAGER,
    FOREIGN,
    PATCHED,
    PROVIDER_HEALTH,
    UNCHANGED,
    ClusterAccessError,
    Patch,
    Resource,
    Skip,
    WriteConflict,
    Writer,
    labels_for,
)
from providers.kubernetes.client import load_configuration

# a namespaced kind for the tests only (fleet's own are pinned to deploy/crd/)
WIDGET = Resource("test.example.com", "v1", "widgets", "Widget", namespaced=True)
WIDGETS = "/apis/test.example.com/v1/namespaces/{ns}/widgets"


@pytest.fixture
def writer(kubeapi):
    return Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), "blue")


def widget(name, ns, installation="blue", **status):
    return {"apiVersion": "test.example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns, "labels": labels_for(installation)},
            **({"status": status} if status else {})}


def set_phase(phase):
    """A decide: patch status.phase unless it already is `phase`."""

    def decide(current):
        if (current.get("status") or {}).get("phase") == phase:
            return Skip(UNCHANGED)
        return Patch({"phase": phase})

    return decide


def test_a_namespaced_object_is_created_in_its_namespace_and_patched(writer, kubeapi):
    assert writer.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == PATCHED
    base = WIDGETS.format(ns="ns1")
    assert [(r.method, r.path) for r in kubeapi.requests] == [
        ("GET", f"{base}/w1"), ("POST", base), ("PATCH", f"{base}/w1/status"),
    ]
    obj = kubeapi.objects["ns1/w1"]
    assert (obj["apiVersion"], obj["kind"]) == ("test.example.com/v1", "Widget")
    assert obj["metadata"]["namespace"] == "ns1" and obj["metadata"]["labels"] == labels_for("blue")
    assert obj["status"] == {"phase": "Ready"}
    assert {r.field_manager for r in kubeapi.writes()} == {FIELD_MANAGER}
    patch = kubeapi.requests[-1]
    assert patch.content_type == "application/merge-patch+json" and patch.body["metadata"]["resourceVersion"]

    # the same name in another namespace is another object
    assert writer.publish(WIDGET, "w1", "ns2", set_phase("Failed")) == PATCHED
    assert (kubeapi.objects["ns1/w1"]["status"], kubeapi.objects["ns2/w1"]["status"]) == ({"phase": "Ready"}, {"phase": "Failed"})
    assert writer.writes == 4


def test_decide_sees_the_object_as_read_and_its_skip_is_the_outcome(writer, kubeapi):
    kubeapi.add(widget("w1", "ns1", phase="Ready"), plural="widgets")
    seen = []

    def decide(current):
        seen.append(current)
        return Skip("because")

    assert writer.publish(WIDGET, "w1", "ns1", decide) == "because"
    (current,) = seen
    assert current["metadata"]["name"] == "w1" and current["status"] == {"phase": "Ready"}
    assert writer.publish(WIDGET, "w1", "ns1", lambda current: Patch({})) == UNCHANGED  # an empty patch is not sent
    assert kubeapi.writes() == []


def test_a_conflict_rereads_and_decides_again(writer, kubeapi):
    kubeapi.add(widget("w1", "ns1", phase="Pending"), plural="widgets")
    kubeapi.conflicts = 2
    seen = []

    def decide(current):
        seen.append(current["metadata"]["resourceVersion"])
        return Patch({"phase": "Ready"})

    assert writer.publish(WIDGET, "w1", "ns1", decide) == PATCHED
    assert len(seen) == 3
    assert kubeapi.objects["ns1/w1"]["status"] == {"phase": "Ready"}
    kubeapi.conflicts = 10
    with pytest.raises(WriteConflict, match="Widget ns1/w1: still conflicting after 5 attempts"):
        writer.publish(WIDGET, "w1", "ns1", set_phase("Failed"))


def test_another_installations_object_is_left_alone(writer, kubeapi, caplog):
    caplog.set_level(logging.DEBUG, logger="fleet.kube.writer")
    kubeapi.add(widget("w1", "ns1", installation="green"), plural="widgets")
    assert writer.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == FOREIGN
    assert writer.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == FOREIGN
    assert kubeapi.writes() == []
    first, again = [r for r in caplog.records if r.name == "fleet.kube.writer"]
    assert (first.levelno, again.levelno) == (logging.WARNING, logging.DEBUG)
    assert first.getMessage() == "Widget not ours: left alone"
    assert first.fields == {"name": "w1", "namespace": "ns1", "owner": "installation 'green'", "installation": "blue"}


def test_cleanup_in_a_namespace_deletes_only_our_unkept_objects_of_that_kind(writer, kubeapi):
    for name, ns, inst in (("keep", "ns1", "blue"), ("old", "ns1", "blue"), ("theirs", "ns1", "green"), ("old", "ns2", "blue")):
        kubeapi.add(widget(name, ns, installation=inst), plural="widgets")
    kubeapi.add({"metadata": {"name": "old", "labels": labels_for("blue")}})  # a ProviderHealth of the same name
    assert writer.cleanup(WIDGET, {"keep"}, "ns1") == ["old"]
    assert sorted(kubeapi.objects) == ["ns1/keep", "ns1/theirs", "ns2/old", "old"]
    assert [r.path for r in kubeapi.requests if r.method == "DELETE"] == [f"{WIDGETS.format(ns='ns1')}/old"]


def test_the_cluster_scoped_kind_goes_through_the_same_code(writer, kubeapi):
    kubeapi.add(widget("kvm-home", "ns1"), plural="widgets")  # same name, other kind: not seen
    assert writer.publish(PROVIDER_HEALTH, "kvm-home", None, lambda current: Patch({"type": "fake"})) == PATCHED
    base = "/apis/crawl.example.com/v1alpha1/providerhealths"
    assert [(r.method, r.path) for r in kubeapi.requests] == [("GET", f"{base}/kvm-home"), ("POST", base),
                                                              ("PATCH", f"{base}/kvm-home/status")]
    assert "namespace" not in kubeapi.objects["kvm-home"]["metadata"]
    assert writer.cleanup(PROVIDER_HEALTH, set()) == ["kvm-home"]
    assert sorted(kubeapi.objects) == ["ns1/kvm-home"]


@pytest.mark.parametrize("resource, namespace", [(WIDGET, None), (WIDGET, ""), (PROVIDER_HEALTH, "ns1")])
def test_the_namespace_must_fit_the_scope(writer, kubeapi, resource, namespace):
    with pytest.raises(ValueError):
        writer.publish(resource, "x", namespace, set_phase("Ready"))
    with pytest.raises(ValueError):
        writer.cleanup(resource, set(), namespace)
    assert kubeapi.requests == []


@pytest.mark.parametrize("verb, resource, act", [
    ("get", "widgets", lambda w: w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))),
    ("create", "widgets", lambda w: w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))),
    ("patch", "widgets/status", lambda w: w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))),
    ("list", "widgets", lambda w: w.cleanup(WIDGET, set(), "ns1")),
])
def test_a_refused_namespaced_request_names_verb_resource_and_namespace(writer, kubeapi, verb, resource, act):
    kubeapi.deny(verb, resource)
    with pytest.raises(ClusterAccessError) as err:
        act(writer)
    e = err.value
    assert (e.verb, e.resource, e.status) == (verb, resource, 403)
    assert str(e).startswith(f"cannot {verb} {resource.replace('widgets', 'widgets.test.example.com', 1)}")
    assert "in namespace 'ns1'" in str(e)
    assert f"needs verb '{verb}' on resource '{resource}' in API group 'test.example.com'" in str(e)
    assert 'in the namespace "ns1"' in str(e)  # the API server's own words are kept


def test_a_missing_namespaced_crd_names_the_kind(writer, kubeapi):
    kubeapi.remove_crd("widgets")
    with pytest.raises(ClusterAccessError, match=r"does not serve widgets.test.example.com/v1 \(404\). Is the Widget CRD installed\?"):
        writer.publish(WIDGET, "w1", "ns1", set_phase("Ready"))


# --- the status cache (issue 11): the object as last written, shared in Redis ---------


@pytest.fixture
def redis_client():
    import fakeredis

    return fakeredis.FakeRedis()


@pytest.fixture
def cached(kubeapi, redis_client):
    from fleet.store import Store

    def make():
        return Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), "blue", Store(redis_client).statuses)

    return make


def requests(kubeapi, since=0):
    return [r.method for r in kubeapi.requests[since:]]


def test_with_the_cache_an_unchanged_status_costs_no_request(cached, kubeapi):
    w = cached()
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == PATCHED
    assert requests(kubeapi) == ["GET", "POST", "PATCH"]  # the first time: nothing cached
    n = len(kubeapi.requests)
    seen = []

    def decide(current):
        seen.append(current)
        return set_phase("Ready")(current)

    for _ in range(20):
        assert w.publish(WIDGET, "w1", "ns1", decide) == UNCHANGED
    assert requests(kubeapi, n) == [], "steady state: no GET, no PATCH"
    assert seen[0]["status"] == {"phase": "Ready"} and seen[0]["metadata"]["name"] == "w1"
    assert seen[0]["metadata"]["resourceVersion"] == kubeapi.objects["ns1/w1"]["metadata"]["resourceVersion"]


def test_with_the_cache_a_change_is_one_patch_with_the_cached_resource_version(cached, kubeapi):
    w = cached()
    w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))
    for phase in ("Failed", "Ready", "Failed"):
        n = len(kubeapi.requests)
        rv = kubeapi.objects["ns1/w1"]["metadata"]["resourceVersion"]
        assert w.publish(WIDGET, "w1", "ns1", set_phase(phase)) == PATCHED
        assert requests(kubeapi, n) == ["PATCH"]
        assert kubeapi.requests[-1].body["metadata"]["resourceVersion"] == rv
        assert kubeapi.objects["ns1/w1"]["status"] == {"phase": phase}


def test_with_the_cache_a_foreign_write_costs_one_conflict_and_one_get(cached, kubeapi):
    w = cached()
    w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))
    kubeapi.add(widget("w1", "ns1", phase="Pending"), plural="widgets")  # someone else wrote: a new resourceVersion
    n = len(kubeapi.requests)
    seen = []

    def decide(current):
        seen.append(current["status"])
        return Patch({"phase": "Failed"})

    assert w.publish(WIDGET, "w1", "ns1", decide) == PATCHED
    assert requests(kubeapi, n) == ["PATCH", "GET", "PATCH"]
    assert seen == [{"phase": "Ready"}, {"phase": "Pending"}], "decided again on the object as re-read"
    assert kubeapi.objects["ns1/w1"]["status"] == {"phase": "Failed"}
    n = len(kubeapi.requests)
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Failed")) == UNCHANGED
    assert requests(kubeapi, n) == []


def test_with_the_cache_a_deleted_object_is_recreated_on_the_next_change(cached, kubeapi):
    w = cached()
    w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))
    del kubeapi.objects["ns1/w1"]
    n = len(kubeapi.requests)
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Failed")) == PATCHED
    assert requests(kubeapi, n) == ["PATCH", "GET", "POST", "PATCH"]
    assert kubeapi.objects["ns1/w1"]["status"] == {"phase": "Failed"}
    assert kubeapi.objects["ns1/w1"]["metadata"]["labels"] == labels_for("blue")


def test_with_the_cache_an_expired_entry_is_read_again(kubeapi, redis_client):
    from fleet.store import Store, keys

    w = Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), "blue", Store(redis_client).statuses,
               cache_ttl=30)
    w.publish(WIDGET, "w1", "ns1", set_phase("Ready"))
    key = keys.status("widgets", "ns1", "w1")
    assert 0 < redis_client.pttl(key) <= 30_000
    redis_client.delete(key)  # as if expired
    n = len(kubeapi.requests)
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == UNCHANGED
    assert requests(kubeapi, n) == ["GET"]
    assert redis_client.exists(key)


def test_with_the_cache_two_writers_sharing_redis_stay_correct(cached, kubeapi):
    a, b = cached(), cached()
    assert a.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == PATCHED
    n = len(kubeapi.requests)
    assert b.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == UNCHANGED  # b sees what a wrote
    assert b.publish(WIDGET, "w1", "ns1", set_phase("Failed")) == PATCHED
    assert a.publish(WIDGET, "w1", "ns1", set_phase("Failed")) == UNCHANGED  # and a what b wrote
    assert requests(kubeapi, n) == ["PATCH"]
    # a replica that read an older object does not put the cache back in time
    old = {"metadata": {"resourceVersion": "1"}, "status": {"phase": "Ready"}}
    a._remember(WIDGET, "w1", "ns1", old)
    assert b.publish(WIDGET, "w1", "ns1", set_phase("Failed")) == UNCHANGED
    assert requests(kubeapi, n) == ["PATCH"]
    # both patch from the same cached version: the second conflicts, re-reads and decides again
    kubeapi_rv = kubeapi.objects["ns1/w1"]["metadata"]["resourceVersion"]
    cache_a = a._cached(WIDGET, "w1", "ns1")
    assert cache_a["metadata"]["resourceVersion"] == kubeapi_rv
    assert a.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == PATCHED
    a.cache.drop("widgets", "ns1", "w1")
    stale = json.dumps({"resourceVersion": kubeapi_rv, "status": {"phase": "Failed"}})  # b's view before a's patch
    a.cache.put("widgets", "ns1", "w1", kubeapi_rv, stale, 60)
    n = len(kubeapi.requests)
    assert b.publish(WIDGET, "w1", "ns1", set_phase("Pending")) == PATCHED
    assert requests(kubeapi, n) == ["PATCH", "GET", "PATCH"]
    assert kubeapi.objects["ns1/w1"]["status"] == {"phase": "Pending"}


def test_with_the_cache_a_foreign_object_is_never_cached(cached, kubeapi, redis_client):
    from fleet.store import keys

    kubeapi.add(widget("w1", "ns1", installation="green"), plural="widgets")
    w = cached()
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == FOREIGN
    assert w.publish(WIDGET, "w1", "ns1", set_phase("Ready")) == FOREIGN
    assert requests(kubeapi) == ["GET", "GET"] and kubeapi.writes() == []
    assert not redis_client.exists(keys.status("widgets", "ns1", "w1"))
    # ours, then taken over by another installation: the cached version conflicts, the GET finds it foreign
    kubeapi.add(widget("w2", "ns1"), plural="widgets")
    assert w.publish(WIDGET, "w2", "ns1", set_phase("Ready")) == PATCHED
    kubeapi.add(widget("w2", "ns1", installation="green"), plural="widgets")
    assert w.publish(WIDGET, "w2", "ns1", set_phase("Failed")) == FOREIGN
    assert "status" not in kubeapi.objects["ns1/w2"], "nothing written over the other installation's object"
    assert not redis_client.exists(keys.status("widgets", "ns1", "w2"))


def test_with_the_cache_cleanup_drops_the_entries_of_what_it_deleted(cached, kubeapi, redis_client):
    from fleet.store import keys

    w = cached()
    w.publish(WIDGET, "old", "ns1", set_phase("Ready"))
    assert redis_client.exists(keys.status("widgets", "ns1", "old"))
    assert w.cleanup(WIDGET, set(), "ns1") == ["old"]
    assert not redis_client.exists(keys.status("widgets", "ns1", "old"))
    assert w.publish(WIDGET, "old", "ns1", set_phase("Ready")) == PATCHED  # recreated, not skipped as unchanged
    assert "ns1/old" in kubeapi.objects


# --- a controller's writes on objects users own (issue 12: Proxy) ------------------------

from fleet.kube import (  # noqa: E402
    MAX_SECRET_VALUE,
    PROXY,
    ApiUnavailable,
    Conflict,
    Expired,
    NotFound,
    Rejected,
    SecretError,
    list_page,
)
from fleet.proxies.model import FINALIZER  # noqa: E402

PROXIES = "/apis/crawl.example.com/v1alpha1/namespaces/{ns}/proxies"


def proxy(name="px1", ns="team-a", **spec):
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": name, "namespace": ns},
            "spec": {"provider": "kvm-home", **spec}}


@pytest.fixture
def api(kubeapi):
    return client.ApiClient(load_configuration(kubeapi.kubeconfig_path))


def test_the_fake_assigns_identity_on_create_and_bumps_generation_on_spec_changes_only(api, kubeapi):
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "crawl.example.com", "v1alpha1", "team-a", "proxies", proxy(port=3128))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"] and meta["generation"] == 1
    w = Writer(api, "blue")
    st = w.patch_status(PROXY, "team-a", "px1", meta["resourceVersion"], {"phase": "Pending"})
    assert st["metadata"]["generation"] == 1 and int(st["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    fin = w.patch_finalizers(PROXY, "team-a", "px1", st["metadata"]["resourceVersion"], [FINALIZER])
    assert fin["metadata"]["generation"] == 1 and fin["metadata"]["finalizers"] == [FINALIZER]
    assert fin["metadata"]["uid"] == meta["uid"]
    edited = kubeapi.add({**kubeapi.objects["team-a/px1"], "spec": {"provider": "kvm-home", "port": 8080}}, plural="proxies")
    assert edited["metadata"]["generation"] == 2 and edited["status"] == {"phase": "Pending"}
    # a recreated object of the same name is another object
    kubeapi.objects.pop("team-a/px1")
    again = kubeapi.add(proxy(), plural="proxies")
    assert again["metadata"]["uid"] != meta["uid"] and again["metadata"]["generation"] == 1


def test_patch_status_writes_with_the_resource_version_and_returns_the_object(api, kubeapi):
    rv = kubeapi.add({**proxy(), "status": {"phase": "Pending", "ip": ""}}, plural="proxies")["metadata"]["resourceVersion"]
    w = Writer(api, "blue")
    out = w.patch_status(PROXY, "team-a", "px1", rv, {"phase": "Running", "ip": "10.0.0.7", "message": None})
    assert out["status"] == {"phase": "Running", "ip": "10.0.0.7"} == kubeapi.objects["team-a/px1"]["status"]
    assert out["spec"] == {"provider": "kvm-home", "port": 3128}  # the object (defaulted, as the server keeps it), not only its status
    req = kubeapi.requests[-1]
    assert (req.method, req.path) == ("PATCH", PROXIES.format(ns="team-a") + "/px1/status")
    assert req.content_type == "application/merge-patch+json" and req.field_manager == FIELD_MANAGER
    assert req.body == {"metadata": {"resourceVersion": rv},
                        "status": {"phase": "Running", "ip": "10.0.0.7", "message": None}}
    assert w.writes == 1


def test_patch_status_raises_conflict_on_a_stale_resource_version_and_not_found_when_gone(api, kubeapi):
    rv = kubeapi.add(proxy(), plural="proxies")["metadata"]["resourceVersion"]
    kubeapi.add({**proxy(), "metadata": {**proxy()["metadata"], "labels": {"x": "y"}}}, plural="proxies")  # someone else wrote
    w = Writer(api, "blue")
    with pytest.raises(Conflict, match="patch Proxy/status team-a/px1: conflict"):
        w.patch_status(PROXY, "team-a", "px1", rv, {"phase": "Running"})
    with pytest.raises(Conflict):
        w.patch_finalizers(PROXY, "team-a", "px1", rv, [FINALIZER])
    assert "status" not in kubeapi.objects["team-a/px1"] and "finalizers" not in kubeapi.objects["team-a/px1"]["metadata"]
    with pytest.raises(NotFound, match="team-b/px1"):
        w.patch_status(PROXY, "team-b", "px1", rv, {"phase": "Running"})
    with pytest.raises(NotFound):
        w.patch_finalizers(PROXY, "team-b", "px1", rv, [])
    assert w.writes == 0


def test_patch_finalizers_sets_the_list_and_leaves_spec_and_status_alone(api, kubeapi):
    obj = kubeapi.add({**proxy(), "metadata": {**proxy()["metadata"], "finalizers": ["other.example.com/keep"]},
                       "status": {"phase": "Pending"}}, plural="proxies")
    w = Writer(api, "blue")
    out = w.patch_finalizers(PROXY, "team-a", "px1", obj["metadata"]["resourceVersion"], ["other.example.com/keep", FINALIZER])
    assert out["metadata"]["finalizers"] == ["other.example.com/keep", FINALIZER]
    assert out["spec"] == obj["spec"] and out["status"] == {"phase": "Pending"}
    req = kubeapi.requests[-1]
    assert (req.method, req.path, req.content_type) == ("PATCH", PROXIES.format(ns="team-a") + "/px1", "application/merge-patch+json")
    assert req.body == {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                                     "finalizers": ["other.example.com/keep", FINALIZER]}}
    assert req.field_manager == FIELD_MANAGER


def test_delete_with_a_finalizer_waits_for_it_then_the_object_goes(api, kubeapi):
    w = Writer(api, "blue")
    rv = kubeapi.add(proxy(), plural="proxies")["metadata"]["resourceVersion"]
    rv = w.patch_finalizers(PROXY, "team-a", "px1", rv, [FINALIZER])["metadata"]["resourceVersion"]
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object("crawl.example.com", "v1alpha1", "team-a", "proxies", "px1")
    marked = kubeapi.objects["team-a/px1"]
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["generation"] == 2
    assert marked["metadata"]["resourceVersion"] != rv
    with pytest.raises(Conflict):  # the deletion moved it
        w.patch_finalizers(PROXY, "team-a", "px1", rv, [])
    with pytest.raises(Rejected, match="no new finalizers"):
        w.patch_finalizers(PROXY, "team-a", "px1", marked["metadata"]["resourceVersion"], [FINALIZER, "late.example.com/x"])
    status = w.patch_status(PROXY, "team-a", "px1", marked["metadata"]["resourceVersion"], {"phase": "Deleting"})
    last = w.patch_finalizers(PROXY, "team-a", "px1", status["metadata"]["resourceVersion"], [])
    assert "team-a/px1" not in kubeapi.objects
    assert last["status"] == {"phase": "Deleting"} and not last["metadata"].get("finalizers")
    with pytest.raises(NotFound):
        w.patch_status(PROXY, "team-a", "px1", last["metadata"]["resourceVersion"], {"phase": "Deleting"})
    # without finalizers a DELETE removes it at once
    kubeapi.add(proxy("px2"), plural="proxies")
    custom.delete_namespaced_custom_object("crawl.example.com", "v1alpha1", "team-a", "proxies", "px2")
    assert "team-a/px2" not in kubeapi.objects


def test_an_unchanged_patch_keeps_the_resource_version(api, kubeapi):
    rv = kubeapi.add({**proxy(), "status": {"phase": "Running"}}, plural="proxies")["metadata"]["resourceVersion"]
    w = Writer(api, "blue")
    assert w.patch_status(PROXY, "team-a", "px1", rv, {"phase": "Running"})["metadata"]["resourceVersion"] == rv
    assert w.patch_finalizers(PROXY, "team-a", "px1", rv, [])["metadata"]["resourceVersion"] == rv


@pytest.mark.parametrize("verb, resource, act", [
    ("patch", "proxies/status", lambda w: w.patch_status(PROXY, "team-a", "px1", "1", {"phase": "Running"})),
    ("patch", "proxies", lambda w: w.patch_finalizers(PROXY, "team-a", "px1", "1", [FINALIZER])),
])
def test_a_refused_patch_is_a_cluster_access_error(api, kubeapi, verb, resource, act):
    kubeapi.add(proxy(), plural="proxies")
    kubeapi.deny(verb, resource)
    with pytest.raises(ClusterAccessError) as err:
        act(Writer(api, "blue"))
    assert (err.value.verb, err.value.resource, err.value.status) == (verb, resource, 403)
    assert "in namespace 'team-a'" in str(err.value)


def test_a_server_error_or_a_dead_server_is_unavailable(api, kubeapi):
    kubeapi.add(proxy(), plural="proxies")
    kubeapi.script("PATCH", r"/proxies/", lambda req: (503, {"kind": "Status", "code": 503, "message": "etcd down"}))
    with pytest.raises(ApiUnavailable, match="503"):
        Writer(api, "blue").patch_status(PROXY, "team-a", "px1", "1", {"phase": "Running"})
    dead = load_configuration(kubeapi.kubeconfig_path)
    dead.host = "http://127.0.0.1:9"  # discard: nothing listens
    with pytest.raises(ApiUnavailable):
        Writer(client.ApiClient(dead), "blue").patch_finalizers(PROXY, "team-a", "px1", "1", [])


def test_the_scope_is_checked_before_any_request(api, kubeapi):
    with pytest.raises(ValueError):
        Writer(api, "blue").patch_status(PROXY, None, "px1", "1", {})
    assert kubeapi.requests == []


# --- Secrets (a Proxy's cloudInit.secretRef) ----------------------------------------------

SENTINEL = "#cloud-config\npassword: s3cr3t-SENTINEL-do-not-log\n"


def test_read_secret_key_decodes_the_value(api, kubeapi):
    kubeapi.add_secret("team-a", "ci", {"user-data": SENTINEL, "other": b"\xff"})
    assert Writer(api, "blue").read_secret_key("team-a", "ci", "user-data") == SENTINEL
    req = kubeapi.requests[-1]
    assert (req.method, req.path) == ("GET", "/api/v1/namespaces/team-a/secrets/ci")


@pytest.mark.parametrize("setup, name, key, want", [
    (lambda k: None, "ci", "user-data", "Secret team-a/ci not found (key 'user-data' wanted)"),
    (lambda k: k.add_secret("team-a", "ci", {"other": SENTINEL}), "ci", "user-data",
     "Secret team-a/ci has no key 'user-data' (keys: other)"),
    (lambda k: k.add_secret("team-a", "ci", {"user-data": b"\xff\xfe" + SENTINEL.encode()}), "ci", "user-data",
     "Secret team-a/ci key 'user-data': not UTF-8 text"),
    (lambda k: k.add_secret("team-a", "ci", {"user-data": SENTINEL + "x" * MAX_SECRET_VALUE}), "ci", "user-data",
     f"Secret team-a/ci key 'user-data': larger than {MAX_SECRET_VALUE} bytes"),
    (lambda k: k.add_secret("team-b", "ci", {"user-data": SENTINEL}), "ci", "user-data",
     "Secret team-a/ci not found (key 'user-data' wanted)"),  # the Proxy's namespace only
])
def test_read_secret_key_errors_name_the_secret_and_key_never_the_value(api, kubeapi, caplog, setup, name, key, want):
    caplog.set_level(logging.DEBUG)
    setup(kubeapi)
    with pytest.raises(SecretError) as err:
        Writer(api, "blue").read_secret_key("team-a", name, key)
    assert str(err.value) == want
    assert "SENTINEL" not in repr(err.value) and "SENTINEL" not in caplog.text
    assert err.value.__cause__ is None and "SENTINEL" not in str(err.value.__context__)


def test_read_secret_key_exactly_at_the_limit(api, kubeapi):
    kubeapi.add_secret("team-a", "ci", {"k": "x" * MAX_SECRET_VALUE})
    assert len(Writer(api, "blue").read_secret_key("team-a", "ci", "k")) == MAX_SECRET_VALUE


def test_read_secret_key_refused_names_the_role(api, kubeapi):
    kubeapi.add_secret("team-a", "ci", {"user-data": SENTINEL})
    kubeapi.deny("get", "secrets")
    with pytest.raises(ClusterAccessError) as err:
        Writer(api, "blue").read_secret_key("team-a", "ci", "user-data")
    e = err.value
    assert (e.verb, e.resource, e.status) == ("get", "secrets", 403)
    assert "fleet:<installation>:controller" in str(e) and "--proxy-namespaces" in str(e) and "namespace 'team-a'" in str(e)
    assert 'cannot get resource "secrets"' in str(e)  # the API server's words


# --- list pages -----------------------------------------------------------------------------


def test_list_page_pages_across_namespaces_and_an_old_token_expires(api, kubeapi):
    for i in range(5):
        kubeapi.add(proxy(f"px{i}", f"team-{'ab'[i % 2]}"), plural="proxies")
    kubeapi.add(widget("w", "team-a"), plural="widgets")  # another kind: not listed
    first = list_page(api, PROXY, limit=2)
    assert [o["metadata"]["name"] for o in first["items"]] == ["px0", "px2"]
    token, rv = first["metadata"]["continue"], first["metadata"]["resourceVersion"]
    second = list_page(api, PROXY, limit=2, continue_token=token)
    assert [o["metadata"]["name"] for o in second["items"]] == ["px4", "px1"]
    assert second["metadata"]["resourceVersion"] == rv
    third = list_page(api, PROXY, limit=2, continue_token=second["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in third["items"]] == ["px3"] and not third["metadata"].get("continue")
    assert len(list_page(api, PROXY)["items"]) == 5
    kubeapi.expire_history()
    with pytest.raises(Expired):
        list_page(api, PROXY, limit=2, continue_token=token)
    kubeapi.remove_crd("proxies")
    with pytest.raises(ClusterAccessError, match="Is the Proxy CRD installed"):
        list_page(api, PROXY)
