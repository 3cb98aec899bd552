"""The upstream verbs beyond the conformance suite: list entries taken and
given back (stable ids, exhaustion is QuotaExceeded, a removed entry reads
Stopped), vendor sessions (a new exit per create, placement in the id), the
failure classes, and the credentials sentinel: never in logs, reprs, errors,
ids, the state file or a check's verdict."""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from pathlib import Path

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement, State
from providers.upstream import ids
from providers.upstream.config import UpstreamConfig
from providers.upstream.provider import UpstreamProvider

NAME = "up-test"
SENTINEL = "SENTINEL-upstream-secret-7f3a"


def d() -> Deadline:
    return Deadline.after(10)


def request(uid: str | None = None, **kw) -> CreateRequest:
    uid = uid or str(uuid.uuid4())
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", proxy_name="p", **kw)


def list_provider(tmp_path, lines: list[str], **kw) -> UpstreamProvider:
    (tmp_path / "list").write_text("\n".join(lines) + "\n")
    cfg = UpstreamConfig.model_validate({"mode": "list", "listFile": str(tmp_path / "list"), "stateDir": str(tmp_path / "state"), **kw})
    return UpstreamProvider(NAME, cfg)


def vendor_provider(tmp_path, **kw) -> UpstreamProvider:
    (tmp_path / "username").write_text(f"acme-{SENTINEL}\n")
    (tmp_path / "password").write_text(f"{SENTINEL}\n")
    cfg = UpstreamConfig.model_validate({
        "mode": "vendor", "endpoint": "socks5://gate.vendor.example:7777",
        "usernameTemplate": "{user}-session-{session}-country-{country}-city-{city}",
        "usernameFile": str(tmp_path / "username"), "passwordFile": str(tmp_path / "password"),
        "checkPlacement": {"country": "us", "city": "nyc"}, "checkURL": "127.0.0.1:1", "stateDir": str(tmp_path / "state"), **kw})
    return UpstreamProvider(NAME, cfg)


def test_list_members_take_entries_in_order_and_give_them_back(tmp_path):
    p = list_provider(tmp_path, ["http://203.0.113.1:8080", "socks5://203.0.113.2:1080"])
    a, b, c = request(), request(), request()
    pa, pb = p.create(a, d()), p.create(b, d())
    assert (pa, pb) == ("http://203.0.113.1:8080", "socks5://203.0.113.2:1080")
    inst = p.get(pb, d())
    assert (inst.state, inst.ip, inst.uid) == (State.RUNNING, "203.0.113.2", b.uid)
    with pytest.raises(base.QuotaExceeded) as err:
        p.create(c, d())
    assert "all 2 entries" in str(err.value)
    p.delete(pa, d())
    assert p.create(c, d()) == pa  # released: the same entry, the same id
    assert sorted(i.id for i in p.list_by_tag(d())) == sorted([pa, pb])


def test_an_entry_gone_from_the_list_reads_stopped(tmp_path):
    p = list_provider(tmp_path, ["http://203.0.113.1:8080", "http://203.0.113.2:8080"])
    pid = p.create(request(), d())
    (tmp_path / "list").write_text("http://203.0.113.2:8080\n")
    inst = p.get(pid, d())
    assert (inst.state, inst.ip) == (State.STOPPED, "")  # the reconciler replaces it


def test_a_missing_or_bad_list_file_is_transient_or_permanent(tmp_path):
    p = list_provider(tmp_path, ["http://203.0.113.1:8080"])
    pid = p.create(request(), d())
    os.unlink(tmp_path / "list")
    with pytest.raises(base.Transient):  # not yet mounted: never a false NotFound
        p.get(pid, d())
    with pytest.raises(base.Transient):
        p.create(request(), d())
    (tmp_path / "list").write_text(f"ftp://bob:{SENTINEL}@x:1\n")
    with pytest.raises(base.Permanent) as err:
        p.create(request(), d())
    assert "line 1" in str(err.value) and SENTINEL not in str(err.value)


def test_a_corrupt_state_file_is_transient_not_gone(tmp_path):
    p = list_provider(tmp_path, ["http://203.0.113.1:8080"])
    pid = p.create(request(), d())
    (tmp_path / "state" / "members.json").write_text("{garbage")
    with pytest.raises(base.Transient):
        p.get(pid, d())
    with pytest.raises(base.Transient):
        p.list_by_tag(d())


def test_a_list_member_refuses_a_placement(tmp_path):
    p = list_provider(tmp_path, ["http://203.0.113.1:8080"])
    with pytest.raises(base.Permanent, match="no placement"):
        p.create(request(placement=Placement(region="us")), d())


def test_vendor_members_are_new_sessions_with_their_placement(tmp_path):
    p = vendor_provider(tmp_path)
    a = request(placement=Placement(region="us", zone="nyc"))
    pa = p.create(a, d())
    assert p.create(a, d()) == pa
    pb = p.create(request(placement=Placement(region="us", zone="nyc")), d())
    ma, mb = ids.parse(pa), ids.parse(pb)
    assert ma.session != mb.session and len(ma.session) == 16
    assert ma.placement == (("country", "us"), ("city", "nyc"))
    assert pa.startswith("socks5://gate.vendor.example:7777/sessions/") and pa.endswith("?country=us&city=nyc")
    inst = p.get(pa, d())
    assert (inst.state, inst.ip) == (State.RUNNING, "gate.vendor.example")
    p.delete(pa, d())
    rotated = p.create(dataclasses.replace(a, name=base.name_from_uid("new-uid"), uid="new-uid"), d())
    assert ids.parse(rotated).session not in (ma.session, mb.session)  # a replacement is a new exit
    with pytest.raises(base.Permanent, match=r"give placement\.zone"):
        p.create(request(placement=Placement(region="us")), d())


def test_a_vendor_member_of_another_endpoint_reads_stopped(tmp_path):
    p = vendor_provider(tmp_path)
    pid = p.create(request(placement=Placement(region="us", zone="nyc")), d())
    moved = vendor_provider(tmp_path, endpoint="socks5://gate2.vendor.example:7777")
    assert moved.get(pid, d()).state is State.STOPPED


def test_credentials_never_reach_logs_reprs_errors_ids_state_or_verdicts(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    p = vendor_provider(tmp_path, endpoint="socks5://127.0.0.1:1")  # loopback: the check dials it
    req = request(placement=Placement(region="us", zone="nyc"))
    pid = p.create(req, d())
    seen = [pid, repr(p.get(pid, d())), repr(p.list_by_tag(d())), repr(p.cfg), str(p.cfg.model_dump())]
    [t] = p.check(d())  # nothing listens at checkURL's upstream: a failure verdict
    seen.append(repr(t.to_dict()))
    for bad in (lambda: p.get("http://nope", d()), lambda: p.create(req, Deadline.after(-1))):
        with pytest.raises(base.ProviderError) as err:
            bad()
        seen += [str(err.value), repr(err.value)]
    lp = list_provider(tmp_path, [f"socks5://bob:{SENTINEL}@127.0.0.1:1"], checkURL="127.0.0.1:2")
    lpid = lp.create(request(), d())
    seen += [lpid, repr(lp.list_by_tag(d())), repr(lp.check(d()))]
    for root, _, files in os.walk(tmp_path / "state"):
        for f in files:
            seen.append((Path(root) / f).read_text(encoding="utf-8"))
    seen.append(caplog.text)
    assert "upstream member" in caplog.text  # the logs were captured
    for text in seen:
        assert SENTINEL not in text, text
