"""Bought proxies on loopback, as their vendors run them: a Squid asking Basic proxy auth (basic_ncsa_auth over an
htpasswd made by `openssl passwd -apr1`) and microsocks asking a username and password (RFC 1929). The Squid is the
local provider's (its config text, its own service name, squid's user when root) with auth added, so it differs
from fleet's own Squids by the auth alone. `vendor_squid` stands in for a residential vendor: any session of one
account, and with `exits` each new session leaves from the next of those loopback addresses while a session keeps
its own (an external ACL helper tags a request by its session; `tcp_outgoing_address` picks the tag's address):
session = exit, rotation = a new exit. Used by the upstream tests, benchmarks/gateway.py and `make demo`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence

from fleet.testing.procs import free_port, wait_for
from providers.local import squid as local_squid

SQUID_HELPERS = "/usr/lib/squid"
NCSA = f"{SQUID_HELPERS}/basic_ncsa_auth"
ALLOW = "http_access allow fleet_sources"  # local_squid.config_text's one allow rule, narrowed to authenticated users
# the exits' external ACL helper: the session part of the login → the next exit's tag; a session seen keeps its tag
_EXIT_HELPER = ("#!/bin/sh\n# session -> exit: a new session takes the next exit, a known one keeps its own\n"
                "exec mawk -W interactive '{{ s = $1; sub(/^.*-session-/, \"\", s); sub(/-.*$/, \"\", s);"
                " if (!(s in m)) m[s] = (n++) % {n}; print \"OK tag=e\" m[s] }}'\n")


def squid_binary() -> str | None:
    """squid, when it and its basic_ncsa_auth helper are installed (apt-get install squid)."""
    binary = shutil.which("squid") or "/usr/sbin/squid"
    return binary if os.access(binary, os.X_OK) and os.access(NCSA, os.X_OK) else None


def microsocks_binary() -> str | None:
    """microsocks, when installed (apt-get install microsocks)."""
    return shutil.which("microsocks")


def apr1(password: str) -> str:
    out = subprocess.run(["openssl", "passwd", "-apr1", password], capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def auth_squid(directory: str, port: int, user: str, password: str, *, any_session: bool = False,
               exits: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """A Squid on 127.0.0.1:`port` forwarding for `user`/`password` only, its files in `directory` (made; its
    parents must be enterable by squid's user), listening when entered, killed with its helpers on exit.
    `any_session`: the helper drops a `-session-<id>` part of the username first, as a vendor's gateway takes any
    session of one account; `exits`: each new session leaves from the next of them. RuntimeError when it does not
    start."""
    binary = squid_binary()
    if binary is None:
        raise RuntimeError(f"squid with {NCSA} is not installed (apt-get install squid)")
    os.makedirs(directory, mode=0o755, exist_ok=True)
    htpasswd = os.path.join(directory, "htpasswd")
    with open(htpasswd, "w") as f:
        f.write(f"{user}:{apr1(password)}\n")
    os.chmod(htpasswd, 0o644)
    program = f"{NCSA} {htpasswd}"
    if any_session:
        program = os.path.join(directory, "auth.sh")
        with open(program, "w") as f:
            f.write("#!/bin/sh\n# a vendor's gateway: any session of the account\n"
                    f"exec sed -u 's/^\\([^ ]*\\)-session-[a-z0-9]*/\\1/' | {NCSA} {htpasswd}\n")
        os.chmod(program, 0o755)
    text = local_squid.config_text("127.0.0.1", port, directory, ["127.0.0.0/8"])
    if ALLOW not in text:
        raise RuntimeError(f"the local provider's squid.conf has no {ALLOW!r} line to narrow")
    text = text.replace(ALLOW, "\n".join([
        f"auth_param basic program {program}", "auth_param basic children 2", "auth_param basic realm fleet-upstream",
        "acl authed proxy_auth REQUIRED", *_exit_lines(directory, exits),
        f"{ALLOW} authed exit_tagged" if exits else f"{ALLOW} authed"]))
    who = local_squid.run_as()
    conf = local_squid.prepare(directory, text, who)
    service = local_squid.service_name(directory, "upstream")
    proc = local_squid.start(binary, conf, service, directory, who)
    try:
        wait_for(lambda: listening(port) or proc.poll() is not None, 30, "squid to listen")
        if proc.poll() is not None:
            with open(os.path.join(directory, local_squid.OUT), errors="replace") as f:
                raise RuntimeError(f"squid exited: {f.read()[-2000:]}")
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        local_squid.remove_shm(service)


def _exit_lines(directory: str, exits: Sequence[str]) -> list[str]:
    if not exits:
        return []
    helper = os.path.join(directory, "exit.sh")
    with open(helper, "w") as f:
        f.write(_EXIT_HELPER.format(n=len(exits)))
    os.chmod(helper, 0o755)
    # one helper process (its map is the vendor's memory), asked on every request (no cache)
    lines = [f"external_acl_type exit ttl=0 negative_ttl=0 children-max=1 children-startup=1 %LOGIN {helper}",
             "acl exit_tagged external exit"]
    for i, address in enumerate(exits):
        lines += [f"acl e{i} tag e{i}", f"tcp_outgoing_address {address} e{i}"]
    return lines


@contextlib.contextmanager
def vendor_squid(account: str, password: str, *, exits: Sequence[str] = ()) -> Iterator[int]:
    """A vendor stand-in (`auth_squid` taking any session of `account`, leaving from `exits` by session) in a
    directory of its own; its port while the block runs."""
    d = tempfile.mkdtemp(prefix="fleet-vendor-")  # squid's user must enter it: not under a 0700 one
    os.chmod(d, 0o755)
    try:
        port = free_port()
        with auth_squid(os.path.join(d, "squid"), port, account, password, any_session=True, exits=exits):
            yield port
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def microsocks(port: int, user: str, password: str) -> Iterator[subprocess.Popen[bytes]]:
    """`microsocks -u USER -P PASSWORD` on 127.0.0.1:`port`, listening when entered, killed on exit."""
    binary = microsocks_binary()
    if binary is None:
        raise RuntimeError("microsocks is not installed (apt-get install microsocks)")
    proc = subprocess.Popen([binary, "-i", "127.0.0.1", "-p", str(port), "-u", user, "-P", password],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: listening(port) or proc.poll() is not None, 15, "microsocks to listen")
        if proc.poll() is not None:
            raise RuntimeError(f"microsocks exited with {proc.returncode}")
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
