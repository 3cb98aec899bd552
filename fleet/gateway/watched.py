"""A gateway file in force while the process runs (the clients file, the rules file): read and parsed at start,
re-read when its mtime, size or inode changed (looked at most every `RECHECK` s, on use), and a broken version
refused: the last good one stays in force and one ERROR names the problem, once per version (not per request).

A subclass says which flag the file is (`flag`, `what`), how its bytes become the value (`parse`, raising
`error`), and how a problem reads at start (`problem`). The first read's failure raises `error` (the process
refuses to start). The stamp is taken before the read, so a version written while it is read is read again at
the next look.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import ClassVar, Generic, TypeVar

from fleet.logs import kv
from fleet.untrusted import FileProblem, read_bounded

log = logging.getLogger("fleet.gateway")

T = TypeVar("T")
Stamp = tuple[int, ...]  # (mtime_ns, size, inode) of each file a version is read from
MAX_FILE = 1024 * 1024
RECHECK = 2.0
_GONE: Stamp = (-1, -1, -1)  # the stamp of a file that cannot be looked at


class WatchedFile(Generic[T]):
    flag: ClassVar[str]  # "--gateway-clients-file"
    what: ClassVar[str]  # "clients", in the log lines
    error: ClassVar[type[Exception]]  # what `parse` raises for a broken version

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self._stamp: Stamp | None = None  # of the version in force
        self._refused: Stamp | None = None  # of the last version refused (logged once)
        try:
            self._stamp, self.value = self._read()
        except (FileProblem, self.error) as exc:
            raise self.refusal(exc) from None
        self._checked = clock()

    def parse(self, raw: bytes) -> T:
        raise NotImplementedError

    def problem(self, exc: Exception) -> str:
        """What is wrong with a version, naming the file (the start's refusal, the ERROR line's `error`)."""
        return str(exc)

    def refusal(self, exc: Exception) -> Exception:
        """The `error` raised when the first version is not usable."""
        return self.error(self.problem(exc))

    def counts(self, value: T) -> Mapping[str, object]:
        """What a re-read logs of a new version (`clients=3`)."""
        return {}

    def _stat(self) -> Stamp:
        return stamp_of(self.path, self.flag)

    def _read(self) -> tuple[Stamp, T]:
        stamp = self._stat()
        raw = read_bounded(self.path, MAX_FILE, f"{self.flag} {self.path}")
        return stamp, self.parse(raw)

    def refresh(self) -> T:
        """The value in force, after a look at the file when `RECHECK` s have passed since the last one."""
        now = self.clock()
        if now - self._checked < RECHECK:
            return self.value
        self._checked = now
        try:
            stamp = self._stat()
        except FileProblem as exc:  # gone for a moment (a ConfigMap's swap) or for good: the last good one stays
            self._refuse(_GONE, exc)
            return self.value
        if stamp == self._stamp:
            self._refused = None  # the version in force is back: a later broken one is news again
            return self.value
        if stamp == self._refused:
            return self.value
        try:
            stamp, value = self._read()
        except (FileProblem, self.error) as exc:
            self._refuse(stamp, exc)
            return self.value
        self._stamp, self._refused, self.value = stamp, None, value
        log.info("%s file re-read", self.what, extra=kv(path=self.path, **self.counts(value)))
        return value

    def _refuse(self, stamp: Stamp, exc: Exception) -> None:
        if stamp == self._refused:
            return
        self._refused = stamp
        log.error("the %s file is not usable; the last good version stays in force", self.what,
                  extra=kv(path=self.path, error=self.problem(exc)[:2000]))


def stamp_of(path: str, flag: str) -> Stamp:
    """The file's (mtime_ns, size, inode), or FileProblem naming `flag`."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FileProblem(f"cannot read {flag} {path}: {why}") from None
    return st.st_mtime_ns, st.st_size, st.st_ino
