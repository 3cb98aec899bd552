"""`fleet.kube.Watcher` (list + watch of one kind across namespaces)
with the real kubernetes client against the HTTP-level fake API; and the
fake's watch itself, as the client's own `Watch().stream` consumes it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from fleet import kube
from fleet.kube import PROXY, Backoff, Watcher, Writer
from fleet.proxies.model import FINALIZER
from fleet.testing.kubeapi import FakeKubeAPI, Server, Stream, status_body
from providers.kubernetes.client import load_configuration

GROUP, VERSION, PLURAL = PROXY.group, PROXY.version, PROXY.plural
FAST = Backoff(initial=0.02, maximum=0.1, jitter=0.1)
SENTINEL = "s3cr3t-SENTINEL-cloud-init"


def proxy(name: str, ns: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": PROXY.api_version, "kind": PROXY.kind, "metadata": {"name": name, "namespace": ns},
            "spec": {"provider": "kvm-home", "cloudInit": {"inline": SENTINEL}, **spec}}


def until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what or predicate}")


class Recorder:
    """What the consumer saw: (type, namespace/name, resourceVersion) per event, and each on_synced set."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.synced: list[list[str]] = []
        self.lock = threading.Lock()

    def on_event(self, type_: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((type_, kube.object_name(obj) or "", obj["metadata"].get("resourceVersion", "")))

    def on_synced(self, objs: list[dict[str, Any]]) -> None:
        with self.lock:
            self.synced.append(sorted(kube.object_name(o) or "" for o in objs))

    def changes(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(t, n) for t, n, _ in self.events if t != kube.SYNC]


@pytest.fixture
def api(kubeapi):
    return client.ApiClient(load_configuration(kubeapi.kubeconfig_path))


@pytest.fixture
def start(api):
    """Start a Watcher of Proxies in a thread; stop and join them all at the end."""
    running: list[tuple[threading.Event, threading.Thread]] = []

    def go(rec: Recorder, client_or_factory: Any = api, **kw: Any) -> tuple[Watcher, threading.Event, threading.Thread]:
        kw.setdefault("backoff", FAST)
        w = Watcher(client_or_factory, PROXY, rec.on_event, on_synced=rec.on_synced, **kw)
        stop = threading.Event()
        t = threading.Thread(target=w.run, args=(stop,), daemon=True)
        t.start()
        running.append((stop, t))
        return w, stop, t

    yield go
    for stop, _ in running:
        stop.set()
    for _, t in running:
        t.join(5)
        assert not t.is_alive()


# --- the Watcher -------------------------------------------------------------------------


def test_the_initial_list_is_delivered_then_synced(kubeapi, start):
    kubeapi.add(proxy("px1"), plural="proxies")
    kubeapi.add(proxy("px2", "team-b"), plural="proxies")
    kubeapi.add({"metadata": {"name": "kvm-home"}})  # a ProviderHealth: another kind
    rec = Recorder()
    w, _, _ = start(rec)
    assert w.synced.wait(5)
    assert sorted((t, n) for t, n, _ in rec.events) == [("SYNC", "team-a/px1"), ("SYNC", "team-b/px2")]
    assert rec.synced == [["team-a/px1", "team-b/px2"]]
    assert w.resource_version == str(kubeapi.resource_version) and w.lists == 1
    list_req = next(r for r in kubeapi.requests if r.path.endswith("/proxies"))
    assert list_req.path == f"/apis/{GROUP}/{VERSION}/proxies"  # across all namespaces
    assert list_req.query["limit"] == [str(kube.watch.PAGE_SIZE)]


def test_a_list_of_many_pages_is_delivered_whole(kubeapi, start):
    for i in range(7):
        kubeapi.add(proxy(f"px{i}", f"ns{i % 3}"), plural="proxies")
    rec = Recorder()
    w, _, _ = start(rec, page_size=2)
    assert w.synced.wait(5)
    assert len(rec.synced[0]) == 7 and len(rec.events) == 7
    pages = [r for r in kubeapi.requests if r.path.endswith("/proxies") and "watch" not in r.query]
    assert len(pages) == 4 and "continue" in pages[-1].query


def test_later_changes_are_delivered_in_order(kubeapi, start, api):
    kubeapi.add(proxy("px1"), plural="proxies")
    rec = Recorder()
    w, _, _ = start(rec)
    assert w.synced.wait(5)
    until(lambda: kubeapi.events.open, what="the watch to open")
    writer = Writer(api, "blue")
    custom = client.CustomObjectsApi(api)
    rv = kubeapi.objects["team-a/px1"]["metadata"]["resourceVersion"]
    rv = writer.patch_finalizers(PROXY, "team-a", "px1", rv, [FINALIZER])["metadata"]["resourceVersion"]
    custom.create_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL, proxy("px2", "team-b"))
    rv = writer.patch_status(PROXY, "team-a", "px1", rv, {"phase": "Running"})["metadata"]["resourceVersion"]
    custom.delete_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "px1")  # marked: a finalizer
    custom.delete_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL, "px2")  # gone at once
    rv = kubeapi.objects["team-a/px1"]["metadata"]["resourceVersion"]
    writer.patch_finalizers(PROXY, "team-a", "px1", rv, [])  # released: gone
    want = [("MODIFIED", "team-a/px1"), ("ADDED", "team-b/px2"), ("MODIFIED", "team-a/px1"), ("MODIFIED", "team-a/px1"),
            ("DELETED", "team-b/px2"), ("DELETED", "team-a/px1")]
    until(lambda: len(rec.changes()) >= len(want), what="six changes")
    assert rec.changes() == want
    rvs = [int(rv) for t, _, rv in rec.events if t != "SYNC"]
    assert rvs == sorted(rvs) and w.resource_version == str(rvs[-1]) == str(kubeapi.resource_version)
    assert w.lists == 1


