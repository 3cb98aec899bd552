"""Ownership (issue 8, item 4): more than one fleet per cluster, objects we
did not create, results of providers we do not track, the field manager, and
the errors of a cluster without our RBAC or CRD. The controller runs against
fakeredis and the HTTP-level fake API through the real kubernetes client."""

import logging

import fakeredis
import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from fleet import serving
from fleet.health.metrics import registry_for
from fleet.health.recording import DROPPED, Controller, drop_reason
from fleet.health.results import rfc3339
from fleet.kube import (
    FIELD_MANAGER,
    FOREIGN,
    LABEL_INSTALLATION,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PROVIDER_HEALTH,
    ClusterAccessError,
    Writer,
    access_error,
    foreign_owner,
    labels_for,
    selector_for,
)
from fleet.settings import Settings
from fleet.store import Store
from providers.kubernetes.client import load_configuration
from tests.fleet.health.test_recording import PH, T0, config, managed, res

KIND = "ProviderHealth"


@pytest.fixture
def fleet(kubeapi):
    """A controller of installation `installation` with its own Redis, writing to the one fake cluster."""

    def fleet(installation, *names, interval=60.0):
        w = Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), installation)
        settings = Settings(provider_check_interval=interval, installation=installation)
        return Controller(settings, config(*names), Store(fakeredis.FakeRedis()), w)

    return fleet


def sample(ctl, name, **labels):
    reg = CollectorRegistry()
    for c in ctl.counters.collectors():
        reg.register(c)
    return reg.get_sample_value(name, labels)


def foreign_count(ctl):
    return sample(ctl, serving.FOREIGN_SKIPPED, kind=KIND)


def dropped_count(ctl, reason):
    return sample(ctl, serving.RESULTS_DROPPED, reason=reason)


def ready(obj):
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def warnings(caplog, logger):
    return [r for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]


# --- two installations in one cluster ------------------------------------------------------------------


def test_two_installations_write_and_clean_up_only_their_own(fleet, kubeapi, caplog):
    caplog.set_level(logging.DEBUG, logger="fleet.kube.writer")
    blue = fleet("blue", "kvm-home", "local")
    green = fleet("green", "kvm-home", "gcp-eu")

    blue.start()
    assert blue.record(res("kvm-home", at=T0)) == "patched"
    assert blue.record(res("local", at=T0)) == "patched"
    assert kubeapi.objects["kvm-home"]["metadata"]["labels"] == {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTALLATION: "blue"}

    # green starts: its cleanup lists only green's objects and deletes none of blue's
    kubeapi.add(managed("green-retired", installation="green"))
    green.start()
    assert sorted(kubeapi.objects) == ["kvm-home", "local"]
    lists = [r.query["labelSelector"] for r in kubeapi.requests if r.method == "GET" and r.path == PH]
    assert lists == [[selector_for("blue")], [selector_for("green")]]

    # green's provider of the same name: blue's object is left alone, logged once, counted each time
    before = kubeapi.objects["kvm-home"]
    n = len(kubeapi.requests)
    assert green.record(res("kvm-home", at=T0 + 60, ready=False, reason="Unreachable")) == FOREIGN
    assert green.record(res("kvm-home", at=T0 + 120, ready=False, reason="Unreachable")) == FOREIGN
    assert [r.method for r in kubeapi.requests[n:]] == ["GET", "GET"]  # read, never written
    assert kubeapi.objects["kvm-home"] == before
    assert (ready(before)["status"], before["status"]["lastCheckTime"]) == ("True", rfc3339(T0))
    assert foreign_count(green) == 2 and foreign_count(blue) == 0
    (warn,) = warnings(caplog, "fleet.kube.writer")
    assert warn.fields == {"name": "kvm-home", "owner": "installation 'blue'", "installation": "green"}

    # green's own provider is written with green's label
    assert green.record(res("gcp-eu", at=T0)) == "patched"
    assert kubeapi.objects["gcp-eu"]["metadata"]["labels"][LABEL_INSTALLATION] == "green"

    # blue restarts without kvm-home: it deletes its own kvm-home, not green's gcp-eu
    fleet("blue", "local").start()
    assert sorted(kubeapi.objects) == ["gcp-eu", "local"]
    # and green, with checks off, deletes everything of its own and nothing of blue's
    fleet("green", "kvm-home", "gcp-eu", interval=0).start()
    assert sorted(kubeapi.objects) == ["local"]


