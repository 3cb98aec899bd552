"""The kvm provider (placeholder until operations land): Checker only."""

from __future__ import annotations

from providers.base import Deadline, TargetStatus
from providers.kvm.check import check_hosts
from providers.kvm.config import KvmConfig
from providers.kvm.conn import HostPool, MaterialCache, SSHDialer


class KvmProvider:
    def __init__(self, name: str, cfg: KvmConfig, pool: HostPool | None = None) -> None:
        self.name = name
        self.cfg = cfg
        material = MaterialCache(cfg.sshKeyFile, cfg.knownHostsFile, cfg.insecureIgnoreHostKey)
        self.pool = pool or HostPool(SSHDialer(material))

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_hosts(list(self.cfg.hosts), self.pool.probe, deadline)

    def close(self) -> None:
        self.pool.close()


def new(name: str, cfg: KvmConfig) -> KvmProvider:
    return KvmProvider(name, cfg)
