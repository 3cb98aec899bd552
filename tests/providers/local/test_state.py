"""Records, ids and locks of the state directory (no squid needed)."""

import json
import os
import threading
import time

import pytest

from providers import base
from providers.base import CreateRequest, Deadline
from providers.local.errors import BadRequest, Busy, CorruptRecord, RecordMissing
from providers.local.state import Record, Store, check_name, new_record, parse_id, provider_id


def rec(name: str = "proxy-abc", **kw) -> Record:
    return new_record(CreateRequest(name=name, uid="uid-1", namespace="ns", proxy_name="px", port=31300), "127.0.0.1", "fleetx").with_(**kw)


def test_a_record_round_trips_and_carries_the_marks(tmp_path):
    s = Store(str(tmp_path))
    s.ensure()
    r = rec(pid=42, startTicks=7)
    s.write(r)
    back = s.read("proxy-abc")
    assert back == r and back.managed
    assert back.labels == {base.LABEL_MANAGED: "true", base.LABEL_UID: "uid-1",  # no installation asked: no mark
                           base.LABEL_NAMESPACE: "ns"}
    assert back.installation == ""


def test_the_installation_mark_round_trips(tmp_path):
    s = Store(str(tmp_path))
    s.ensure()
    r = new_record(CreateRequest(name="proxy-abc", uid="uid-1", port=31300, installation="blue"), "127.0.0.1", "fleetx")
    s.write(r)
    back = s.read("proxy-abc")
    assert back.labels[base.LABEL_INSTALLATION] == "blue" and back.installation == "blue"
    # a record whose labels were edited by hand into a non-string mark reads as unmarked
    assert r.with_(labels={**r.labels, base.LABEL_INSTALLATION: 7}).installation == ""
    assert back.created() is not None and back.created().tzinfo is not None
    data = json.loads((tmp_path / "proxy-abc.json").read_text())
    assert {"name", "uid", "namespace", "proxyName", "createdAt", "pid", "port", "bindAddress"} <= set(data)
    assert oct((tmp_path / "proxy-abc.json").stat().st_mode & 0o777) == "0o644"
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []  # written whole, no temp left


def test_missing_and_corrupt_records(tmp_path):
    s = Store(str(tmp_path))
    s.ensure()
    with pytest.raises(RecordMissing):
        s.read("proxy-abc")
    for text in ("{", "[]", '{"name": "proxy-abc"}', json.dumps({**json.loads(rec().to_json()), "pid": "12"}),
                 json.dumps({**json.loads(rec().to_json()), "port": True}), "\xff"):
        (tmp_path / "proxy-abc.json").write_text(text, encoding="utf-8" if text != "\xff" else "latin-1")
        with pytest.raises(CorruptRecord):
            s.read("proxy-abc")
    s.write(rec(name="proxy-other"))
    os.rename(tmp_path / "proxy-other.json", tmp_path / "proxy-abc.json")  # a record under another name
    with pytest.raises(CorruptRecord):
        s.read("proxy-abc")


def test_unparsable_created_at_is_none():
    assert rec(createdAt="yesterday").created() is None


def test_names_lists_records_only(tmp_path):
    s = Store(str(tmp_path / "missing"))
    assert s.names() == []  # never created: nothing
    s = Store(str(tmp_path))
    s.ensure()
    for n in ("proxy-b", "proxy-a"):
        s.write(rec(name=n))
    (tmp_path / "proxy-a").mkdir()
    (tmp_path / ".proxy-a.x.tmp").write_text("")
    (tmp_path / "Not A Name.json").write_text("{}")
    assert s.names() == ["proxy-a", "proxy-b"]
    s.remove("proxy-a")
    s.remove("proxy-a")  # twice is fine
    assert s.names() == ["proxy-b"]


def test_an_unreadable_state_dir_raises(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(NotADirectoryError):
        Store(str(f)).names()


@pytest.mark.parametrize(("pid", "name"), [("local/proxy-abc", "proxy-abc"), ("local/a", "a")])
def test_ids(pid, name):
    assert parse_id(pid) == name and provider_id(name) == pid


@pytest.mark.parametrize("bad", ["", "not-an-id", "local/", "local/a/b", "local/UPPER", "local/-x", "fake/proxy-a",
                                 "local/../etc", "local/a b", "local/" + "a" * 64, None])
def test_malformed_ids(bad):
    with pytest.raises(BadRequest):
        parse_id(bad)


@pytest.mark.parametrize("bad", ["", "A", "a_b", "../x", "a/b", "-a", "a" * 64])
def test_names_must_be_dns_labels(bad):
    with pytest.raises(BadRequest):
        check_name(bad)


def test_the_name_lock_excludes_threads_and_waits_until_the_deadline(tmp_path):
    s = Store(str(tmp_path))
    s.ensure()
    held = threading.Event()
    release = threading.Event()

    def holder():
        with s.name_lock("proxy-a", Deadline.after(5)):
            held.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(5)
    assert s.name_locked("proxy-a")
    start = time.monotonic()
    with pytest.raises(Busy), s.name_lock("proxy-a", Deadline.after(0.2)):
        pass
    assert 0.15 <= time.monotonic() - start < 1.5
    release.set()
    t.join(5)
    assert not s.name_locked("proxy-a")
    with s.name_lock("proxy-a", Deadline.after(1)):
        pass
