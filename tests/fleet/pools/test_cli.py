"""`fleet get pools`, `fleet scale pool` and `fleet get px -l pool=` as
applied: the real CLI (`fleet.cli.subcommands.main`) against the fake API
server (fleet/testing/kubeapi.py: the shipped CRD's validation and its scale
subresource) through --kubeconfig; the pool controller (test_cluster's
`Kubelet`) makes the members Ready so the table has something to say."""

from __future__ import annotations

import pytest

from fleet.cli.subcommands import main
from fleet.testing.pools import NS, Kubelet, members
from tests.fleet.pools.test_cluster import apply_pool, converge, env, pool_obj  # noqa: F401


def fleet(api, *argv):
    return main([*argv, "--kubeconfig", api.kubeconfig_path])


def test_get_pools_prints_the_printer_columns(env, capsys):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=4)
    converge(ctl, Kubelet(api, clock), clock)
    assert fleet(api, "get", "pools") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAMESPACE", "NAME", "DESIRED", "READY", "AVAILABLE", "AGE"]
    assert out[1].split()[:5] == [NS, "web", "4", "4", "4"]
    assert fleet(api, "get", "pxp", "web", "-n", NS) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["NAME", "DESIRED", "READY", "AVAILABLE"] and out[1].split()[:4] == ["web", "4", "4", "4"]
    assert fleet(api, "get", "pools", "nope", "-n", NS) == 1
    assert "proxypool 'nope' not found" in capsys.readouterr().err
    assert fleet(api, "get", "pools", "-o", "name") == 0
    assert capsys.readouterr().out == f"proxypool.crawl.example.com/{NS}/web\n"
    assert fleet(api, "get", "pools", "-n", NS, "-o", "wide") == 0
    head, row = (line.split() for line in capsys.readouterr().out.splitlines())
    assert head[-4:] == ["UP-TO-DATE", "UNHEALTHY", "PROVIDERS", "AUTOSCALE"] and row[-2] != "<none>"


def test_scale_pool_patches_the_scale_subresource_and_the_controller_follows(env, capsys):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=4)
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    n = len(api.requests)
    assert fleet(api, "scale", "pool", "web", "--replicas", "7", "-n", NS) == 0
    assert "scaled to 7" in capsys.readouterr().out
    patches = [r for r in api.requests[n:] if r.method == "PATCH"]
    assert [r.path.rsplit("/", 1)[1] for r in patches] == ["scale"]
    assert pool_obj(api)["spec"]["replicas"] == 7
    converge(ctl, kubelet, clock)
    assert len(members(api)) == 7


@pytest.mark.parametrize("replicas, message", [
    ("-1", "between 0 and 10000"), ("3.5", "whole number"), ("many", "whole number"), ("10001", "between 0 and 10000")])
def test_scale_refuses_a_bad_n_before_any_request(env, capsys, replicas, message):  # noqa: F811
    api = env[0]
    apply_pool(api, replicas=4)
    n = len(api.requests)
    assert fleet(api, "scale", "pool", "web", "--replicas", replicas, "-n", NS) == 2
    assert message in capsys.readouterr().err and len(api.requests) == n


def test_scale_refuses_past_autoscale_max_and_names_a_missing_pool(env, capsys):  # noqa: F811
    api = env[0]
    apply_pool(api, replicas=4, autoscale={"min": 2, "max": 6})
    assert fleet(api, "scale", "pool", "web", "--replicas", "9", "-n", NS) == 2
    err = capsys.readouterr().err
    assert "past autoscale.max (6)" in err and pool_obj(api)["spec"]["replicas"] == 4
    assert fleet(api, "scale", "pool", "web", "--replicas", "1", "-n", NS) == 2
    assert "below autoscale.min (2)" in capsys.readouterr().err
    assert fleet(api, "scale", "pool", "other", "--replicas", "3", "-n", NS) == 1
    assert "proxypool 'other' not found in namespace 'crawl'" in capsys.readouterr().err
    assert fleet(api, "scale", "deployment", "web", "--replicas", "3") == 2
    assert "fleet scale knows pool" in capsys.readouterr().err


def test_get_px_selector_accepts_only_a_pool(capsys):
    assert main(["get", "px", "-l", "app=web"]) == 2
    assert "only pool=NAME" in capsys.readouterr().err
    assert main(["get", "ph", "-l", "pool=web"]) == 2
    assert "only fleet get px has one" in capsys.readouterr().err
