"""A real Squid standing in for a proxy vendor, on loopback: it asks Basic proxy auth of one account (checked by
Debian's basic_ncsa_auth against an htpasswd made with `openssl passwd -apr1`) and, as a vendor's gateway takes
any session of one account, drops the `-session-<id>` part of the username before checking it. With `exits`,
each new session leaves from the next of those loopback addresses and a session keeps its own (an external ACL
helper tags the request by its session; `tcp_outgoing_address` picks the tag's address): session = exit,
rotation = a new exit. Used by the upstream tests (tests/providers/upstream/conftest.py) and `make demo`.
"""

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

HELPERS = "/usr/lib/squid"
# the external ACL helper: the session part of the login → the next exit's tag; a session seen keeps its tag
_EXIT_HELPER = ("#!/bin/sh\n# session -> exit: a new session takes the next exit, a known one keeps its own\n"
                "exec mawk -W interactive '{{ s = $1; sub(/^.*-session-/, \"\", s); sub(/-.*$/, \"\", s);"
                " if (!(s in m)) m[s] = (n++) % {n}; print \"OK tag=e\" m[s] }}'\n")


class Missing(RuntimeError):
    """Squid or its basic_ncsa_auth helper is not installed (apt-get install squid)."""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _exit_lines(d: str, exits: Sequence[str]) -> list[str]:
    helper = os.path.join(d, "exit.sh")
    with open(helper, "w") as f:
        f.write(_EXIT_HELPER.format(n=len(exits)))
    os.chmod(helper, 0o755)
    # one helper process (its map is the vendor's memory), asked on every request (no cache)
    lines = [f"external_acl_type exit ttl=0 negative_ttl=0 children-max=1 children-startup=1 %LOGIN {helper}",
             "acl exit_tagged external exit", "http_access deny !authed", "http_access allow exit_tagged"]
    for i, address in enumerate(exits):
        lines += [f"acl e{i} tag e{i}", f"tcp_outgoing_address {address} e{i}"]
    return lines


@contextlib.contextmanager
def vendor_squid(account: str, password: str, exits: Sequence[str] = (), name: str = "vendor") -> Iterator[int]:
    """The stand-in's port while the block runs; `account` is the username once its session is dropped."""
    binary = shutil.which("squid") or "/usr/sbin/squid"
    if not os.access(binary, os.X_OK) or not os.access(f"{HELPERS}/basic_ncsa_auth", os.X_OK):
        raise Missing("squid with basic_ncsa_auth is not installed (apt-get install squid; `make test` installs it)")
    d = tempfile.mkdtemp(prefix=f"fleet-{name}-squid-")  # squid's user must enter it
    os.chmod(d, 0o755)
    try:
        who = local_squid.run_as()
        port = free_port()
        htpasswd = os.path.join(d, "htpasswd")
        hashed = subprocess.run(["openssl", "passwd", "-apr1", password], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        with open(htpasswd, "w") as f:
            f.write(f"{account}:{hashed}\n")
        helper = os.path.join(d, "auth.sh")
        with open(helper, "w") as f:
            f.write("#!/bin/sh\n# a vendor's gateway: any session of the account\n"
                    f"exec sed -u 's/^\\([^ ]*\\)-session-[a-z0-9]*/\\1/' | {HELPERS}/basic_ncsa_auth {htpasswd}\n")
        os.chmod(helper, 0o755)
        os.chmod(htpasswd, 0o644)
        conf = "\n".join([
            f"http_port 127.0.0.1:{port}", f"visible_hostname fleet-{name}", "workers 1",
            f"pid_filename {d}/squid.pid", f"cache_log stdio:{d}/cache.log", "access_log none", "cache_store_log none",
            f"coredump_dir {d}", "cache deny all", "cache_mem 8 MB", "pinger_enable off", "shutdown_lifetime 1 second",
            f"auth_param basic program {helper}", "auth_param basic children 2", "auth_param basic realm fleet-vendor",
            "acl authed proxy_auth REQUIRED", *(_exit_lines(d, exits) if exits else []),
            "http_access allow authed", "http_access deny all", "",
        ])
        service = local_squid.service_name(d, name)
        proc = local_squid.start(binary, local_squid.prepare(d, conf, who), service, d, who)
        try:
            wait_for(lambda: _listening(port) or proc.poll() is not None, 30, "squid to listen")
            if proc.poll() is not None:
                with open(os.path.join(d, local_squid.OUT), errors="replace") as f:
                    raise RuntimeError(f"squid exited: {f.read()[-2000:]}")
            yield port
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            local_squid.remove_shm(service)
    finally:
        shutil.rmtree(d, ignore_errors=True)