def test_bookmarks_advance_the_resource_version(kubeapi, start):
    kubeapi.events.bookmark_interval = 0.05
    rec = Recorder()
    w, _, _ = start(rec)
    assert w.synced.wait(5)
    listed = int(w.resource_version)
    for i in range(3):
        kubeapi.add({"apiVersion": "test.example.com/v1", "kind": "Widget", "metadata": {"name": f"w{i}", "namespace": "x"}},
                    plural="widgets")  # other kinds move the resourceVersion, not ours
    until(lambda: int(w.resource_version) == kubeapi.resource_version, what="a bookmark")
    assert int(w.resource_version) > listed and rec.changes() == []
    watches = [r for r in kubeapi.requests if r.query.get("watch")]
    assert watches[0].query["allowWatchBookmarks"] == ["true"]
    # so a 410 after the window moved on does not follow: history of 2 events, 3 writes later
    kubeapi.events.window = 2
    for i in range(3, 6):
        kubeapi.add({"apiVersion": "test.example.com/v1", "kind": "Widget", "metadata": {"name": f"w{i}", "namespace": "x"}},
                    plural="widgets")
    until(lambda: int(w.resource_version) == kubeapi.resource_version, what="a bookmark")
    kubeapi.drop_watches()  # re-watch from the bookmark: still inside the window
    until(lambda: len([r for r in kubeapi.requests if r.query.get("watch")]) > len(watches), what="a re-watch")
    kubeapi.add(proxy("px1"), plural="proxies")
    until(lambda: rec.changes() == [("ADDED", "team-a/px1")], what="the new proxy")
    assert w.lists == 1


def test_a_410_relists_and_the_consumer_sees_what_was_deleted_while_away(kubeapi, start):
    for name in ("px1", "px2"):
        kubeapi.add(proxy(name), plural="proxies")
    rec = Recorder()
    w, _, _ = start(rec)
    assert w.synced.wait(5)
    until(lambda: kubeapi.events.open, what="the watch to open")
    away = threading.Event()
    away.set()
    kubeapi.script("GET", r"/proxies$", lambda req: (503, status_body(503, "ServiceUnavailable", "restarting"))
                   if away.is_set() and req.query.get("watch") else None)
    kubeapi.drop_watches()
    until(lambda: any(r.query.get("watch") for r in kubeapi.requests[-3:]), what="a refused re-watch")
    kubeapi.delete("team-a/px2")  # deleted while the watcher is away ...
    kubeapi.add(proxy("px3", "team-c"), plural="proxies")
    kubeapi.expire_history()  # ... and the events are gone: 410 on the next watch
    away.clear()
    until(lambda: len(rec.synced) == 2, what="a relist")
    assert rec.synced == [["team-a/px1", "team-a/px2"], ["team-a/px1", "team-c/px3"]]
    assert w.lists == 2
    kubeapi.delete("team-a/px1")  # and it watches again from the new list
    until(lambda: rec.changes() == [("DELETED", "team-a/px1")], what="the delete after the relist")