@pytest.mark.parametrize("labels, owner", [
    ({}, f"not managed by fleet (no {LABEL_MANAGED_BY} label)"),
    ({LABEL_MANAGED_BY: "helm"}, "managed by 'helm'"),
    ({LABEL_MANAGED_BY: MANAGED_BY}, f"a fleet object without the {LABEL_INSTALLATION} label (created before installations, or by hand)"),
    (labels_for("other"), "installation 'other'"),
    ({LABEL_MANAGED_BY: "helm", LABEL_INSTALLATION: "blue"}, "managed by 'helm'"),
])
def test_an_object_without_our_labels_is_left_alone_logged_once_and_counted(fleet, kubeapi, caplog, labels, owner):
    caplog.set_level(logging.DEBUG, logger="fleet.kube.writer")
    kubeapi.add(managed("kvm-home", labels=labels, lastCheckTime=rfc3339(T0 - 600),
                        conditions=[{"type": "Ready", "status": "True", "reason": "AllTargetsReady"}]))
    before = kubeapi.objects["kvm-home"]
    blue = fleet("blue", "kvm-home")

    assert blue.record(res("kvm-home", at=T0, ready=False, reason="Unreachable")) == FOREIGN
    blue.store.marks.first_seen("kvm-home", T0 - 1000)
    assert blue.sweep_overdue(now=T0 + 1000) == ["kvm-home"]  # overdue: would write, but it is not ours
    assert blue.record(res("kvm-home", at=T0 + 1001)) == FOREIGN

    assert kubeapi.writes() == []
    assert kubeapi.objects["kvm-home"] == before
    assert foreign_count(blue) == 3
    (warn,) = warnings(caplog, "fleet.kube.writer")
    assert (warn.getMessage(), warn.fields["name"], warn.fields["owner"]) == (f"{KIND} not ours: left alone", "kvm-home", owner)
    # nor is it deleted at start, configured or not
    fleet("blue").start()
    assert kubeapi.objects["kvm-home"] == before


def test_an_object_created_meanwhile_by_someone_else_is_left_alone(fleet, kubeapi):
    """GET 404, then our create loses (409) to another installation's: the re-read sees theirs."""

    def theirs_first(req):
        kubeapi.add(managed("kvm-home", installation="green"))
        return None

    kubeapi.script("POST", f"^{PH}$", theirs_first)
    blue = fleet("blue", "kvm-home")
    assert blue.record(res("kvm-home")) == FOREIGN
    assert [r.method for r in kubeapi.requests] == ["GET", "POST", "GET"]
    assert kubeapi.objects["kvm-home"]["metadata"]["labels"][LABEL_INSTALLATION] == "green"
    assert "status" not in kubeapi.objects["kvm-home"]


@pytest.mark.parametrize("labels, want", [
    (labels_for("blue"), None),
    (labels_for("blue") | {"team": "x"}, None),
    ({}, f"not managed by fleet (no {LABEL_MANAGED_BY} label)"),
    ({LABEL_INSTALLATION: "blue"}, f"not managed by fleet (no {LABEL_MANAGED_BY} label)"),
    ({LABEL_MANAGED_BY: MANAGED_BY}, f"a fleet object without the {LABEL_INSTALLATION} label (created before installations, or by hand)"),
    (labels_for("green"), "installation 'green'"),
    ({LABEL_MANAGED_BY: "argo", LABEL_INSTALLATION: "blue"}, "managed by 'argo'"),
])
def test_foreign_owner(labels, want):
    assert foreign_owner({"metadata": {"name": "x", "labels": labels}}, "blue") == want


def test_foreign_owner_without_metadata():
    assert foreign_owner({}, "blue") is not None


# --- results of providers this controller does not track ---------------------------------------------------


