"""Reading a file a user hands us (the providers file, Proxy manifests) as
untrusted input: only a regular file (never blocking on a FIFO or a device),
at most `limit` bytes, whatever its size claims."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


class FileProblem(Exception):
    """Why the file can't be read; the message names it as the caller said (`what`)."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def read_bounded(path: str | Path, limit: int, what: str = "the file") -> bytes:
    """The file's bytes, or FileProblem."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}") from None
    except ValueError:  # an embedded NUL
        raise FileProblem(f"cannot read {what}: the path contains a NUL byte") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(f"{what} must be a regular file, this is {_kind(st.st_mode)}")
        if st.st_size > limit:
            raise FileProblem(f"{what} is {st.st_size} bytes; at most {limit} are read")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileProblem(f"{what} is larger than {limit} bytes")
    return data


def raise_open_files_limit() -> int:
    """Lift the soft limit of open files to the hard one (a socket per connection or probe
    is a descriptor); the limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return int(target)
    return int(soft)
