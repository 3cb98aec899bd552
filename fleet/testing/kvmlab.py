"""A real sshd and a real libvirtd (test driver) on loopback, in a temp dir.

Both run as plain child processes of the test run (no systemd), with their
own config: sshd with its own host key and an authorized key for the
current user only (`authorized_keys_%u`), forwarding allowed; libvirtd with
its sockets in the temp dir, no TCP/TLS, no auth on the unix socket, and no
hypervisor driver modules loaded (LIBVIRT_DRIVER_DIR points at an empty
dir), so only the built-in test driver answers: `test:///default` served by
the daemon. Used by tests/providers/kvm/conftest.py and benchmarks/kvm_check.py.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleet.testing.procs import die_with_parent, free_port

SSHD = "/usr/sbin/sshd"
LIBVIRTD = "/usr/sbin/libvirtd"
TEST_URI = "test:///default"
TEST_POOL = "default-pool"


def missing_binaries() -> list[str]:
    return [b for b in (SSHD, LIBVIRTD, shutil.which("ssh-keygen") or "ssh-keygen") if not os.path.exists(b)]


def _wait(what: str, ok: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if ok():
            return
        time.sleep(0.02)
    raise RuntimeError(f"{what} did not come up in {timeout}s: {log.read_text()[-2000:]}")


def keygen(path: Path, comment: str = "fleet-test") -> str:
    """A new ed25519 key pair at path; returns the public key line."""
    for p in (path, path.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Lab:
    root: Path
    user: str = field(default_factory=getpass.getuser)
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def key_file(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def socket(self) -> str:
        return str(self.root / "libvirt" / "libvirt-sock")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def local_uri(self) -> str:
        """The daemon's test driver, bypassing SSH: for arranging state in tests."""
        return f"test+unix:///default?socket={self.socket}"

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {(self.root / 'host_key.pub').read_text().strip()}\n"

    def authorize(self, pubkey: str) -> None:
        (self.root / f"authorized_keys_{self.user}").write_text(pubkey + "\n")

    def start(self) -> Lab:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._start_libvirtd()
        self._start_sshd()
        return self

    def _start_sshd(self) -> None:
        self.port = free_port()
        keygen(self.root / "host_key", "fleet-lab-host")
        self.authorize(keygen(self.key_file))
        self.known_hosts.write_text(self.known_hosts_line())
        conf = self.root / "sshd_config"
        conf.write_text(
            f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.root}/host_key
PidFile {self.root}/sshd.pid
AuthorizedKeysFile {self.root}/authorized_keys_%u
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
MaxStartups 200
MaxSessions 200
LogLevel ERROR
"""
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation dir
        log = self.root / "sshd.log"
        with log.open("w") as out:
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=die_with_parent)
        self.procs.append(proc)

        def up() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(4).startswith(b"SSH-")
            return False

        _wait("sshd", up, proc, log)

    def _start_libvirtd(self) -> None:
        run = self.root / "libvirt"
        run.mkdir(exist_ok=True)
        drivers = self.root / "no-drivers"
        drivers.mkdir(exist_ok=True)
        conf = self.root / "libvirtd.conf"
        conf.write_text(
            f"""listen_tls = 0
listen_tcp = 0
unix_sock_dir = "{run}"
unix_sock_rw_perms = "0770"
unix_sock_ro_perms = "0770"
auth_unix_rw = "none"
auth_unix_ro = "none"
max_clients = 500
max_workers = 40
max_client_requests = 50
log_outputs = "3:stderr"
"""
        )
        env = dict(os.environ, LIBVIRT_DRIVER_DIR=str(drivers))
        log = self.root / "libvirtd.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [LIBVIRTD, "--config", str(conf), "--pid-file", str(self.root / "libvirtd.pid")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent,
            )
        self.procs.append(proc)

        def up() -> bool:
            if not os.path.exists(self.socket):
                return False
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
                s.connect(self.socket)
                return True
            return False

        _wait("libvirtd", up, proc, log)

    def virsh(self, *args: str) -> str:
        out = subprocess.run(["virsh", "-q", "-c", self.local_uri, *args], capture_output=True, text=True, timeout=30)
        if out.returncode:
            raise RuntimeError(f"virsh {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()


@contextlib.contextmanager
def running_lab() -> Iterator[Lab]:
    root = Path(tempfile.mkdtemp(prefix="fleet-kvm-lab-"))
    lab = Lab(root)
    try:
        yield lab.start()
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)
