"""The local provider's own failures, and the one place every failure
becomes a provider error class.

The backend is this host: the state directory (records, configs, logs) and
squid processes. What the provider's `_call` catches comes here:

- `RecordMissing`: no record for the name → NotFound (get and delete only;
  create never says NotFound).
- Anything from `list` → Transient: a list request holds nothing to fix, and
  an unreadable state directory may come back.
- `BadRequest`: what no retry can fix (a port outside `portRange`, a name or
  id that can't be one of ours, a state dir squid's user can't enter) →
  Permanent.
- `PermissionError`, and a read-only file system → Permanent: fixed in the
  config or on the host, not by retrying.
- Everything else → Transient: `Busy` (a port held by another process or
  instance, a lock held past the deadline), `DeadlineError`, a corrupt
  record, a missing squid binary (installing it fixes every Proxy without an
  edit; the health check says `SquidNotFound`), full disks, fork failures.
"""

from __future__ import annotations

import errno

from providers import base


class RecordMissing(LookupError):
    """No state record for this name: the instance does not exist."""


class CorruptRecord(ValueError):
    """A state record that does not parse; the instance may still exist."""


class BadRequest(ValueError):
    """A request or config value no retry can satisfy; names field and value."""


class Busy(Exception):
    """Held by someone else for now: a port, or the lock of a name."""


class DeadlineError(TimeoutError):
    """The caller's deadline passed (before the call, waiting for a lock or
    for squid to exit)."""


PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    if op == "list":
        return base.Transient  # nothing in a list request to fix: an unreadable state dir is retried
    if isinstance(exc, RecordMissing):
        return base.Transient if op == "create" else base.NotFound
    if isinstance(exc, BadRequest):
        return base.Permanent
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        return base.Permanent
    return base.Transient
