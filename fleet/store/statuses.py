"""The Kubernetes writer's cache of the objects it last wrote or read
(`fleet:status:<plural>:[<namespace>/]<name>`): a raw document holding the
object's `resourceVersion` and status, shared by controller replicas, with a
TTL. `fleet.kube.Writer` encodes and decodes it; a write with an older
resourceVersion than the cached one (a slower replica) is not kept, so the
cache never goes back in time: one Lua script, fleet/store/lua/statuses/put.lua
(read once at import by `fleet.store.scripts`)."""

from __future__ import annotations

import redis

from fleet.store import keys, scripts
from fleet.store.results import Raw

# The put script's ARGV, in order (fleet/store/lua/statuses/put.lua reads them into these names at its top;
# tests/fleet/test_store_lua.py compares the two). resourceVersions are compared only when both are numbers.
ARGV: dict[str, tuple[str, ...]] = {"put": ("resource_version", "doc", "ttl_ms")}
LUA = scripts.load(ARGV, folder="statuses")  # read once


class Statuses:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._put = client.register_script(LUA.texts["put"])

    def get(self, plural: str, namespace: str | None, name: str) -> Raw:
        return self._redis.get(keys.status(plural, namespace, name))

    def put(self, plural: str, namespace: str | None, name: str, resource_version: str, doc: str, ttl: float) -> bool:
        """Keep `doc` unless the entry holds a newer resourceVersion."""
        return bool(self._put(keys=[keys.status(plural, namespace, name)],
                              args=LUA.argv("put", resource_version=resource_version, doc=doc,
                                            ttl_ms=max(1, int(ttl * 1000)))))

    def drop(self, plural: str, namespace: str | None, name: str) -> None:
        self._redis.delete(keys.status(plural, namespace, name))
