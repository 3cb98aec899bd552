"""The ASGI app in-process on fakeredis: auth, routes, bounded bodies,
answers, metrics; the token rules; the OpenAPI document is valid."""

from __future__ import annotations

import asyncio
import json

import fakeredis
import pytest
from openapi_spec_validator import validate

from fleet.leases import decide, openapi
from fleet.leases.app import Api, ApiConfig
from fleet.leases.process import TokenError, load_token
from fleet.leases.requests import Filters
from fleet.settings import Settings
from fleet.store import keys
from fleet.store.leases import AsyncLeases

TOKEN = b"s3cret-token-0123456789"
NOW = 1_800_000_000.0


async def call(app, method, path, body=b"", headers=(), query=b"", chunks=None):
    sent = []
    parts = chunks if chunks is not None else [body]
    queue = [{"type": "http.request", "body": c, "more_body": i < len(parts) - 1} for i, c in enumerate(parts)]

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    hdrs = [(k.lower(), v) for k, v in headers]
    await app({"type": "http", "method": method, "path": path, "headers": hdrs, "query_string": query}, receive, send)
    start, payload = sent[0], sent[1]["body"]
    got_headers = dict(start["headers"])
    doc = json.loads(payload) if got_headers[b"content-type"] == b"application/json" else payload
    return start["status"], doc, got_headers


AUTH = ((b"authorization", b"Bearer " + TOKEN),)


@pytest.fixture
def app():
    server = fakeredis.FakeServer()
    a = Api(AsyncLeases(fakeredis.FakeAsyncRedis(server=server)), ApiConfig(token=TOKEN, max_ttl=3600), clock=lambda: NOW,
            rand=lambda: 0.0)
    a.raw = fakeredis.FakeRedis(server=server)
    yield a
    a.raw.close()


def run(coro):
    return asyncio.run(coro)


def test_a_lease_and_its_release(app):
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps({"uid": "u", "ip": "10.0.0.1", "port": 3128, "provider": "lab"}))
    status, doc, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com", "ttl": 60}', AUTH))
    assert status == 200 and doc["url"] == "http://10.0.0.1:3128" and doc["proxy"] == "ns/a" and doc["ttl"] == 60
    assert doc["expiresAt"] == decide.timestamp(NOW + 60)
    status, busy, headers = run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))
    assert status == 409 and busy["retryAfter"] == 60 and headers[b"retry-after"] == b"60"
    status, doc, _ = run(call(app, "POST", f"/v1/leases/{doc['lease']}/release", b"", AUTH))
    assert (status, doc["status"]) == (200, "released")
    status, doc, _ = run(call(app, "GET", "/v1/proxies", headers=AUTH, query=b"provider=lab"))
    assert status == 200 and [p["proxy"] for p in doc["proxies"]] == ["ns/a"]
    status, text, _ = run(call(app, "GET", "/metrics"))
    assert b'proxy_operator_lease_requests_total{result="granted"} 1.0' in text
    assert b'proxy_operator_lease_requests_total{result="none_free"} 1.0' in text
    assert b"proxy_operator_leases_active 0.0" in text


def test_the_pool_filter_on_lease_and_list(app):
    for key, pool in (("ns/web-a", "web"), ("ns/api-b", "api"), ("ns/lone", None)):
        ep = {"uid": key, "ip": "10.0.0.1", "port": 3128, "provider": "lab", **({"pool": pool} if pool else {})}
        app.raw.hset(keys.PX_ENDPOINTS, key, json.dumps(ep))
    status, doc, _ = run(call(app, "GET", "/v1/proxies", headers=AUTH, query=b"pool=web"))
    assert status == 200 and [(p["proxy"], p["pool"]) for p in doc["proxies"]] == [("ns/web-a", "web")]
    status, doc, _ = run(call(app, "GET", "/v1/proxies", headers=AUTH))
    assert [p["pool"] for p in doc["proxies"]] == ["api", None, "web"]
    for _ in range(2):  # the pool's one member, then it is full: busy, never another pool's
        status, doc, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com", "pool": "api"}', AUTH))
        assert (status, doc.get("proxy")) in ((200, "ns/api-b"), (409, None))
    assert status == 409
    status, doc, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com", "pool": "gone"}', AUTH))
    assert status == 503 and "pool=gone" in doc["error"]
    status, doc, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com", "pool": "Bad"}', AUTH))
    assert (status, doc["field"]) == (400, "pool")


