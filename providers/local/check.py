"""The local Checker: two targets, always in this order.

- `stateDir`: the directory exists (or can be made) and takes a new file,
  and, when the worker is root, squid's user can enter it. Details: its
  path, the number of instance records, the user squid runs as.
- `squid`: the binary answers `squid -v` within the deadline. Details: its
  path and version.

Own reasons (an admin fixes each differently from a network failure):

- `StateDirUnusable`: fix the directory's permissions, mount or the
  `stateDir` setting.
- `SquidNotFound`: install squid (`apt-get install squid`) or fix `squidPath`.
- `SquidFailed`: the binary runs but fails or prints no version: reinstall it.

`Timeout` when `squid -v` outlasts the deadline. Never raises.
"""

from __future__ import annotations

import os
import tempfile
import time

from providers import base
from providers.base import Deadline, TargetStatus
from providers.local import squid
from providers.local.config import LocalConfig, safe_path

TARGET_STATE_DIR = "stateDir"
TARGET_SQUID = "squid"

REASON_STATE_DIR_UNUSABLE = "StateDirUnusable"
REASON_SQUID_NOT_FOUND = "SquidNotFound"
REASON_SQUID_FAILED = "SquidFailed"

LOCAL_REASONS = (
    base.REASON_REACHABLE,
    base.REASON_TIMEOUT,
    REASON_STATE_DIR_UNUSABLE,
    REASON_SQUID_NOT_FOUND,
    REASON_SQUID_FAILED,
)


def host_problem(block: LocalConfig) -> str | None:
    """Why a worker of this block cannot start squid here (no executable file where it resolves), or None.

    A worker without squid would take every create and only fail it (Transient, the check's SquidNotFound):
    `fleet worker` and `fleet up` refuse to start instead, naming the fix."""
    path = block.squid()
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return None
    where = (f"squidPath {path} is not an executable file" if block.squidPath
             else f"there is no squid on $PATH, nor at {path}")
    return (f"the local provider runs Squid, and {where}: install Debian's squid package (apt-get install squid; "
            "fleet's image has it) or set squidPath")


def check_local(root: str, squid_path: str, deadline: Deadline) -> list[TargetStatus]:
    return [check_state_dir(root), check_squid(squid_path, deadline)]


def check_state_dir(root: str) -> TargetStatus:
    start = time.monotonic()
    details = {"path": root}
    try:
        safe_path(root, "stateDir")
        who = squid.run_as()
        details["squidUser"] = who.user if who else "(the worker's)"
        os.makedirs(root, mode=0o755, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".check-", dir=root)
        os.close(fd)
        os.unlink(probe)
        problem = squid.unreachable_by(root, who)
        if problem:
            raise PermissionError(problem)
        details["instances"] = str(sum(1 for e in os.listdir(root) if e.endswith(".json")))
    except Exception as exc:  # never raises: a failure is a verdict
        return TargetStatus(TARGET_STATE_DIR, root, False, REASON_STATE_DIR_UNUSABLE, _message(exc),
                            time.monotonic() - start, details)
    return TargetStatus(TARGET_STATE_DIR, root, True, base.REASON_REACHABLE, "", time.monotonic() - start, details)


def check_squid(path: str, deadline: Deadline) -> TargetStatus:
    start = time.monotonic()
    details = {"path": path}
    try:
        details["version"] = squid.version(path, deadline)
    except Exception as exc:  # never raises: a failure is a verdict
        return TargetStatus(TARGET_SQUID, path, False, squid_reason(exc), _message(exc), time.monotonic() - start, details)
    return TargetStatus(TARGET_SQUID, path, True, base.REASON_REACHABLE, "", time.monotonic() - start, details)


def squid_reason(exc: BaseException) -> str:
    """Pure: what running `squid -v` raised → the reason."""
    if isinstance(exc, TimeoutError):
        return base.REASON_TIMEOUT
    if isinstance(exc, FileNotFoundError | PermissionError | NotADirectoryError | IsADirectoryError):
        return REASON_SQUID_NOT_FOUND
    return REASON_SQUID_FAILED


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, PermissionError | TimeoutError | RuntimeError) else str(exc)
