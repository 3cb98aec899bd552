"""The lease script's filters the gateway adds (fleet.store.leases, on fakeredis with Lua): `namespaces` (the
Proxy namespaces a client may use), `pool` (the ProxyPool the username names: the endpoint's `pool`) and `skip`
(the proxies a request already tried), with stickiness."""

from __future__ import annotations

import pytest

from fleet.store.leases import Busy, Granted, NoProxy
from tests.fleet.leases.test_store import lease, report, running, store  # noqa: F401


@pytest.mark.parametrize(("namespaces", "skip", "want"), [
    ((), (), {"crawl/a", "crawl/b", "eu/c", "eu-x/d"}),
    (("crawl",), (), {"crawl/a", "crawl/b"}),
    (("eu",), (), {"eu/c"}),  # not eu-x: the namespace, not a prefix
    (("eu", "eu-x"), (), {"eu/c", "eu-x/d"}),
    (("nowhere",), (), set()),
    ((), ("crawl/a", "eu/c"), {"crawl/b", "eu-x/d"}),
    (("crawl",), ("crawl/a",), {"crawl/b"}),
    (("crawl",), ("crawl/a", "crawl/b"), set()),
])
def test_namespaces_and_skip_filter_the_candidates(store, namespaces, skip, want):  # noqa: F811
    for k in ("crawl/a", "crawl/b", "eu/c", "eu-x/d"):
        running(store, k)
    got = set()
    for _ in range(6):
        _, g = lease(store, max_per_proxy=10, namespaces=namespaces, skip=skip, rand=0.3)
        if isinstance(g, Granted):
            got.add(g.proxy)
        else:
            assert isinstance(g, NoProxy) and not want
    assert got == want


def test_a_skipped_sticky_proxy_moves_the_key_and_full_filtered_proxies_are_busy(store):  # noqa: F811
    running(store, "crawl/a")
    running(store, "crawl/b")
    _, first = lease(store, max_per_proxy=5, sticky="gw/acme/s1")
    _, again = lease(store, max_per_proxy=5, sticky="gw/acme/s1")
    assert again.proxy == first.proxy
    _, moved = lease(store, max_per_proxy=5, sticky="gw/acme/s1", skip=(first.proxy,))
    assert moved.proxy != first.proxy
    _, stays = lease(store, max_per_proxy=5, sticky="gw/acme/s1")
    assert stays.proxy == moved.proxy
    for _ in range(4):
        lease(store, max_per_proxy=5, namespaces=("crawl",), skip=(first.proxy,))
    assert isinstance(lease(store, max_per_proxy=5, skip=(first.proxy,))[1], Busy)  # the one left is full


@pytest.mark.parametrize(("pool", "namespaces", "want"), [
    ("", (), {"crawl/web-a", "crawl/web-b", "crawl/api-c", "crawl/lone", "eu/web-d"}),
    ("web", (), {"crawl/web-a", "crawl/web-b", "eu/web-d"}),  # a pool's name, in every namespace the client may use
    ("web", ("crawl",), {"crawl/web-a", "crawl/web-b"}),
    ("api", (), {"crawl/api-c"}),
    ("we", (), set()),  # the name, not a prefix
    ("nowhere", (), set()),
])
def test_pool_filters_by_the_endpoints_pool(store, pool, namespaces, want):  # noqa: F811
    for k, member_of in (("crawl/web-a", "web"), ("crawl/web-b", "web"), ("crawl/api-c", "api"), ("crawl/lone", None),
                         ("eu/web-d", "web")):
        running(store, k, pool=member_of)
    got = set()
    for _ in range(8):
        _, g = lease(store, max_per_proxy=10, pool=pool, namespaces=namespaces, rand=0.3)
        if isinstance(g, Granted):
            got.add(g.proxy)
        else:
            assert isinstance(g, NoProxy) and not want
    assert got == want


def test_a_refused_request_naming_a_pool_is_its_demand(store):  # noqa: F811
    """What the pool controller autoscales on: refused (busy or none) lease requests per pool name over a window;
    a granted one, or a refused one naming no pool, counts nothing."""
    from tests.fleet.leases.test_store import NOW

    running(store, "crawl/web-a", pool="web")
    assert isinstance(lease(store, max_per_proxy=1, pool="web")[1], Granted)
    assert store.leases.refused("web", NOW, 60) == 0
    assert isinstance(lease(store, max_per_proxy=1, pool="web")[1], Busy)  # full
    assert isinstance(lease(store, max_per_proxy=1)[1], Busy)  # no pool named: nobody's demand
    assert isinstance(lease(store, max_per_proxy=1, pool="api")[1], NoProxy)  # no member at all
    assert (store.leases.refused("web", NOW, 60), store.leases.refused("api", NOW, 60)) == (1, 1)
    lease(store, now=NOW + 30, max_per_proxy=1, pool="web")
    assert store.leases.refused("web", NOW + 30, 60) == 2
    assert store.leases.refused("web", NOW + 80, 60) == 1  # the first left the window
    assert store.leases.refused("web", NOW + 200, 60) == 0
    loads, cooling = store.leases.usage(NOW)
    assert loads == {"crawl/web-a": 1} and cooling == {}
    for target in ("a.example", "b.example"):
        report(store, "blocked", proxy="crawl/web-a", target=target)
    assert store.leases.usage(NOW) == ({"crawl/web-a": 1}, {"crawl/web-a": 2})
    assert store.leases.usage(NOW + 3600)[1] == {}  # ended