@pytest.mark.parametrize("headers, why", [
    ((), "missing"),
    (((b"authorization", b"Bearer wrong"),), "wrong"),
    (((b"authorization", TOKEN),), "wrong"),
    (((b"authorization", b"Basic " + TOKEN),), "wrong"),
])
def test_auth_refusals(app, headers, why):
    for method, path, body in (("POST", "/v1/leases", b'{"target": "a.b"}'), ("GET", "/v1/proxies", b""),
                               ("POST", "/v1/reports", b"{}"), ("POST", "/v1/leases/" + "0" * 32 + "/release", b"")):
        status, doc, headers_out = run(call(app, method, path, body, headers))
        assert status == 401 and doc["field"] == "authorization" and why in doc["error"]
        assert headers_out[b"www-authenticate"] == b'Bearer realm="fleet"'
    assert app.raw.keys("fleet:lease:*") == []


def test_healthz_metrics_and_openapi_need_no_token(app):
    status, doc, _ = run(call(app, "GET", "/healthz"))
    assert status == 200 and doc == {"ok": True, "insecure": False}
    assert run(call(app, "GET", "/metrics"))[0] == 200
    status, doc, _ = run(call(app, "GET", "/openapi.json"))
    assert status == 200 and doc["openapi"].startswith("3.")


def test_insecure_says_so_on_healthz():
    a = Api(AsyncLeases(fakeredis.FakeAsyncRedis()), ApiConfig(token=None))
    status, doc, _ = run(call(a, "GET", "/healthz"))
    assert status == 200 and doc["insecure"] is True and "without authentication" in doc["warning"]
    assert run(call(a, "POST", "/v1/leases", b'{"target": "a.b"}'))[0] == 503  # no token needed; no proxy


def test_bodies_are_bounded(app):
    big = b'{"target": "' + b"a" * (70 * 1024) + b'"}'
    status, doc, _ = run(call(app, "POST", "/v1/leases", big, (*AUTH, (b"content-length", str(len(big)).encode()))))
    assert (status, doc["field"]) == (413, "body")
    status, doc, _ = run(call(app, "POST", "/v1/leases", headers=AUTH, chunks=[b"{" * 40000, b" " * 40000]))
    assert (status, doc["field"]) == (413, "body")


def test_unknown_paths_and_methods(app):
    assert run(call(app, "GET", "/nope"))[0] == 404
    status, _, headers = run(call(app, "GET", "/v1/leases", headers=AUTH))
    assert status == 405 and headers[b"allow"] == b"POST"


def test_the_openapi_document_is_valid():
    for insecure in (False, True):
        validate(openapi.document(3600, 300, 1, insecure))


def test_listing_rules():
    eps = {"ns/a": json.dumps({"uid": "1", "ip": "1.1.1.1", "port": 1, "provider": "lab"}),
           "ns/b": json.dumps({"uid": "2", "ip": "1.1.1.2", "port": 1, "provider": "lab"}),
           "ns/c": json.dumps({"uid": "3", "ip": "1.1.1.3", "port": 1, "provider": "gcp"}),
           "ns/bad": "{"}
    verdicts = {"ns/a": json.dumps({"uid": "1", "healthy": False}),
                "ns/b": json.dumps({"uid": "old", "healthy": False, "egressIP": "203.0.113.1"})}
    got = decide.listing(eps, verdicts, {"ns/b": 1}, {"ns/b": NOW + 5}, Filters(provider="lab"), 2, NOW)
    assert got == [{"proxy": "ns/b", "ip": "1.1.1.2", "port": 1, "egressIP": None, "provider": "lab", "region": None,
                    "zone": None, "pool": None, "leases": 1, "capacity": 2, "coolingUntil": decide.timestamp(NOW + 5)}]
    verdicts["ns/b"] = json.dumps({"uid": "2", "healthy": True, "egressIP": "203.0.113.2"})
    assert decide.listing(eps, verdicts, {}, {}, Filters(provider="lab"), 2, NOW)[0]["egressIP"] == "203.0.113.2"