def test_a_server_restart_resumes_from_the_last_resource_version(tmp_path, start):
    api = FakeKubeAPI()
    server = Server(api).__enter__()
    path = server.kubeconfig(str(tmp_path / "kubeconfig"))
    api.add(proxy("px1"), plural="proxies")
    rec = Recorder()
    w, _, _ = start(rec, client.ApiClient(load_configuration(path)))
    try:
        assert w.synced.wait(5)
        until(lambda: api.events.open, what="the watch to open")
        port = server.port
        server.__exit__(None, None, None)  # the API server goes away, mid-watch
        api.add(proxy("px2"), plural="proxies")  # changes while it is down
        api.add({**proxy("px1"), "spec": {"provider": "kvm-home", "port": 8080}}, plural="proxies")
        time.sleep(0.3)  # a few refused reconnects
        server = Server(api, port=port).__enter__()
        until(lambda: len(rec.changes()) == 2, what="the changes made while down")
        assert rec.changes() == [("ADDED", "team-a/px2"), ("MODIFIED", "team-a/px1")]
        assert w.lists == 1, "resumed from its resourceVersion: no relist"
    finally:
        server.__exit__(None, None, None)


@pytest.mark.parametrize("phase", ["watching", "backing off"])
def test_stop_returns_within_a_second(kubeapi, start, phase):
    kubeapi.events.bookmark_interval = 0.1  # the server notices the closed connection at its next write
    rec = Recorder()
    # the first retry at once, the next one after a minute
    w, stop, t = start(rec, timeout_seconds=300, backoff=Backoff(initial=0.01, factor=6000, maximum=60, jitter=0))
    assert w.synced.wait(5)
    until(lambda: kubeapi.events.open, what="the watch to open")
    if phase == "backing off":
        watches = sum(1 for r in kubeapi.requests if r.query.get("watch"))
        kubeapi.deny("watch", "proxies")
        kubeapi.drop_watches()
        until(lambda: sum(1 for r in kubeapi.requests if r.query.get("watch")) > watches, what="a refused watch")
        time.sleep(0.2)  # now in a 60 s backoff
    began = time.monotonic()
    stop.set()
    t.join(2)
    assert not t.is_alive() and time.monotonic() - began < 1.0
    until(lambda: kubeapi.events.open == 0, what="the server side of the watch to end")


