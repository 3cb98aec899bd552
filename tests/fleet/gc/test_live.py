"""The live Proxy UIDs in cluster mode: a fresh paged LIST through the real
kubernetes client against the HTTP-level fake API; any error makes the set
unavailable (never smaller)."""

from __future__ import annotations

import time

import fakeredis
import pytest

from fleet import kube
from fleet.gc import live
from fleet.kube import PROXY
from fleet.settings import Settings
from fleet.store import Store


def proxy(name: str, ns: str) -> dict:
    return {"apiVersion": PROXY.api_version, "kind": PROXY.kind, "metadata": {"name": name, "namespace": ns},
            "spec": {"provider": "lab"}}


@pytest.fixture
def read(kubeapi):
    fn, mode = live.source(Settings(kubeconfig=kubeapi.kubeconfig_path, proxy_namespaces="ns"), Store(fakeredis.FakeRedis()))
    assert mode == "Proxies listed from the cluster (ns)"
    return fn


def test_every_namespace_every_page(kubeapi):
    uids = {kubeapi.add(proxy(f"px{i}", f"ns{i % 3}"), plural="proxies")["metadata"]["uid"] for i in range(7)}
    api, _ = kube.api_client(Settings(kubeconfig=kubeapi.kubeconfig_path))
    assert live.cluster(api, page=2) == uids
    pages = [r for r in kubeapi.requests if r.path.endswith("/proxies")]
    assert len(pages) == 4 and "continue" in pages[-1].query


def test_only_the_namespaces_of_the_scope_are_listed(kubeapi):
    """The namespace guard's other half: the live set covers --proxy-namespaces, one namespaced LIST each."""
    uids = {ns: kubeapi.add(proxy("px", ns), plural="proxies")["metadata"]["uid"] for ns in ("a", "b", "c")}
    api, _ = kube.api_client(Settings(kubeconfig=kubeapi.kubeconfig_path))
    assert live.cluster(api, namespaces=("a", "c")) == {uids["a"], uids["c"]}
    paths = [r.path for r in kubeapi.requests if r.path.endswith("/proxies")]
    assert paths == ["/apis/crawl.example.com/v1alpha1/namespaces/a/proxies", "/apis/crawl.example.com/v1alpha1/namespaces/c/proxies"]
    assert live.cluster(api, namespaces=("*",)) == set(uids.values())
    assert live.scope(Settings(proxy_namespaces="a,c")) == ("a", "c")
    assert live.scope(Settings(proxy_namespaces="a", proxies="/etc/fleet/proxies")) == ("*",)  # standalone: every manifest


def test_a_refused_list_is_unavailable(kubeapi, read):
    kubeapi.add(proxy("px", "ns"), plural="proxies")
    assert len(read()) == 1
    kubeapi.deny("list", "proxies")
    with pytest.raises(live.Unavailable, match="listing Proxies"):
        read()


def test_a_missing_crd_is_unavailable(kubeapi, read):
    kubeapi.remove_crd("proxies")
    with pytest.raises(live.Unavailable):
        read()


def test_standalone_reads_the_objects_in_redis_and_no_source_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    r = fakeredis.FakeRedis()
    store = Store(r)
    r.hset("fleet:px:objects", "crawl/a", '{"metadata": {"uid": "u-a"}}')
    fn, mode = live.source(Settings(proxies=str(tmp_path)), store)
    with pytest.raises(live.Unavailable, match="not matched to their manifests"):
        fn()  # the controller has not synced the manifests into Redis: the set could be short
    store.proxies.mark_synced(time.time())
    assert fn() == {"u-a"} and mode == "standalone Proxies in Redis"
    store.proxies.mark_synced(time.time() - live.MAX_SYNC_AGE - 1)
    with pytest.raises(live.Unavailable):
        fn()
    with pytest.raises(live.NoSource):
        live.source(Settings(), store)
