"""The upstream provider's own failures, and the one place each becomes a
provider error class.

The backend is the state directory (which member holds which entry or
session) and the files the config names (listFile, credentials):

- `RecordMissing`: no member with this id → NotFound (get and delete only).
- `BadRequest`: a malformed id, a placement the template can't take, a
  listFile that doesn't parse, a mark that can't be written → Permanent:
  editing the config or the spec fixes it.
- `Exhausted`: every list entry is held by a member → QuotaExceeded: it
  frees up when a Proxy goes or the list grows, so retry slowly (not
  Permanent, which latches).
- `PermissionError` and a read-only file system → Permanent.
- Anything from `list` → Transient; everything else (a missing listFile the
  Secret has not delivered yet, a lock held past the deadline, a corrupt
  state file) → Transient.

Messages never carry a value read from a credential file or listFile.
"""

from __future__ import annotations

import errno

from providers import base
from providers.upstream.ids import MalformedId


class RecordMissing(LookupError):
    """No member with this id."""


class BadRequest(ValueError):
    """A request, id or config value no retry can satisfy."""


class Exhausted(Exception):
    """Every list entry is in use."""


class Busy(TimeoutError):
    """The state file's lock was held past the deadline."""


class CorruptState(ValueError):
    """A state file that does not parse."""


PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    if op == "list":
        return base.Transient
    if isinstance(exc, RecordMissing):
        return base.Transient if op == "create" else base.NotFound
    if isinstance(exc, BadRequest | MalformedId):
        return base.Permanent
    if isinstance(exc, Exhausted):
        return base.QuotaExceeded
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        return base.Permanent
    return base.Transient
