"""The latest check result of each provider, as the raw document the
feature stored (`fleet:result:<provider>`). The store neither decodes nor
judges it: `save_if` takes the caller's decision on the stored value, under
WATCH, so the decision and the write are one compare-and-set."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import redis

from fleet.store import keys

Raw = bytes | str | None


class Results:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def get(self, provider: str) -> Raw:
        return self._redis.get(keys.result(provider))

    def get_many(self, providers: Iterable[str], chunk: int = 20) -> Iterator[list[Raw]]:
        """The stored values of `providers`, `chunk` keys per read (absent: None)."""
        names = list(providers)
        for i in range(0, len(names), chunk):
            yield self._redis.mget([keys.result(n) for n in names[i : i + chunk]])

    def all(self) -> list[Raw]:
        """Every stored value, in key order."""
        found = sorted(self._redis.scan_iter(match=keys.RESULT + "*", count=1000))
        return list(self._redis.mget(found)) if found else []

    def save_if(self, provider: str, payload: str, replace: Callable[[Raw], bool]) -> bool:
        """Store `payload` when `replace(the stored value)` says so, atomically
        (retried when another writer got in between). Returns whether it stored."""
        key = keys.result(provider)
        with self._redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves Pipeline.watch unannotated
                    if not replace(pipe.get(key)):
                        pipe.unwatch()
                        return False
                    pipe.multi()
                    pipe.set(key, payload)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue
