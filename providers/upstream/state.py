"""Which member holds which list entry or vendor session: one JSON file in
the state directory, read and written whole under one flock.

    <stateDir>/members.json   {"format": 1, "members": {<name>: record}}
    <stateDir>/.lock          the flock every create, get, delete and list holds

Records are the truth (`get` and `list_by_tag` read them every time), so any
worker of the provider on this host, or a restarted one, sees the same
members. A lost state directory forgets them: `get` then says NotFound and
the reconciler makes a new member (a new session, or the same free entry).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from providers import filelock, marks
from providers.base import CreateRequest, Deadline
from providers.upstream.errors import Busy, CorruptState

FORMAT = 1
FILE = "members.json"
LOCK = ".lock"
MAX_BYTES = 64 << 20
FIELDS: dict[str, type] = {"id": str, "uid": str, "createdAt": str, "namespace": str, "proxyName": str, "labels": dict}


def new_record(request: CreateRequest, pid: str) -> dict[str, Any]:
    return {"id": pid, "uid": request.uid, "createdAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "namespace": request.namespace, "proxyName": request.proxy_name, "labels": marks.of(request)}


class Store:
    def __init__(self, root: str) -> None:
        self.root = root

    @property
    def path(self) -> str:
        return os.path.join(self.root, FILE)

    @contextlib.contextmanager
    def locked(self, deadline: Deadline, *, create: bool = False) -> Iterator[dict[str, dict[str, Any]]]:
        """The members, under the lock; written back whole when the block
        changed them. Without `create`, a missing directory holds none."""
        if create:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        elif not os.path.isdir(self.root):
            yield {}
            return
        with filelock.held(os.path.join(self.root, LOCK), deadline,
                           lambda: Busy("another call holds the state file's lock; try again")):
            members = self._read()
            before = json.dumps(members, sort_keys=True)
            yield members
            if json.dumps(members, sort_keys=True) != before:
                self._write(members)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read(MAX_BYTES)
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            members = data["members"]
            if not isinstance(members, dict):
                raise TypeError("members is not an object")
            for name, rec in members.items():
                if not isinstance(rec, dict):
                    raise TypeError(f"{name} is not an object")
                for key, typ in FIELDS.items():
                    if not isinstance(rec.get(key), typ):
                        raise TypeError(f"{name}.{key} is not a {typ.__name__}")
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptState(f"unreadable {self.path}: {exc}") from exc
        return members

    def _write(self, members: dict[str, dict[str, Any]]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".members.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": FORMAT, "members": members}, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
