"""The SSH key and known_hosts, re-read when either file changed on disk.

Who calls: the dialer, before every dial. A rotated Secret (kubelet swaps
the mount's `..data` link) needs no restart: the files' inode, mtime and
size are compared on each load, and only a change reads them again. A file
that is missing or does not parse is a `DialError` at the `ssh-material`
stage (the check's `SSHMaterialUnavailable`), naming the file and never the
key.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import paramiko

from providers.kvm.errors import DialError, Stage, describe

log = logging.getLogger("providers.kvm")


@dataclass(frozen=True)
class Material:
    key: paramiko.PKey
    host_keys: paramiko.HostKeys | None  # None: insecureIgnoreHostKey


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)  # follows symlinks: a Secret mount swaps ..data
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class MaterialCache:
    """The key and known_hosts, re-read when either file changed on disk."""

    def __init__(self, key_file: str, known_hosts_file: str, insecure: bool) -> None:
        self.key_file = key_file
        self.known_hosts_file = known_hosts_file
        self.insecure = insecure
        self._lock = threading.Lock()
        self._sig: tuple[Any, ...] | None = None
        self._material: Material | None = None

    def load(self) -> Material:
        try:
            with self._lock:
                sig = (_signature(self.key_file), None if self.insecure else _signature(self.known_hosts_file))
                if sig != self._sig or self._material is None:
                    self._material = self._read()
                    self._sig = sig
                    log.info("kvm: loaded ssh key %s and known_hosts %s", self.key_file, self.known_hosts_file or "-")
                return self._material
        except DialError:
            raise
        except (OSError, paramiko.SSHException, ValueError) as exc:
            raise DialError(Stage.SSH_MATERIAL, f"ssh material: {describe(exc)}") from exc

    def _read(self) -> Material:
        try:
            key = paramiko.PKey.from_path(self.key_file)
        except (paramiko.SSHException, ValueError, TypeError) as exc:
            # never echo the key: only its path and the parser's verdict
            raise DialError(
                Stage.SSH_MATERIAL, f"ssh key {self.key_file} does not parse ({type(exc).__name__})"
            ) from exc
        host_keys = None
        if not self.insecure:
            host_keys = paramiko.HostKeys()
            try:
                host_keys.load(self.known_hosts_file)
            except paramiko.hostkeys.InvalidHostKey as exc:
                raise DialError(Stage.SSH_MATERIAL, f"known_hosts {self.known_hosts_file} does not parse") from exc
        return Material(key, host_keys)

