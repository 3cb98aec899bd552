"""The discovery and lease API (issue 14): `fleet api`, a process of its own
serving crawlers the fleet's Running, healthy proxies on `:8090`.

Modules: `requests` (what a request may say: bodies, filters, lease ids;
pure), `decide` (what is leasable, the answers' bodies and status codes;
pure), `openapi` (the OpenAPI document it serves), `metrics` (its /metrics),
`app` (the ASGI application: routing, auth, bounded bodies, spans; thin
I/O over `fleet.store.leases`), `process` (the token, the server, the
process), `client` (the small client behind `fleet lease`).

The state lives in Redis (`fleet.store.leases`, one Lua script per
decision), so any number of API processes serve one consistent pool.
"""
