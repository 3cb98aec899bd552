"""create/get/delete/list_by_tag through the real SDK against the fake,
asserting the exact requests it receives."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement, State
from tests.providers.conformance import ProviderConformance
from tests.providers.gcp.conftest import NAME, PROJECT

ZONE = "europe-west1-b"
IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
BASE = f"/compute/v1/projects/{PROJECT}"
PLACEMENT = Placement(region="europe-west1", zone=ZONE, machine_type="e2-small", image=IMAGE)


def request(uid: str = "0b8c6c3e-1f0a-4f7e-9a43-8d1f3c0e2a11", **placement) -> CreateRequest:
    p = Placement(**{**PLACEMENT.__dict__, **placement})
    return CreateRequest(
        name=base.name_from_uid(uid),
        uid=uid,
        namespace="crawl",
        proxy_name="p1",
        placement=p,
        cloud_init="#cloud-config\npackages: [squid]\n",
        port=3128,
    )


def dl() -> Deadline:
    return Deadline.after(10)


def calls(fake) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.api_requests()]


class TestGcpConformance(ProviderConformance):
    provider_name = NAME
    malformed_ids = (
        "",
        "not-an-id",
        "zones/x",
        "zones/Z/instances/a",
        "zones/a/instances/b/c",
        "regions/a/instances/b",
    )

    def make_request(self, uid: str) -> CreateRequest:
        return request(uid)


# -- create ---------------------------------------------------------------------


def test_create_sends_one_insert_with_every_field(fake, provider):
    req = dataclasses.replace(request(), installation="blue")

    pid = provider.create(req, dl())

    assert pid == f"zones/{ZONE}/instances/{req.name}"
    assert calls(fake) == [("POST", f"{BASE}/zones/{ZONE}/instances")]
    body = fake.api_requests()[0].body
    assert body["name"] == req.name
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/e2-small"
    assert body["labels"] == {
        "proxy-operator-managed": "true", "proxy-operator-uid": req.uid, "proxy-operator-installation": "blue",
        "proxy-operator-namespace": req.namespace}
    assert body["metadata"] == {"items": [{"key": "user-data", "value": req.cloud_init}]}
    assert body["tags"] == {"items": ["proxy-operator"]}
    assert body["networkInterfaces"] == [
        {
            "network": "global/networks/default",
            "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
        }
    ]
    assert body["disks"] == [
        {
            "boot": True,
            "autoDelete": True,
            "type": "PERSISTENT",
            "initializeParams": {"sourceImage": IMAGE, "diskSizeGb": "10"},
        }
    ]
    assert body["description"] == "egress proxy crawl/p1"
    assert set(body) == {
        "name",
        "description",
        "machineType",
        "labels",
        "metadata",
        "tags",
        "networkInterfaces",
        "disks",
    }


def test_create_uses_the_config(fake, make_provider):
    p = make_provider(network="projects/host/global/networks/shared", networkTag="", diskSizeGb=20)

    p.create(request(machine_type="zones/europe-west1-b/machineTypes/n2-standard-2"), dl())

    body = fake.api_requests()[0].body
    assert body["networkInterfaces"][0]["network"] == "projects/host/global/networks/shared"
    assert "tags" not in body
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "20"
    assert body["machineType"] == "zones/europe-west1-b/machineTypes/n2-standard-2"


def test_create_409_is_success_with_the_same_id(fake, provider):
    req = request()
    first = provider.create(req, dl())

    again = provider.create(req, dl())

    assert again == first
    assert calls(fake) == [("POST", f"{BASE}/zones/{ZONE}/instances")] * 2


@pytest.mark.parametrize(
    ("placement", "field", "value"),
    [
        ({"zone": ""}, "placement.zone", "''"),
        ({"machine_type": ""}, "placement.machineType", "''"),
        ({"image": ""}, "placement.image", "''"),
        ({"zone": "Europe West"}, "placement.zone", "'Europe West'"),
        ({"image": "my image"}, "placement.image", "'my image'"),
    ],
)
def test_create_missing_placement_is_permanent_without_a_request(fake, provider, placement, field, value):
    with pytest.raises(base.Permanent) as err:
        provider.create(request(**placement), dl())

    assert field in str(err.value) and value in str(err.value)
    assert err.value.provider == NAME and err.value.op == "create"
    assert fake.requests == []


def test_create_quota_403_is_quota(fake, provider):
    fake.script(
        "POST",
        "/instances$",
        403,
        {"error": {"code": 403, "message": "Quota exceeded", "errors": [{"reason": "quotaExceeded"}]}},
    )
    with pytest.raises(base.QuotaExceeded) as err:
        provider.create(request(), dl())
    assert err.value.provider == NAME
    assert "Quota exceeded" in str(err.value)


def test_create_refused_connection_is_transient(make_provider):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = make_provider(apiEndpoint=f"http://127.0.0.1:{port}")
    with pytest.raises(base.Transient):
        p.create(request(), dl())


def test_expired_deadline_sends_nothing(fake, provider):
    with pytest.raises(base.Transient):
        provider.create(request(), Deadline.after(0))
    with pytest.raises(base.Transient):
        provider.get(f"zones/{ZONE}/instances/proxy-x", Deadline.after(0))
    assert fake.api_requests() == []


# -- get --------------------------------------------------------------------------

NAT = {"networkInterfaces": [{"accessConfigs": [{"natIP": "198.51.100.7"}]}]}
NO_NAT = {"networkInterfaces": [{"networkIP": "10.0.0.2", "accessConfigs": [{"name": "External NAT"}]}]}


@pytest.mark.parametrize(
    ("status", "nics", "want"),
    [
        ("PROVISIONING", NO_NAT, State.PROVISIONING),
        ("STAGING", NAT, State.PROVISIONING),
        ("RUNNING", NAT, State.RUNNING),
        ("RUNNING", NO_NAT, State.PROVISIONING),  # Running only with an IP
        ("RUNNING", {"networkInterfaces": []}, State.PROVISIONING),
        ("REPAIRING", NAT, State.PROVISIONING),
        ("STOPPING", NAT, State.STOPPED),
        ("STOPPED", NO_NAT, State.STOPPED),
        ("SUSPENDING", NAT, State.STOPPED),
        ("SUSPENDED", NO_NAT, State.STOPPED),
        ("TERMINATED", NO_NAT, State.TERMINATED),
        ("SOMETHING_NEW", NAT, State.STOPPED),  # unknown → Stopped
    ],
)
def test_get_state_table(fake, provider, status, nics, want):
    fake.add_instance(ZONE, "proxy-a", status=status, **nics)

    inst = provider.get(f"zones/{ZONE}/instances/proxy-a", dl())

    assert inst.state is want
    if want is State.RUNNING:
        assert inst.ip == "198.51.100.7"
    assert calls(fake) == [("GET", f"{BASE}/zones/{ZONE}/instances/proxy-a")]


def test_get_reads_back_nat_ip_uid_and_created_at(fake, provider):
    pid = provider.create(request(), dl())

    inst = provider.get(pid, dl())

    assert inst.id == pid
    assert inst.state is State.RUNNING
    assert inst.ip.startswith("203.0.113.")
    assert inst.uid == request().uid
    assert inst.created_at == datetime(2026, 11, 29, 5, 6, 45, 123000, tzinfo=timezone(timedelta(hours=-8)))


@pytest.mark.parametrize("stamp", ["", "yesterday", "2026-13-45T99:00:00Z", "2026-11-29T05:06:45"])
def test_get_unparsable_creation_timestamp_is_zero_time(fake, provider, stamp):
    fake.add_instance(ZONE, "proxy-a", creationTimestamp=stamp)
    assert provider.get(f"zones/{ZONE}/instances/proxy-a", dl()).created_at is None


def test_get_missing_is_not_found(fake, provider):
    with pytest.raises(base.NotFound) as err:
        provider.get(f"zones/{ZONE}/instances/proxy-gone", dl())
    assert (err.value.provider, err.value.op, err.value.id) == (NAME, "get", f"zones/{ZONE}/instances/proxy-gone")


@pytest.mark.parametrize("bad", ["", "proxy-a", "zones//instances/a", "zones/a/b/instances/c", "zones/a/instances/"])
def test_get_malformed_id_is_permanent_without_a_request(fake, provider, bad):
    with pytest.raises(base.Permanent) as err:
        provider.get(bad, dl())
    assert "zones/<zone>/instances/<name>" in str(err.value)
    assert fake.requests == []


@pytest.mark.parametrize(
    ("status", "want"),
    [(500, base.Transient), (503, base.Transient), (403, base.Permanent), (400, base.Permanent)],
)
def test_get_errors_are_classified(fake, provider, status, want):
    fake.script("GET", "/instances/proxy-a$", status, {"error": {"code": status, "message": "no"}}, times=-1)
    with pytest.raises(want) as err:
        provider.get(f"zones/{ZONE}/instances/proxy-a", Deadline.after(1))
    assert err.value.provider == NAME


def test_get_401_is_permanent(fake, adc, make_provider):
    p = make_provider(credentials=None)  # ADC: the metadata server, so a 401 can refresh the token
    fake.script("GET", "/instances/proxy-a$", 401, {"error": {"code": 401, "message": "Invalid Credentials"}}, times=-1)
    with pytest.raises(base.Permanent) as err:
        p.get(f"zones/{ZONE}/instances/proxy-a", dl())
    assert "Invalid Credentials" in str(err.value)


def test_get_retries_503_within_the_deadline(fake, provider):
    fake.add_instance(ZONE, "proxy-a")
    fake.script("GET", "/instances/proxy-a$", 503, {"error": {"code": 503, "message": "busy"}})

    assert provider.get(f"zones/{ZONE}/instances/proxy-a", dl()).state is State.RUNNING
    assert len(fake.api_requests()) == 2


# -- asynchronous insert failures ---------------------------------------------------

QUOTA_ERROR = {
    "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded. Limit: 8.0 in region europe-west1."}]},
    "httpErrorStatusCode": 403,
    "httpErrorMessage": "FORBIDDEN",
}
IMAGE_ERROR = {
    "error": {"errors": [{"code": "RESOURCE_NOT_FOUND", "message": "The resource 'projects/x/global/images/nope' was not found"}]},
    "httpErrorStatusCode": 404,
    "httpErrorMessage": "NOT FOUND",
}


@pytest.mark.parametrize(
    ("error", "want", "text"),
    [(QUOTA_ERROR, base.QuotaExceeded, "Quota 'CPUS' exceeded"), (IMAGE_ERROR, base.Permanent, "RESOURCE_NOT_FOUND")],
)
def test_get_reports_the_failed_insert_instead_of_not_found(fake, provider, error, want, text):
    fake.insert_error = error
    pid = provider.create(request(), dl())  # accepted: the failure comes later

    with pytest.raises(want) as err:
        provider.get(pid, dl())

    assert text in str(err.value)
    assert (err.value.provider, err.value.op, err.value.id) == (NAME, "get", pid)
    op = fake.api_requests()[0]
    assert calls(fake) == [
        ("POST", f"{BASE}/zones/{ZONE}/instances"),
        ("GET", f"{BASE}/zones/{ZONE}/instances/{request().name}"),
        ("GET", f"{BASE}/zones/{ZONE}/operations/{next(iter(fake.operations))[1]}"),
    ]
    assert op.method == "POST"
    # Reported once: the next poll is a plain NotFound, so the reconciler creates again.
    with pytest.raises(base.NotFound):
        provider.get(pid, dl())
    assert len(fake.api_requests()) == 4


def test_get_while_the_insert_runs_is_transient_not_not_found(fake, provider):
    fake.insert_error = QUOTA_ERROR
    pid = provider.create(request(), dl())
    for op in fake.operations.values():
        op["status"] = "RUNNING"

    with pytest.raises(base.Transient) as err:
        provider.get(pid, dl())

    assert "RUNNING" in str(err.value)


def test_get_after_a_successful_insert_and_a_foreign_delete_is_not_found(fake, provider):
    pid = provider.create(request(), dl())
    fake.finish_operations()
    fake.instances.clear()  # deleted behind our back

    with pytest.raises(base.NotFound):
        provider.get(pid, dl())


def test_insert_failing_synchronously_in_its_operation_is_reported_by_create(fake, provider):
    fake.script(
        "POST",
        "/instances$",
        200,
        {"name": "operation-x", "status": "DONE", **QUOTA_ERROR},
    )
    with pytest.raises(base.QuotaExceeded) as err:
        provider.create(request(), dl())
    assert err.value.op == "create"


# -- delete --------------------------------------------------------------------------


def test_delete_404_is_done(fake, provider):
    provider.delete(f"zones/{ZONE}/instances/proxy-gone", dl())
    assert calls(fake) == [("DELETE", f"{BASE}/zones/{ZONE}/instances/proxy-gone")]


def test_delete_again_while_in_progress_sends_no_new_delete(fake, provider):
    fake.delete_completes = False
    pid = provider.create(request(), dl())
    del fake.requests[:]

    provider.delete(pid, dl())
    provider.delete(pid, dl())
    provider.delete(pid, dl())

    ops = [k[1] for k in fake.operations if k[1].endswith("-delete")]
    assert calls(fake) == [
        ("DELETE", f"{BASE}/zones/{ZONE}/instances/{request().name}"),
        ("GET", f"{BASE}/zones/{ZONE}/operations/{ops[0]}"),
        ("GET", f"{BASE}/zones/{ZONE}/operations/{ops[0]}"),
    ]
    # Get keeps showing the instance while the delete runs.
    assert provider.get(pid, dl()).state is State.STOPPED

    fake.finish_operations()
    provider.delete(pid, dl())  # the operation is done: one plain DELETE, which 404s
    assert calls(fake)[-2:] == [
        ("GET", f"{BASE}/zones/{ZONE}/operations/{ops[0]}"),
        ("DELETE", f"{BASE}/zones/{ZONE}/instances/{request().name}"),
    ]
    with pytest.raises(base.NotFound):
        provider.get(pid, dl())


def test_delete_malformed_id_is_permanent(fake, provider):
    with pytest.raises(base.Permanent):
        provider.delete("nope", dl())
    assert fake.requests == []


# -- list_by_tag ----------------------------------------------------------------------


def test_list_filters_on_the_managed_label_and_walks_every_page(fake, provider):
    fake.page_size = 2
    for zone, name in [("europe-west1-b", "proxy-a"), ("europe-west1-c", "proxy-b"), ("us-east1-b", "proxy-c")]:
        fake.add_instance(zone, name)
    fake.add_instance("europe-west1-b", "someone-elses", labels={"team": "web"})

    got = provider.list_by_tag(dl())

    assert sorted(i.id for i in got) == [
        "zones/europe-west1-b/instances/proxy-a",
        "zones/europe-west1-c/instances/proxy-b",
        "zones/us-east1-b/instances/proxy-c",
    ]
    assert all(i.uid.startswith("uid-") and i.created_at is not None for i in got)
    reqs = fake.api_requests()
    assert [(r.method, r.path) for r in reqs] == [("GET", f"{BASE}/aggregated/instances")] * 2
    assert [r.query.get("pageToken") for r in reqs] == [None, "2"]
    assert all(r.query["filter"] == "labels.proxy-operator-managed = true" for r in reqs)
    assert all("maxResults" not in r.query for r in reqs)


def test_list_never_returns_unmarked_instances_even_if_the_filter_is_ignored(fake, provider):
    fake.script(
        "GET",
        "aggregated/instances",
        200,
        {"items": {f"zones/{ZONE}": {"instances": [{"name": "web-1", "zone": ZONE, "labels": {"team": "web"}}]}}},
    )
    assert provider.list_by_tag(dl()) == []


def test_list_partial_success_leaves_out_unreachable_zones_and_says_so(fake, provider, caplog):
    fake.add_instance("europe-west1-b", "proxy-a")
    fake.unreachables = ["zones/us-east1-b"]

    with caplog.at_level("WARNING", logger="providers.gcp"):
        got = provider.list_by_tag(dl())

    assert [i.id for i in got] == ["zones/europe-west1-b/instances/proxy-a"]
    (rec,) = [r for r in caplog.records if r.name == "providers.gcp"]
    assert rec.fields["zones"] == "zones/us-east1-b"


def test_list_failure_is_an_error_not_a_partial_list(fake, provider):
    fake.page_size = 1
    fake.add_instance("europe-west1-b", "proxy-a")
    fake.add_instance("europe-west1-b", "proxy-b")
    fake.script(
        "GET",
        "aggregated/instances",
        500,
        {"error": {"code": 500, "message": "page 2 failed"}},
        query={"pageToken": "1"},
    )

    with pytest.raises(base.Transient) as err:
        provider.list_by_tag(Deadline.after(1))
    assert err.value.op == "list" and err.value.provider == NAME
    assert "page 2 failed" in str(err.value)
    assert [r.query.get("pageToken") for r in fake.api_requests()] == [None, "1"]


def test_no_sdk_exception_escapes(fake, provider):
    """Every failure of every verb is one of the four classes."""
    fake.script("POST", ".", 502, {"error": {"code": 502, "message": "x"}}, times=-1)
    fake.script("GET", ".", 502, {"error": {"code": 502, "message": "x"}}, times=-1)
    fake.script("DELETE", ".", 502, {"error": {"code": 502, "message": "x"}}, times=-1)
    pid = f"zones/{ZONE}/instances/proxy-a"
    for call in (
        lambda: provider.create(request(), Deadline.after(1)),
        lambda: provider.get(pid, Deadline.after(1)),
        lambda: provider.delete(pid, Deadline.after(1)),
        lambda: provider.list_by_tag(Deadline.after(1)),
    ):
        with pytest.raises(base.ProviderError) as err:
            call()
        assert type(err.value) in base.ERROR_CLASSES
        assert err.value.__cause__ is not None


def test_uids_become_label_values(fake, provider):
    uid = str(uuid.uuid4())
    provider.create(request(uid), dl())
    assert fake.api_requests()[0].body["labels"]["proxy-operator-uid"] == uid
    assert "proxy-operator-installation" not in fake.api_requests()[0].body["labels"]  # none asked: no mark


def test_the_installation_is_read_from_the_labels(fake, provider):
    fake.add_instance(ZONE, "proxy-a", labels={"proxy-operator-managed": "true", "proxy-operator-uid": "u-a",
                                               "proxy-operator-installation": "green"})
    fake.add_instance(ZONE, "proxy-b")  # created before installation marks
    got = {i.id.rsplit("/", 1)[1]: i.installation for i in provider.list_by_tag(dl())}
    assert got == {"proxy-a": "green", "proxy-b": ""}
    assert provider.get(f"zones/{ZONE}/instances/proxy-a", dl()).installation == "green"


def test_a_malformed_installation_is_permanent_before_any_request(fake, provider):
    with pytest.raises(base.Permanent, match="installation"):
        provider.create(dataclasses.replace(request(), installation="Blue_1"), dl())
    assert fake.requests == []
