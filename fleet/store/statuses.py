"""The Kubernetes writer's cache of the objects it last wrote or read
(`fleet:status:<plural>:[<namespace>/]<name>`): a raw document holding the
object's `resourceVersion` and status, shared by controller replicas, with a
TTL. `fleet.kube.Writer` encodes and decodes it; a write with an older
resourceVersion than the cached one (a slower replica) is not kept, so the
cache never goes back in time."""

from __future__ import annotations

import redis

from fleet.store import keys
from fleet.store.results import Raw

# KEYS: the entry. ARGV: resourceVersion, document, TTL (ms). 1 when stored.
# resourceVersions are compared only when both are numbers (etcd's are).
_PUT = """
local cur = redis.call('get', KEYS[1])
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  if ok and type(doc) == 'table' then
    local old, new = tonumber(doc['resourceVersion']), tonumber(ARGV[1])
    if old and new and old > new then
      return 0
    end
  end
end
redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


class Statuses:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._put = client.register_script(_PUT)

    def get(self, plural: str, namespace: str | None, name: str) -> Raw:
        return self._redis.get(keys.status(plural, namespace, name))

    def put(self, plural: str, namespace: str | None, name: str, resource_version: str, doc: str, ttl: float) -> bool:
        """Keep `doc` unless the entry holds a newer resourceVersion."""
        return bool(self._put(keys=[keys.status(plural, namespace, name)],
                              args=[resource_version, doc, max(1, int(ttl * 1000))]))

    def drop(self, plural: str, namespace: str | None, name: str) -> None:
        self._redis.delete(keys.status(plural, namespace, name))
