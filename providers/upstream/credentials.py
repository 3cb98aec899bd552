"""Reading the credentials an upstream is dialled with, at each use (a
rotated Secret is picked up without a restart). Only the worker and, later,
the gateway hold them: never in the providers file, Redis, logs, metrics,
traces, reprs or exception messages (`Credentials.__repr__` hides them;
errors name the file, never its content).
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.upstream.config import Entry, UpstreamConfig, parse_list, parse_url, render_username

MAX_FILE = 4 << 20


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"

    __str__ = __repr__


def read_file(path: str, what: str) -> str:
    """A small file's text; one trailing newline dropped (how `echo` and
    `kubectl create secret --from-file` leave them)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_FILE)
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text


def shared(cfg: UpstreamConfig) -> Credentials | None:
    """usernameFile/passwordFile, or None when the block names none."""
    if not cfg.usernameFile:
        return None
    return Credentials(read_file(cfg.usernameFile, "usernameFile").strip(), read_file(cfg.passwordFile, "passwordFile").strip())


def entries(cfg: UpstreamConfig) -> list[Entry]:
    """List mode's entries: `proxies`, then listFile's lines (read now)."""
    out = [parse_url(u, credentials=False) for u in cfg.proxies]
    if cfg.listFile:
        seen = {e.endpoint for e in out}
        try:
            more = parse_list(read_file(cfg.listFile, "listFile"))
        except ValueError as exc:
            raise ValueError(f"listFile {cfg.listFile}: {exc}") from None
        out.extend(e for e in more if e.endpoint not in seen)
    return out


def for_entry(cfg: UpstreamConfig, entry: Entry) -> Credentials | None:
    """The entry's own (from its listFile line), else the shared ones, else none."""
    if entry.username:
        return Credentials(entry.username, entry.password)
    return shared(cfg)


def for_session(cfg: UpstreamConfig, session: str, placement: dict[str, str]) -> Credentials:
    """A vendor member's: the template rendered with the user, the session and its placement."""
    creds = shared(cfg)
    if creds is None:
        raise ValueError("mode vendor needs usernameFile and passwordFile")
    username = render_username(cfg.usernameTemplate, {**placement, "user": creds.username, "session": session})
    return Credentials(username, creds.password)