def test_results_of_an_unconfigured_provider_are_dropped_and_counted(fleet, kubeapi, caplog):
    caplog.set_level(logging.DEBUG, logger="fleet.controller")
    blue = fleet("blue", "kvm-home")
    blue.start()
    n = len(kubeapi.requests)
    # a removed provider's worker still runs: its results must not recreate the object
    assert blue.record(res("retired", at=T0)) == DROPPED
    assert blue.record(res("retired", at=T0 + 60)) == DROPPED
    assert kubeapi.requests[n:] == []
    assert "retired" not in kubeapi.objects
    assert blue.results.all() == {}
    assert dropped_count(blue, "unconfigured") == 2
    assert dropped_count(blue, "checks_off") == 0
    (warn,) = [r for r in warnings(caplog, "fleet.controller") if r.getMessage().startswith("dropped")]
    assert warn.fields == {"provider": "retired", "reason": "unconfigured"}
    # a configured provider is still recorded
    assert blue.record(res("kvm-home", at=T0)) == "patched"


def test_with_checks_off_results_and_sweeps_write_nothing(fleet, kubeapi):
    blue = fleet("blue", "kvm-home", interval=0)
    blue.start()
    n = len(kubeapi.requests)
    assert blue.record(res("kvm-home", at=T0)) == DROPPED
    assert blue.sweep_overdue(now=T0 + 10_000) == []
    assert kubeapi.requests[n:] == [] and blue.results.all() == {}
    assert dropped_count(blue, "checks_off") == 1


@pytest.mark.parametrize("provider, enabled, want", [
    ("a", True, None),
    ("b", True, "unconfigured"),
    ("a", False, "checks_off"),
    ("b", False, "unconfigured"),
])
def test_drop_reason(provider, enabled, want):
    assert drop_reason(provider, {"a"}, enabled) == want


def test_the_controllers_metrics_serve_the_counters(fleet, kubeapi):
    kubeapi.add(managed("local", installation="green"))
    blue = fleet("blue", "kvm-home", "local")
    blue.record(res("retired"))
    blue.record(res("local"))
    text = generate_latest(registry_for(blue)).decode()
    assert 'proxy_operator_results_dropped_total{reason="unconfigured"} 1.0' in text
    assert 'proxy_operator_results_dropped_total{reason="checks_off"} 0.0' in text
    assert 'proxy_operator_foreign_objects_skipped_total{kind="ProviderHealth"} 1.0' in text
    assert "# TYPE proxy_operator_foreign_objects_skipped_total counter" in text


# --- field manager --------------------------------------------------------------------------------


def test_writes_name_the_field_manager(fleet, kubeapi):
    blue = fleet("blue", "kvm-home")
    blue.record(res("kvm-home", at=T0))
    blue.record(res("kvm-home", at=T0 + 60, ready=False, reason="Unreachable"))
    writes = [r for r in kubeapi.requests if r.method in ("POST", "PATCH")]
    assert [r.method for r in writes] == ["POST", "PATCH", "PATCH"]
    assert {r.field_manager for r in writes} == {FIELD_MANAGER} == {"fleet-controller"}
    assert kubeapi.managers("kvm-home") == {("fleet-controller", ""), ("fleet-controller", "status")}


def test_fake_records_the_client_default_manager_without_a_field_manager(kubeapi):
    """What the API server records when the writer names no field manager: the client's User-Agent product."""
    api = client.CustomObjectsApi(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)))
    api.create_cluster_custom_object(PROVIDER_HEALTH.group, PROVIDER_HEALTH.version, PROVIDER_HEALTH.plural, managed("x"))
    assert kubeapi.requests[-1].field_manager is None
    assert kubeapi.managers("x") == {("OpenAPI-Generator", "")}


# --- a cluster without our RBAC or CRD ------------------------------------------------------------------


def _publish(ctl):
    return ctl.record(res("kvm-home"))


def _start(ctl):
    return ctl.start()


