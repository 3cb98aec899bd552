"""The kubernetes Checker through the real client against an HTTP-level fake."""

import socket
import time

import pytest

from fleet.testing.kubeapi import status_body
from providers import base
from providers.base import Deadline
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.provider import new


def provider_for(kubeconfig):
    return new("local", KubernetesConfig(kubeconfig=kubeconfig))


def test_reachable(kubeapi):
    kubeapi.pods.append({"metadata": {"name": "p", "namespace": "ns", "labels": {base.LABEL_MANAGED: "true"}}})
    (ts,) = provider_for(kubeapi.kubeconfig_path).check(Deadline.after(5))
    assert (ts.name, ts.address, ts.ready, ts.reason, ts.message) == (
        "apiserver", kubeapi.server.url, True, "Reachable", "")
    assert ts.latency > 0


def test_list_options(kubeapi):
    provider_for(kubeapi.kubeconfig_path).check(Deadline.after(5))
    (req,) = kubeapi.requests
    assert (req.method, req.path) == ("GET", "/api/v1/pods")  # cluster-wide, no namespace
    assert req.query["limit"] == ["1"]
    assert req.query["labelSelector"] == ["proxy-operator-managed=true"]


@pytest.mark.parametrize(
    ("code", "reason", "want"),
    [
        (401, "Unauthorized", "Unauthorized"),
        (403, "Forbidden", "Forbidden"),
        (500, "InternalError", "APIError"),
        (504, "Timeout", "Timeout"),
        (500, "ServerTimeout", "Timeout"),
        (429, "TooManyRequests", "APIError"),
    ],
)
def test_failure_reasons(kubeapi, code, reason, want):
    kubeapi.script("GET", "^/api/v1/pods$", lambda req: (code, status_body(code, reason, "etcd says no")))
    (ts,) = provider_for(kubeapi.kubeconfig_path).check(Deadline.after(5))
    assert not ts.ready
    assert ts.reason == want
    assert ts.message == f"{code} {_http_reason(code)}: etcd says no"


def _http_reason(code):
    from http import HTTPStatus

    return HTTPStatus(code).phrase


def test_slow_server_is_timeout_and_returns_promptly(kubeapi):
    kubeapi.delay = 3
    start = time.monotonic()
    (ts,) = provider_for(kubeapi.kubeconfig_path).check(Deadline.after(0.3))
    assert time.monotonic() - start < 2
    assert (ts.ready, ts.reason) == (False, "Timeout")


def test_expired_deadline_is_timeout_without_a_request(kubeapi):
    (ts,) = provider_for(kubeapi.kubeconfig_path).check(Deadline.after(-1))
    assert (ts.ready, ts.reason) == (False, "Timeout")
    assert kubeapi.requests == []


def test_refused_connection_is_unreachable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens
    from fleet.testing.kubeapi import FakeKubeAPI, Server

    srv = Server(FakeKubeAPI())
    srv.url = f"http://127.0.0.1:{port}"
    path = srv.kubeconfig(str(tmp_path / "kc"))
    srv.httpd.server_close()
    (ts,) = provider_for(path).check(Deadline.after(5))
    assert (ts.ready, ts.reason, ts.address) == (False, "Unreachable", f"http://127.0.0.1:{port}")
    assert "Connection refused" in ts.message or "refused" in ts.message.lower()


def test_missing_credentials_are_a_verdict(tmp_path):
    (ts,) = provider_for(str(tmp_path / "none")).check(Deadline.after(5))
    assert (ts.ready, ts.reason) == (False, "Unreachable")
    assert "ConfigException" in ts.message or "No such file" in ts.message
