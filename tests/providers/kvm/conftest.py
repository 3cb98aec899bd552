"""kvm test fixtures: config builders, fake pools, and the lab (a real sshd
and libvirtd on loopback, see lab.py) for tests marked integration."""

from __future__ import annotations

import importlib.util

import pytest

from fleet.testing import kvmlab as labmod

# Without the kvm extra (paramiko, libvirt-python) there is nothing to test here.
if importlib.util.find_spec("libvirt") is None or importlib.util.find_spec("paramiko") is None:
    collect_ignore_glob = ["test_*.py"]


def make_config(hosts: list[dict], **kw):
    from providers.kvm.config import KvmConfig

    data = {"sshKeyFile": "/nonexistent/key", "knownHostsFile": "/nonexistent/known_hosts", "hosts": hosts}
    data.update(kw)
    return KvmConfig.model_validate(data)


def fake_host(name: str, **kw) -> dict:
    return {"name": name, "address": f"{name}.example:22", "user": "fleet", **kw}


@pytest.fixture
def fake_provider_factory():
    from providers.kvm.pool import HostPool
    from providers.kvm.provider import KvmProvider
    from tests.providers.kvm.fakes import FakeDialer

    made: list[KvmProvider] = []

    def build(names: list[str], dialer: FakeDialer | None = None, **kw) -> tuple[KvmProvider, FakeDialer]:
        dialer = dialer or FakeDialer()
        p = KvmProvider("kvm-test", make_config([fake_host(n) for n in names], **kw), pool=HostPool(dialer))
        made.append(p)
        return p, dialer

    yield build
    for p in made:
        p.close()


@pytest.fixture(scope="session")
def lab():
    missing = labmod.missing_binaries()
    if missing:
        pytest.skip(f"lab binaries missing: {', '.join(missing)} (apt-get install openssh-server libvirt-daemon)")
    with labmod.running_lab() as running:
        yield running
