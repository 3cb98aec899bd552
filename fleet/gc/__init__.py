"""Orphan GC: instances a provider lists as ours whose Proxy is gone are
deleted, one sweep every --gc-interval (docs/architecture.md, "Orphan GC").

`decide` (the orphan matrix, pure), `answers` (a list answer validated at
the boundary, pure), `live` (the live Proxy UIDs, read fresh from Redis or
the cluster), `sweep` (applies them on the controller, state in
`fleet.store.gc`), `metrics` (counters and the last-success gauge), `runtime`
(the controller's sweeper) and `table` (the `fleet gc --dry-run` rows).

Imports infrastructure and `providers`; never `fleet.cli` nor another
feature package (`fleet.proxies`, `fleet.health`).
"""