@pytest.mark.parametrize("verdict, egress", [
    (None, None),
    ({"uid": "u", "healthy": True, "egressIP": "198.51.100.4"}, "198.51.100.4"),
    ({"uid": "u", "healthy": True, "egressIP": ""}, None),
    ({"uid": "u", "healthy": True, "egressIP": 7}, None),
    ({"uid": "u", "healthy": True}, None),
    ({"uid": "other", "healthy": True, "egressIP": "198.51.100.4"}, None),
])
def test_egress_rules(verdict, egress):
    assert decide.egress_of({"uid": "u"}, verdict) == egress


@pytest.mark.parametrize("got, status, state", [
    (["released"], 200, "released"), (["revoked", "gone"], 200, "revoked"), (["revoked", "unhealthy"], 200, "revoked"),
    (["revoked", "replaced"], 200, "revoked"), (["expired"], 404, None), (["unknown"], 404, None),
])
def test_release_answers(got, status, state):
    code, body = decide.released("0" * 32, got)
    assert code == status and body.get("status") == state


def test_a_report_on_a_revoked_lease_is_a_410_naming_the_reason():
    code, body = decide.reported(["revoked", "replaced"], "blocked")
    assert (code, body["field"], body["reason"]) == (410, "lease", "replaced") and "nothing was recorded" in body["error"]


def test_release_is_idempotent_and_a_replaced_instance_is_revoked(app):
    ep = {"uid": "u", "ip": "10.0.0.1", "port": 3128, "provider": "lab", "instance": "i-1"}
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps(ep))
    app.raw.hset(keys.PROBE_VERDICTS, "ns/a", json.dumps({"uid": "u", "healthy": True, "egressIP": "198.51.100.4"}))
    status, first, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))
    assert status == 200 and first["egressIP"] == "198.51.100.4"
    status, listed, _ = run(call(app, "GET", "/v1/proxies", headers=AUTH))
    assert [p["egressIP"] for p in listed["proxies"]] == ["198.51.100.4"]
    path = f"/v1/leases/{first['lease']}/release"
    answers = [run(call(app, "POST", path, b"", AUTH))[:2] for _ in range(2)]
    assert answers == [(200, {"lease": first["lease"], "status": "released", "reason": None})] * 2
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps({**ep, "instance": "i-2"}))  # the same uid, a new instance
    _, second, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps({**ep, "instance": "i-3", "port": 3200}))
    status, rep, _ = run(call(app, "POST", "/v1/reports", json.dumps({"lease": second["lease"], "outcome": "blocked"}).encode(),
                              AUTH))
    assert (status, rep["reason"]) == (410, "replaced")
    path = f"/v1/leases/{second['lease']}/release"
    answers = [run(call(app, "POST", path, b"", AUTH))[:2] for _ in range(2)]
    assert answers[0] == answers[1] and answers[0][0] == 200
    assert answers[0][1]["status"] == "revoked" and answers[0][1]["reason"] == "replaced"
    assert run(call(app, "POST", f"/v1/leases/{'e' * 32}/release", b"", AUTH))[0] == 404  # never granted


@pytest.mark.parametrize("insecure", [False, True])
def test_more_than_one_authorization_header_is_refused(app, insecure):
    if insecure:
        app = Api(AsyncLeases(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())), ApiConfig(token=None))
    good = b"Bearer " + TOKEN
    for pair in ((good, b"Bearer wrong"), (b"Bearer wrong", good), (good, good)):
        for method, path, body in (("POST", "/v1/leases", b'{"target": "a.b"}'), ("GET", "/v1/proxies", b""),
                                   ("POST", "/v1/reports", b"{}"), ("POST", "/v1/leases/" + "0" * 32 + "/release", b"")):
            status, doc, _ = run(call(app, method, path, body, [(b"authorization", v) for v in pair]))
            assert (status, doc["field"]) == (400, "authorization") and "more than one" in doc["error"]
    status, text, _ = run(call(app, "GET", "/metrics"))
    assert b'proxy_operator_lease_requests_total{result="bad_request"} 3.0' in text