def test_malformed_events_are_skipped_and_a_failing_consumer_does_not_stop_the_loop(kubeapi, start, caplog):
    caplog.set_level(logging.DEBUG)
    kubeapi.add(proxy("px1"), plural="proxies")
    good = proxy("px9")
    good["metadata"]["resourceVersion"] = "99"
    served = threading.Event()

    def scripted(req: Any) -> tuple[int, Any] | None:
        if not req.query.get("watch") or served.is_set():
            return None
        served.set()
        lines: Iterator[dict[str, Any] | bytes] = iter([
            b"this is not json", {"no": "type"}, {"type": "ADDED", "object": "a string"}, {"type": "ADDED", "object": {"metadata": {}}},
            {"type": "ADDED", "object": [1, 2]}, {"type": "WHATEVER", "object": {}}, {"type": "ADDED", "object": proxy("boom")},
            {"type": "ADDED", "object": good},
        ])
        return 200, Stream(lines)

    kubeapi.script("GET", r"/proxies$", scripted)

    class Failing(Recorder):
        def on_event(self, type_: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"] == "boom":
                raise RuntimeError("consumer bug")
            super().on_event(type_, obj)

    rec = Failing()
    w, _, _ = start(rec)
    until(lambda: ("ADDED", "team-a/px9") in rec.changes(), what="the good event")
    assert rec.changes() == [("ADDED", "team-a/px9")]
    until(lambda: w.resource_version != "99", what="the re-watch after the scripted stream ended")
    kubeapi.add(proxy("px2"), plural="proxies")
    until(lambda: ("ADDED", "team-a/px2") in rec.changes(), what="the loop going on")
    assert SENTINEL not in caplog.text, "no object content in the logs"
    assert "on_event failed" in caplog.text and "not JSON" in caplog.text


def test_rbac_or_a_missing_crd_backs_off_and_recovers(kubeapi, start, caplog):
    caplog.set_level(logging.WARNING, logger="fleet.kube.watch")
    kubeapi.remove_crd("proxies")
    kubeapi.add(proxy("px1"), plural="proxies")
    rec = Recorder()
    w, _, _ = start(rec)
    until(lambda: len([r for r in kubeapi.requests if r.path.endswith("/proxies")]) >= 3, what="retries")
    assert not w.synced.is_set()
    errors = [r for r in caplog.records if r.name == "fleet.kube.watch"]
    assert errors and all(r.levelno == logging.ERROR and "Is the Proxy CRD installed" in r.fields["error"] for r in errors)
    kubeapi.missing.clear()
    assert w.synced.wait(5) and rec.synced == [["team-a/px1"]]


def test_a_factory_builds_the_client(kubeapi, start):
    built = []

    def factory() -> client.ApiClient:
        built.append(1)
        return client.ApiClient(load_configuration(kubeapi.kubeconfig_path))

    w, _, _ = start(Recorder(), factory)
    assert w.synced.wait(5) and built == [1]


def test_the_backoff_is_bounded_and_jittered():
    b = Backoff(initial=1, maximum=8, factor=2, jitter=0.25)
    for attempt, base in enumerate([1, 2, 4, 8, 8, 8]):
        delays = {b.delay(attempt) for _ in range(50)}
        assert all(base * 0.75 <= d <= base * 1.25 for d in delays) and len(delays) > 1
    assert b.delay(10_000) <= 10


# --- the fake's watch, as the client's own Watch().stream reads it ----------------------------


def test_the_clients_watch_stream_reads_the_fake(kubeapi, api):
    kubeapi.events.bookmark_interval = 0.05
    kubeapi.add(proxy("px1"), plural="proxies")
    rv = str(kubeapi.resource_version)
    custom = client.CustomObjectsApi(api)
    seen: list[tuple[str, str]] = []

    def writes() -> None:
        until(lambda: kubeapi.events.open, what="the watch")
        kubeapi.add(proxy("px2", "team-b"), plural="proxies")
        kubeapi.add({**proxy("px1"), "status": {"phase": "Running"}}, plural="proxies")
        kubeapi.delete("team-a/px1")

    threading.Thread(target=writes, daemon=True).start()
    w = watch.Watch()
    for event in w.stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=rv,
                          allow_watch_bookmarks=True, timeout_seconds=5):
        obj = event["raw_object"]
        seen.append((event["type"], obj["metadata"].get("name", "")))
        if event["type"] == "DELETED":
            w.stop()
    changes = [s for s in seen if s[0] != "BOOKMARK"]
    assert changes == [("ADDED", "px2"), ("MODIFIED", "px1"), ("DELETED", "px1")]
    assert w.resource_version == str(kubeapi.resource_version)

    # in one namespace, from "0": the current objects first, then bookmarks; the stream ends after timeoutSeconds
    began = time.monotonic()
    seen = [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in w.stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, "team-b", PLURAL, resource_version="0",
        allow_watch_bookmarks=True, timeout_seconds=1)]
    assert seen[0] == ("ADDED", "px2") and {t for t, _ in seen[1:]} == {"BOOKMARK"} and 0.9 < time.monotonic() - began < 3


def test_the_clients_watch_stream_sees_410_as_the_api_server_sends_it(kubeapi, api):
    kubeapi.add(proxy("px1"), plural="proxies")
    old = str(kubeapi.resource_version)
    kubeapi.add(proxy("px2"), plural="proxies")
    kubeapi.expire_history()
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=old,
                                  timeout_seconds=2))
    assert err.value.status == 410 and "Expired" in str(err.value.reason)
    # a window of N events: a watch from before them is gone too
    kubeapi.events.window = 1
    rv = str(kubeapi.resource_version)
    kubeapi.add(proxy("px3"), plural="proxies")
    kubeapi.add(proxy("px4"), plural="proxies")
    with pytest.raises(ApiException):
        list(watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=rv,
                                  timeout_seconds=2))
    events = list(watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                       resource_version=str(kubeapi.resource_version - 1), timeout_seconds=1))
    assert [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events] == [("ADDED", "px4")]
