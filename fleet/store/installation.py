"""One installation per Redis database. The first fleet process to start on a
database writes its installation id (`fleet:installation`); a process of
another installation refuses to start there, naming both, so two fleets never
share queues, locks or leases by accident. A database that holds no marker but
keys fleet did not write (another application's) is refused too; one holding
only fleet's and Celery's keys (an installation from before the marker) is
adopted."""

from __future__ import annotations

import re

import redis

from fleet.store import keys

# Keys fleet and Celery/kombu write: ours, queues, bindings, unacked sets, results, pidbox replies.
OURS = re.compile(rb"fleet:.*|fleet\.controller.*|provider\..*|_kombu\..*|unacked.*|celery.*|.*\.celery\.pidbox.*",
                  re.DOTALL)
SCAN_AT_MOST = 10_000  # keys looked at for foreign ones on an unmarked database


class Foreign(Exception):
    """This database belongs to another installation (or another application); the message says whose."""


def claim(client: redis.Redis, installation: str) -> str:
    """Mark the database as `installation`'s, or raise Foreign. Returns 'claimed', 'adopted' or 'ours'."""
    got = client.get(keys.INSTALLATION)
    if got is not None:
        return _same(got, installation)
    seen = 0
    for key in client.scan_iter(count=1000):
        raw = key if isinstance(key, bytes) else str(key).encode()
        if not OURS.fullmatch(raw):
            shown = raw[:80].decode(errors="replace")
            raise Foreign(f"this Redis database holds keys fleet did not write (e.g. {shown!r}) and no installation "
                          f"marker: give installation {installation!r} a database (or a Redis) of its own")
        seen += 1
        if seen >= SCAN_AT_MOST:
            break
    if client.set(keys.INSTALLATION, installation, nx=True):
        return "adopted" if seen else "claimed"
    return _same(client.get(keys.INSTALLATION) or b"", installation)  # another process won the race


def _same(got: bytes | str, installation: str) -> str:
    owner = got.decode(errors="replace") if isinstance(got, bytes) else got
    if owner != installation:
        raise Foreign(f"this Redis database belongs to installation {owner[:80]!r}, not {installation!r}: "
                      "give each installation its own database (or Redis), or set --installation to match")
    return "ours"