def test_busy_and_no_proxy_bodies():
    assert decide.busy(NOW + 0.2, NOW)[2] == 1
    status, body = decide.no_proxy(Filters(provider="lab"))
    assert status == 503 and "provider=lab" in body["error"] and body["freeAt"] is None


def test_token_sources(tmp_path):
    insecure = Settings(insecure_no_auth=True)
    with pytest.raises(TokenError, match="refusing to start"):
        load_token(Settings(), {})
    assert load_token(insecure, {}) is None
    assert load_token(Settings(), {"FLEET_API_TOKEN": " abc \n"}) == b"abc"
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert load_token(Settings(api_token_file=str(f)), {"FLEET_API_TOKEN": "env"}) == b"from-file"
    assert load_token(Settings(api_token_file=str(f), insecure_no_auth=True), {}) == b"from-file"
    f.write_text("  \n")
    with pytest.raises(TokenError, match="empty"):
        load_token(Settings(api_token_file=str(f)), {})
    with pytest.raises(TokenError, match="cannot read"):
        load_token(Settings(api_token_file=str(tmp_path / "none")), {})


def _schema_check(doc, ref: dict, value) -> None:
    """`value` against the document's schema `ref` (components resolved), as a generated client would read it."""
    from openapi_schema_validator import OAS30Validator

    OAS30Validator({**ref, "components": doc["components"]}).validate(value)


def test_the_new_answers_match_the_openapi_document(app):
    doc = openapi.document(3600, 300, 1, False)
    schemas = doc["components"]["schemas"]
    for name in ("Lease", "Proxy"):
        assert schemas[name]["properties"]["egressIP"] == {**schemas[name]["properties"]["egressIP"], "type": "string",
                                                           "nullable": True}
    paths = doc["paths"]
    assert "400" in paths["/v1/leases/{id}/release"]["post"]["responses"]
    gone = paths["/v1/reports"]["post"]["responses"]["410"]["content"]["application/json"]["schema"]
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps({"uid": "u", "ip": "10.0.0.1", "port": 3128, "provider": "lab",
                                                        "instance": "i-1"}))
    app.raw.hset(keys.PX_ENDPOINTS, "ns/b", json.dumps({"uid": "v", "ip": "10.0.0.2", "port": 3128, "provider": "lab"}))
    app.raw.hset(keys.PROBE_VERDICTS, "ns/a", json.dumps({"uid": "u", "healthy": True, "egressIP": "198.51.100.4"}))
    leases = [run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))[1] for _ in range(2)]
    assert sorted(str(x["egressIP"]) for x in leases) == ["198.51.100.4", "None"]
    listed = run(call(app, "GET", "/v1/proxies", headers=AUTH))[1]
    app.raw.hset(keys.PX_ENDPOINTS, "ns/a", json.dumps({"uid": "u", "ip": "10.0.0.1", "port": 3999, "provider": "lab"}))
    a = next(x for x in leases if x["proxy"] == "ns/a")
    status, refused, _ = run(call(app, "POST", "/v1/reports", json.dumps({"lease": a["lease"], "outcome": "ok"}).encode(), AUTH))
    assert status == 410
    released = [run(call(app, "POST", f"/v1/leases/{a['lease']}/release", b"", AUTH))[1] for _ in range(2)]
    status, twice, _ = run(call(app, "GET", "/v1/proxies", headers=((b"authorization", b"x"), (b"authorization", b"y"))))
    assert status == 400
    from jsonschema.exceptions import ValidationError

    for ref, value in [*(({"$ref": "#/components/schemas/Lease"}, x) for x in leases),
                       *(({"$ref": "#/components/schemas/Proxy"}, x) for x in listed["proxies"]),
                       *(({"$ref": "#/components/schemas/Released"}, x) for x in released),
                       (gone, refused), ({"$ref": "#/components/schemas/Error"}, twice)]:
        _schema_check(doc, ref, value)
    with pytest.raises(ValidationError):  # the check can fail: an egressIP that is not a string
        _schema_check(doc, {"$ref": "#/components/schemas/Lease"}, {**leases[0], "egressIP": 7})
