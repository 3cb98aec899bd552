"""create/get/delete/list_by_tag through hcloud against the fake, asserting
the exact requests it receives."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement, State
from tests.providers.conformance import ProviderConformance
from tests.providers.hetzner.conftest import NAME, SOURCES

PLACEMENT = Placement(region="eu-central", zone="fsn1", machine_type="cx22", image="ubuntu-24.04")


def request(uid: str = "0b8c6c3e-1f0a-4f7e-9a43-8d1f3c0e2a11", port: int = 3128, **placement) -> CreateRequest:
    p = Placement(**{**PLACEMENT.__dict__, **placement})
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="crawl", proxy_name="p1", placement=p,
                         cloud_init="#cloud-config\npackages: [squid]\n", port=port)


def dl() -> Deadline:
    return Deadline.after(10)


def calls(fake) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.api_requests()]


class TestHetznerConformance(ProviderConformance):
    provider_name = NAME
    malformed_ids = ("", "not-an-id", "servers/x", "servers/0", "servers/1/firewalls/", "firewalls/-1", "servers/1/2")

    def make_request(self, uid: str) -> CreateRequest:
        return request(uid)


def test_create_sends_a_firewall_then_a_server_with_every_field(fake, provider):
    req = dataclasses.replace(request(), installation="blue")
    pid = provider.create(req, dl())
    assert calls(fake) == [("POST", "/v1/firewalls"), ("POST", "/v1/servers")]
    fw_body, server_body = fake.api_requests()[0].body, fake.api_requests()[1].body
    marks = {"proxy-operator-managed": "true", "proxy-operator-uid": req.uid, "proxy-operator-installation": "blue",
             "proxy-operator-namespace": "crawl"}
    assert fw_body["name"] == req.name and fw_body["labels"] == marks
    assert fw_body["rules"] == [{"direction": "in", "protocol": "tcp", "port": "3128", "source_ips": sorted(SOURCES),
                                 "description": "fleet proxy clients"}]
    fid = next(iter(fake.firewalls))
    assert server_body == {
        "name": req.name, "server_type": "cx22", "image": "ubuntu-24.04", "location": "fsn1", "start_after_create": True,
        "user_data": req.cloud_init, "labels": marks, "firewalls": [{"firewall": fid}],
        "public_net": {"enable_ipv4": True, "enable_ipv6": False},
    }
    sid = next(iter(fake.servers))
    assert pid == f"servers/{sid}/firewalls/{fid}"


def test_a_repeat_create_finds_both_by_name(fake, provider):
    pid = provider.create(request(), dl())
    fake.requests.clear()
    assert provider.create(request(), dl()) == pid
    assert calls(fake) == [("POST", "/v1/firewalls"), ("GET", "/v1/firewalls"), ("POST", "/v1/servers"), ("GET", "/v1/servers")]
    assert len(fake.servers) == 1 and len(fake.firewalls) == 1


def test_a_replacement_on_another_port_sets_the_firewall_rules(fake, provider):
    pid = provider.create(request(port=3128), dl())
    fid = next(iter(fake.firewalls))
    provider.delete(pid, dl())
    assert fid not in fake.firewalls  # detached by the server's delete, then deleted
    fake.firewalls[fid] = {"id": fid, "name": request().name, "labels": {"proxy-operator-managed": "true"},
                           "created": "2026-11-29T05:06:45+00:00", "applied_to": [],
                           "rules": [{"direction": "in", "protocol": "tcp", "port": "3128", "source_ips": list(SOURCES),
                                      "destination_ips": [], "description": None}]}
    fake.requests.clear()
    provider.create(request(port=8080), dl())
    assert ("POST", f"/v1/firewalls/{fid}/actions/set_rules") in calls(fake)
    assert [r["port"] for r in fake.firewalls[fid]["rules"]] == ["8080"]


def test_get_boots_to_running_with_the_public_ip(fake, provider):
    pid = provider.create(request(), dl())
    first = provider.get(pid, dl())
    assert first.state is State.PROVISIONING and first.ip == ""
    second = provider.get(pid, dl())
    sid = int(pid.split("/")[1])
    assert second.state is State.RUNNING and second.ip == fake.servers[sid]["public_net"]["ipv4"]["ip"]
    assert second.uid == request().uid and second.created_at is not None


def test_a_server_being_deleted_is_still_there_and_its_firewall_goes_on_a_later_delete(fake, provider):
    fake.deletes_async = True
    pid = provider.create(request(), dl())
    provider.delete(pid, dl())  # the firewall is still applied: in use, left for the next delete
    assert provider.get(pid, dl()).state is State.STOPPED
    fake.finish_deletes()
    assert provider.get(pid, dl()).state is State.TERMINATED  # the server is gone, its firewall is not
    provider.delete(pid, dl())
    with pytest.raises(base.NotFound):
        provider.get(pid, dl())
    assert fake.firewalls == {} and fake.servers == {}


def test_list_by_tag_reads_every_page_and_lists_a_leftover_firewall(fake, provider, monkeypatch):
    from providers.hetzner import provider as mod

    monkeypatch.setattr(mod, "PER_PAGE", 3)
    pids = [provider.create(request(str(uuid.uuid4())), dl()) for _ in range(7)]
    fake.deletes_async = True
    gone = pids.pop()
    provider.delete(gone, dl())
    fake.finish_deletes()
    fake.servers[99] = {**fake.servers[int(pids[0].split("/")[1])], "id": 99, "name": "not-ours", "labels": {}}
    fake.requests.clear()
    listed = {i.id: i for i in provider.list_by_tag(dl())}
    assert calls(fake) == [("GET", "/v1/servers")] * 2 + [("GET", "/v1/firewalls")] * 3
    leftover = "firewalls/" + gone.rsplit("/", 1)[1]
    assert set(listed) == set(pids) | {leftover}
    assert listed[leftover].state is State.TERMINATED and listed[leftover].uid and listed[leftover].created_at
    provider.delete(leftover, dl())
    with pytest.raises(base.NotFound):
        provider.get(leftover, dl())


def test_the_token_is_read_from_its_file_and_re_read_when_rotated(fake, provider, token_file):
    provider.list_by_tag(dl())
    fake.token = "rotated-token"
    with pytest.raises(base.Permanent):  # 401 unauthorized
        provider.list_by_tag(dl())
    token_file.write_text("rotated-token-and-longer\n")
    fake.token = "rotated-token-and-longer"
    provider.list_by_tag(dl())


def test_a_missing_token_file_is_transient_and_says_so(make_provider, tmp_path):
    p = make_provider(tokenFile=str(tmp_path / "absent"))
    with pytest.raises(base.Transient, match="tokenFile"):
        p.list_by_tag(dl())


def test_resource_limit_is_quota_and_rate_limit_is_transient(fake, provider):
    fake.server_limit = 0
    with pytest.raises(base.QuotaExceeded):
        provider.create(request(), dl())
    fake.script("GET", "/v1/servers$", 429, {"error": {"code": "rate_limit_exceeded", "message": "limit", "details": None}})
    with pytest.raises(base.Transient):
        provider.list_by_tag(dl())
    assert sum(1 for r in fake.api_requests() if r.path == "/v1/servers" and r.method == "GET") == 1  # hcloud did not retry


@pytest.mark.parametrize(
    ("placement", "words"),
    [({"zone": ""}, "zone is required"), ({"machine_type": ""}, "machineType is required"), ({"image": ""}, "image is required"),
     ({"zone": "FSN 1"}, "location"), ({"image": "Ubuntu 24"}, "image name")],
)
def test_impossible_placements_are_permanent_before_any_call(fake, provider, placement, words):
    with pytest.raises(base.Permanent, match=words):
        provider.create(request(**placement), dl())
    assert fake.api_requests() == []


def test_config_defaults_fill_the_placement(fake, make_provider):
    p = make_provider(location="hel1", serverType="cpx11", image="debian-12")
    p.create(request(zone="", machine_type="", image=""), dl())
    body = fake.api_requests()[-1].body
    assert (body["location"], body["server_type"], body["image"]) == ("hel1", "cpx11", "debian-12")


def test_an_expired_deadline_returns_at_once_without_a_call(fake, provider):
    with pytest.raises(base.Transient):
        provider.create(request(), Deadline.after(-1))
    assert fake.api_requests() == []
