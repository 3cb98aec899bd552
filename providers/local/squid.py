"""Squid itself: the config text of one instance, the user it runs as,
starting it, asking its version, and what it leaves behind.

Each instance is `squid -N -n <service> -f <dir>/squid.conf`: in the
foreground (`-N`: one process, no master/kid pair, so the pid we start is
the pid that serves), in its own session (it outlives the worker that
started it), with its own service name (`-n`: squid names its shared-memory
segments and IPC after it, so instances never share them with each other or
with a system squid, which uses `squid`).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import ipaddress
import os
import pwd
import re
import signal
import stat
import subprocess
from dataclasses import dataclass

from providers.base import Deadline

CONF = "squid.conf"
PID = "squid.pid"
OUT = "squid.out"  # squid's own stdout/stderr: what it says before cache.log opens
RUN_AS_CANDIDATES = ("proxy", "nobody")  # when the worker is root: Debian's squid user, else nobody
SHM_DIR = "/dev/shm"
VERSION = re.compile(r"Squid Cache: Version (\S+)")
MAX_VERSION_OUTPUT = 64 * 1024


def service_name(state_dir: str, name: str) -> str:
    """Alphanumeric (squid's rule for -n), unique per state dir and name."""
    return "fleet" + hashlib.sha256(f"{state_dir}\0{name}".encode()).hexdigest()[:16]


def http_port(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ipaddress.ip_address(bind).version == 6 else f"{bind}:{port}"


def config_text(bind: str, port: int, instance_dir: str, sources: list[str], egress: str = "") -> str:
    """A forward proxy on bind:port for `sources` only, caching nothing,
    logging into its own directory, connecting out from `egress` when given.
    Not an open proxy: every other client is denied. Paths and addresses are
    validated not to break the syntax."""
    d = instance_dir
    outgoing = [f"tcp_outgoing_address {ipaddress.ip_address(egress)}"] if egress else []
    return "\n".join([
        "# Written by fleet's local provider; rewritten on every create.",
        f"http_port {http_port(bind, port)}",
        "visible_hostname fleet-local",
        "workers 1",
        f"pid_filename {d}/{PID}",
        f"cache_log stdio:{d}/cache.log",
        f"access_log stdio:{d}/access.log",
        "cache_store_log none",
        "logfile_rotate 0",
        f"coredump_dir {d}",
        "cache deny all",
        "cache_mem 8 MB",
        "pinger_enable off",
        "shutdown_lifetime 1 second",
        f"acl fleet_sources src {' '.join(sources)}",
        "http_access allow fleet_sources",
        "http_access deny all",
        *outgoing,
        "",
    ])


@dataclass(frozen=True)
class RunAs:
    user: str
    uid: int
    gid: int


def run_as() -> RunAs | None:
    """Who squid runs as: the worker's own user, or, when the worker is root,
    `proxy` (else `nobody`): squid refuses to run as root, and never needs to
    (its ports are ≥ 1024). None means "as the worker"."""
    if os.geteuid() != 0:
        return None
    for user in RUN_AS_CANDIDATES:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            continue
        return RunAs(user, pw.pw_uid, pw.pw_gid)
    raise LookupError(f"the worker runs as root and none of the users {', '.join(RUN_AS_CANDIDATES)} exists to run squid")


def unreachable_by(path: str, who: RunAs | None) -> str | None:
    """Why `who` can't enter `path` (a directory on the way lacks x for them), or None."""
    if who is None:
        return None
    probe = os.path.abspath(path)
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            mode = st.st_mode
            ok = (
                (st.st_uid == who.uid and mode & stat.S_IXUSR)
                or (st.st_gid == who.gid and mode & stat.S_IXGRP)
                or mode & stat.S_IXOTH
            )
            if not ok:
                return f"user {who.user} cannot enter {probe} (mode {stat.S_IMODE(mode):04o}), so squid cannot read its config"
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent


def prepare(instance_dir: str, text: str, who: RunAs | None) -> str:
    """The instance directory with its squid.conf; owned by squid's user so
    it can write its pid file and logs there. Returns the config path."""
    os.makedirs(instance_dir, mode=0o755, exist_ok=True)
    conf = os.path.join(instance_dir, CONF)
    with open(conf, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(conf, 0o644)
    if who is not None:
        os.chown(instance_dir, who.uid, who.gid)
    return conf


def start(squid: str, conf: str, service: str, instance_dir: str, who: RunAs | None) -> subprocess.Popen[bytes]:
    """Start squid in its own session and return at once (exec succeeded;
    it may still fail to listen: `get` tells)."""
    with open(os.path.join(instance_dir, OUT), "ab") as out:
        return subprocess.Popen(
            [squid, "-N", "-n", service, "-f", conf],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=instance_dir,
            start_new_session=True,  # no signal to the worker's group reaches it; it outlives the worker
            close_fds=True,
            # Under root: squid's user from the start, without root's groups (None: as the worker).
            user=who.uid if who else None,
            group=who.gid if who else None,
            extra_groups=[] if who else None,
        )


def remove_shm(service: str) -> None:
    """Shared-memory segments a killed squid left behind (a clean exit removes them)."""
    for path in glob.glob(os.path.join(SHM_DIR, glob.escape(service) + "-*")):
        with contextlib.suppress(OSError):
            os.unlink(path)


def version(squid: str, deadline: Deadline) -> str:
    """`squid -v`'s version, within the deadline. Raises FileNotFoundError /
    PermissionError (no usable binary), TimeoutError, or RuntimeError (it
    failed, or printed no version)."""
    timeout = deadline.remaining()
    if timeout <= 0:
        raise TimeoutError("deadline passed before running squid -v")
    proc = subprocess.Popen(
        [squid, "-v"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, close_fds=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: a wrapper's children too
        proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):  # a grandchild that left the group may hold them: don't read
            if pipe is not None:
                pipe.close()
        raise TimeoutError(f"{squid} -v did not answer within {timeout:.1f}s") from None
    text = out[:MAX_VERSION_OUTPUT].decode("utf-8", "replace")
    if proc.returncode != 0:
        detail = (err or out)[-300:].decode("utf-8", "replace").strip()
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
        raise RuntimeError(f"{squid} -v {how}" + (f": {detail}" if detail else ""))
    m = VERSION.search(text)
    if not m:
        raise RuntimeError(f"{squid} -v printed no 'Squid Cache: Version' line")
    return m.group(1)
