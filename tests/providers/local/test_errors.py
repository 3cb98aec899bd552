"""classify: one table over every class the local provider can meet."""

import errno
import json
import subprocess

import pytest

from providers import base
from providers.local.errors import BadRequest, Busy, CorruptRecord, DeadlineError, RecordMissing, classify


def oserror(code: int) -> OSError:
    return OSError(code, "injected")


@pytest.mark.parametrize(
    ("exc", "op", "want"),
    [
        (RecordMissing("no record"), "get", base.NotFound),
        (RecordMissing("no record"), "delete", base.NotFound),
        (RecordMissing("no record"), "create", base.Transient),  # create never says NotFound
        (BadRequest("port 80 is outside portRange"), "create", base.Permanent),
        (BadRequest("malformed id"), "get", base.Permanent),
        (BadRequest("malformed id"), "delete", base.Permanent),
        (PermissionError(errno.EACCES, "denied"), "create", base.Permanent),
        (PermissionError(errno.EPERM, "not permitted"), "delete", base.Permanent),
        (oserror(errno.EROFS), "create", base.Permanent),
        (Busy("port taken"), "create", base.Transient),
        (Busy("lock held"), "delete", base.Transient),
        (DeadlineError("deadline passed"), "get", base.Transient),
        (CorruptRecord("unreadable record"), "get", base.Transient),  # the instance may still exist
        (FileNotFoundError(errno.ENOENT, "no squid"), "create", base.Transient),  # installing it fixes it
        (oserror(errno.ENOSPC), "create", base.Transient),
        (oserror(errno.EMFILE), "create", base.Transient),
        (oserror(errno.EAGAIN), "create", base.Transient),
        (oserror(errno.EADDRINUSE), "create", base.Transient),
        (subprocess.TimeoutExpired(["squid"], 1), "create", base.Transient),
        (json.JSONDecodeError("x", "{", 1), "get", base.Transient),
        (LookupError("no user proxy or nobody"), "create", base.Transient),
        (ValueError("anything else"), "get", base.Transient),
        # list: nothing in the request to fix, whatever broke
        (PermissionError(errno.EACCES, "denied"), "list", base.Transient),
        (NotADirectoryError(errno.ENOTDIR, "not a dir"), "list", base.Transient),
        (RecordMissing("no record"), "list", base.Transient),
    ],
)
def test_classify(exc, op, want):
    assert classify(exc, op) is want
