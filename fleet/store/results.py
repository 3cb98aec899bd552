"""The latest check result of each provider, as the raw document the
feature stored (`fleet:result:<provider>`). The store neither decodes nor
judges it beyond the one number its compare-and-set needs: `save_if_newer`
is one Lua script (one round trip) that compares `checkedAt`, stores, clears
the provider's overdue mark and hands back the previous document for the
feature to read (`fleet.health.stored`) and, when asked, the Kubernetes
writer's cache entry of the provider's object (`fleet.store.statuses`), so a
record's Redis work before its API write is that one round trip."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import redis

from fleet.store import keys, scripts

Raw = bytes | str | None

# The script's ARGV, in order (fleet/store/lua/results/save_if_newer.lua reads them into these names at its top).
ARGV: dict[str, tuple[str, ...]] = {"save_if_newer": ("checked_at", "payload", "latest", "earliest", "replace")}
LUA = scripts.load(ARGV, folder="results")  # read once


class Results:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        [self._save_if_newer] = LUA.register(client, "save_if_newer")

    def get(self, provider: str) -> Raw:
        return self._redis.get(keys.result(provider))

    def get_many(self, providers: Iterable[str], chunk: int = 20) -> Iterator[list[Raw]]:
        """The stored values of `providers`, `chunk` keys per read (absent: None)."""
        names = list(providers)
        for i in range(0, len(names), chunk):
            yield self._redis.mget([keys.result(n) for n in names[i : i + chunk]])

    def all(self) -> list[tuple[str, Raw]]:
        """Every (provider, stored value), in key order."""
        found = sorted(self._redis.scan_iter(match=keys.RESULT + "*", count=1000))
        names = [(k.decode() if isinstance(k, bytes) else k)[len(keys.RESULT):] for k in found]
        return list(zip(names, self._redis.mget(found), strict=True)) if found else []

    def save_if_newer(self, provider: str, checked_at: float, payload: str, latest: float, earliest: float,
                      replace: Raw = None, status: tuple[str, str | None, str] | None = None) -> tuple[bool, Raw, Raw]:
        """Store `payload` unless the stored document's `checkedAt` (a number
        in [earliest, latest]; anything else counts as absent) is at least
        `checked_at`, and clear the overdue mark, in one script. `replace`:
        a stored value the caller found unusable, replaced whatever its
        `checkedAt`. `status` (plural, namespace, name): also read that
        status cache entry (`Statuses.get`) in the same round trip.
        Returns (stored, the previous value, the cache entry)."""
        keys_ = [keys.result(provider), keys.overdue(provider)] + ([keys.status(*status)] if status else [])
        got: Any = self._save_if_newer(keys=keys_, args=LUA.argv(
            "save_if_newer", checked_at=repr(float(checked_at)), payload=payload, latest=repr(float(latest)),
            earliest=repr(float(earliest)), replace=replace or ""))
        got = list(got) + [None] * (3 - len(got))  # a Lua false is a nil: redis-py may cut the array there
        return bool(got[0]), (got[1] or None), (got[2] or None)