@pytest.mark.parametrize("deny, setup, act, verb, resource", [
    (("get", "providerhealths"), None, _publish, "get", "providerhealths"),
    (("create", "providerhealths"), None, _publish, "create", "providerhealths"),
    (("patch", "providerhealths/status"), None, _publish, "patch", "providerhealths/status"),
    (("list", "providerhealths"), None, _start, "list", "providerhealths"),
    (("delete", "providerhealths"), "retired", _start, "delete", "providerhealths"),
])
def test_missing_rbac_is_an_error_naming_the_verb_and_resource(fleet, kubeapi, deny, setup, act, verb, resource):
    if setup:
        kubeapi.add(managed(setup, installation="blue"))
    kubeapi.deny(*deny)
    with pytest.raises(ClusterAccessError) as err:
        act(fleet("blue", "kvm-home"))
    e = err.value
    assert (e.verb, e.resource, e.status) == (verb, resource, 403)
    msg = str(e)
    plural, _, sub = resource.partition("/")
    assert msg.startswith(f"cannot {verb} {plural}.crawl.example.com{'/' + sub if sub else ''}")
    assert f"needs verb '{verb}' on resource '{resource}' in API group 'crawl.example.com'" in msg
    assert "fleet render" in msg
    assert "is forbidden: User" in msg  # the API server's own words are kept


@pytest.mark.parametrize("act, verb", [(_publish, "create"), (_start, "list")])
def test_missing_crd_is_an_error_naming_the_crd(fleet, kubeapi, act, verb):
    kubeapi.remove_crd()
    with pytest.raises(ClusterAccessError) as err:
        act(fleet("blue", "kvm-home"))
    e = err.value
    assert (e.verb, e.resource, e.status) == (verb, "providerhealths", 404)
    assert f"cannot {verb} providerhealths.crawl.example.com" in str(e)
    assert "does not serve providerhealths.crawl.example.com/v1alpha1 (404). Is the ProviderHealth CRD installed?" in str(e)


def test_a_crd_removed_after_the_read_is_reported_at_the_create(fleet, kubeapi):
    """PATCH 404 (object or CRD gone) re-reads; the create then says the CRD is missing."""
    blue = fleet("blue", "kvm-home")
    blue.record(res("kvm-home", at=T0))
    kubeapi.script("PATCH", "/status$", lambda req: kubeapi.remove_crd() or None)
    with pytest.raises(ClusterAccessError, match="CRD installed"):
        blue.record(res("kvm-home", at=T0 + 60, ready=False))  # a change: written at once


def test_an_object_deleted_under_us_is_recreated(fleet, kubeapi):
    blue = fleet("blue", "kvm-home")
    blue.record(res("kvm-home", at=T0))
    gone = {"done": False}

    def delete_once(req):
        if not gone["done"]:
            gone["done"] = True
            kubeapi.objects.pop("kvm-home")
        return None

    kubeapi.script("PATCH", "/status$", delete_once)
    assert blue.record(res("kvm-home", at=T0 + 60, ready=False)) == "patched"  # a change: written at once
    assert kubeapi.objects["kvm-home"]["status"]["lastCheckTime"] == rfc3339(T0 + 60)


@pytest.mark.parametrize("status, verb, want", [
    (401, "get", "rejected the controller's credentials (401)"),
    (403, "patch", "forbidden (403). The controller's ServiceAccount needs verb 'patch' on resource 'providerhealths/status'"),
    (404, "create", "Is the ProviderHealth CRD installed?"),
    (404, "list", "Is the ProviderHealth CRD installed?"),
    (404, "get", None),  # a missing object, handled by the caller
    (404, "patch", None),
    (409, "patch", None),
    (500, "get", None),
])
def test_access_error(status, verb, want):
    sub = "status" if verb == "patch" else ""
    err = access_error(status, verb, PROVIDER_HEALTH, "kvm-home", "server says no", sub)
    if want is None:
        assert err is None
    else:
        assert want in str(err) and str(err).endswith("(API server: server says no)")
        what = "providerhealths.crawl.example.com/status" if verb == "patch" else "providerhealths.crawl.example.com"
        assert f"cannot {verb} {what} 'kvm-home'" in str(err)
        assert err.resource == ("providerhealths/status" if sub else "providerhealths")
