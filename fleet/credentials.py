"""Upstream credentials by reference: what the gateway and the prober dial a bought proxy with, read in their own
process from files and never from Redis (decisions 0125, 0127).

A reference is a provider's name; its files are `directory/<ref>/` (a mount of the provider's Secret, or under
`fleet up` links to the files its block names):

- `username`, `password`: the shared credentials (the block's usernameFile, passwordFile);
- `list`: list mode's listFile, whose lines may carry their own `user:pass@` (looked up by the member's URL).

A member's endpoint may carry `username`, a vendor template with only `{user}` left (the controller rendered the
session and placement): `{user}` becomes the secret username here, by the provider's own `render_username`.
Files are re-read when one changed (looked at most every RECHECK s per reference); a reference that is not a
name, a missing directory or unreadable files give None (a warning once per reference and version, never a
secret).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable

from fleet.logs import kv
from fleet.untrusted import FileProblem, read_bounded
from fleet.upstream import Auth
from providers.upstream.config import USER, parse_list, render_username

log = logging.getLogger("fleet.upstream")

_REF = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)  # a provider's name: never a path
MAX_SECRET = 1024
MAX_LIST = 4 << 20
RECHECK = 2.0
FILES = ("username", "password", "list")


def member_url(scheme: str, host: str, port: int) -> str:
    """How a list entry is named (providers.upstream.config.Endpoint.url): the key of its own credentials."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class Credentials:
    """`get(ref, member=, username=)` → the Auth to dial a member with, or None (see the module)."""

    def __init__(self, directory: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.clock = clock
        # ref → (looked, stamp, shared auth, list entries' auths by URL)
        self._held: dict[str, tuple[float, tuple[int, ...], Auth | None, dict[str, Auth]]] = {}

    def get(self, ref: str, *, member: str = "", username: str = "") -> Auth | None:
        held = self._read(ref)
        if held is None:
            return None
        shared, listed = held
        own = listed.get(member) if member else None
        if own is not None:
            return own
        if shared is None:
            return None
        if username:
            return Auth(render_username(username, {USER: shared.username}), shared.password)
        return shared

    def _read(self, ref: str) -> tuple[Auth | None, dict[str, Auth]] | None:
        if not self.directory or not _REF.fullmatch(ref):
            return None
        now = self.clock()
        held = self._held.get(ref)
        if held is not None and now - held[0] < RECHECK:
            return held[2], held[3]
        paths = [os.path.join(self.directory, ref, f) for f in FILES]
        stamp = tuple(_stamp(p) for p in paths)
        if held is not None and held[1] == stamp:
            self._held[ref] = (now, stamp, held[2], held[3])
            return held[2], held[3]
        shared: Auth | None = None
        listed: dict[str, Auth] = {}
        try:
            if stamp[0] != -1 or stamp[1] != -1:
                user, password = (read_bounded(p, MAX_SECRET, f"the {f} of credentials {ref!r}").decode()
                                  for p, f in zip(paths[:2], FILES[:2], strict=True))
                shared = Auth(_line(user), _line(password))
            if stamp[2] != -1:
                text = read_bounded(paths[2], MAX_LIST, f"the list of credentials {ref!r}").decode()
                listed = {e.endpoint.url: Auth(e.username, e.password) for e in parse_list(text) if e.username}
        except (FileProblem, UnicodeDecodeError, ValueError) as exc:  # parse_list's errors name the line, not its text
            log.warning("upstream credentials cannot be read", extra=kv(credentials=ref, error=str(exc)[:200]))
            shared, listed = None, {}
        self._held[ref] = (now, stamp, shared, listed)
        return shared, listed


def _stamp(path: str) -> int:
    try:
        st = os.stat(path)
    except OSError:
        return -1
    return hash((st.st_mtime_ns, st.st_size, st.st_ino))


def _line(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text
