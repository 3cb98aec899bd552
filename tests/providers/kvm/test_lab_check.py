"""The health check against a real sshd and libvirtd (test driver): each
row of the seed's Verification table, by editing the config only."""

from __future__ import annotations

import shutil

import pytest

from fleet.testing.kvmlab import TEST_POOL, TEST_URI, Lab, keygen
from providers import base
from providers.base import Deadline
from providers.kvm import check
from providers.kvm.config import KvmConfig
from providers.kvm.provider import KvmProvider, new

pytestmark = pytest.mark.integration


def lab_config(lab: Lab, key_file=None, known_hosts=None, **host) -> KvmConfig:
    h = {"name": "lab", "address": lab.address, "user": lab.user, "pool": TEST_POOL, "socket": lab.socket,
         "uri": TEST_URI, **host}
    return KvmConfig.model_validate(
        {"sshKeyFile": str(key_file or lab.key_file), "knownHostsFile": str(known_hosts or lab.known_hosts),
         "hosts": [h]}
    )


@pytest.fixture
def checked(lab):
    made: list[KvmProvider] = []

    def run(cfg: KvmConfig, deadline: float = 10.0, provider: KvmProvider | None = None):
        p = provider or new("kvm-lab", cfg)
        made.append(p)
        (st,) = p.check(Deadline.after(deadline))
        return st

    yield run
    for p in made:
        p.close()


def test_reachable_with_every_detail(lab, checked):
    st = checked(lab_config(lab))
    assert st.ready, st.message
    assert st.reason == base.REASON_REACHABLE
    assert st.address == lab.address
    assert dict(st.details) == {
        "user": lab.user,
        "pool": TEST_POOL,
        "hostname": st.details["hostname"],
        "libvirtVersion": st.details["libvirtVersion"],
        "poolState": "running",
        "poolCapacity": "100.0GiB",
        "poolAvailable": st.details["poolAvailable"],
    }
    assert st.details["hostname"] and st.details["libvirtVersion"].count(".") == 2


def test_pool_nope_is_pool_not_found(lab, checked):
    st = checked(lab_config(lab, pool="nope"))
    assert (st.ready, st.reason) == (False, check.REASON_POOL_NOT_FOUND)
    assert "nope" in st.message


def test_wrong_port_is_unreachable(lab, checked):
    st = checked(lab_config(lab, address="127.0.0.1:2"))
    assert (st.ready, st.reason) == (False, base.REASON_UNREACHABLE)


def test_empty_known_hosts_is_handshake_failed(lab, checked, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    st = checked(lab_config(lab, known_hosts=empty))
    assert (st.ready, st.reason) == (False, check.REASON_SSH_HANDSHAKE_FAILED)
    assert "known_hosts" in st.message


def test_dev_null_known_hosts_is_handshake_failed(lab, checked):
    st = checked(lab_config(lab, known_hosts="/dev/null"))
    assert st.reason == check.REASON_SSH_HANDSHAKE_FAILED


def test_unauthorized_user_is_handshake_failed(lab, checked):
    st = checked(lab_config(lab, user="nobody"))
    assert (st.ready, st.reason) == (False, check.REASON_SSH_HANDSHAKE_FAILED)
    assert st.details["user"] == "nobody"


def test_missing_key_file_is_material_unavailable(lab, checked):
    st = checked(lab_config(lab, key_file="/nonexistent/key"))
    assert (st.ready, st.reason) == (False, check.REASON_SSH_MATERIAL_UNAVAILABLE)
    assert "/nonexistent/key" in st.message


def test_wrong_socket_is_libvirt_connect_failed(lab, checked):
    st = checked(lab_config(lab, socket="/nonexistent/libvirt-sock"))
    assert (st.ready, st.reason) == (False, check.REASON_LIBVIRT_CONNECT_FAILED)


def test_destroyed_pool_is_pool_not_active_and_keeps_the_connection(lab, checked):
    p = new("kvm-lab", lab_config(lab))
    assert checked(None, provider=p).ready  # holds the test driver's shared state open
    lab.virsh("pool-destroy", TEST_POOL)
    try:
        st = checked(None, provider=p)
        assert (st.ready, st.reason) == (False, check.REASON_POOL_NOT_ACTIVE)
        assert st.details["poolState"] == "inactive"
    finally:
        lab.virsh("pool-start", TEST_POOL)
    assert checked(None, provider=p).ready
    assert p.pool.dials("lab") == 1


def test_rotated_key_and_known_hosts_are_read_on_the_next_dial(lab, checked, tmp_path):
    key, known = tmp_path / "id", tmp_path / "known_hosts"
    keygen(key)  # not authorized on the lab
    known.write_text("")
    p = new("kvm-lab", lab_config(lab, key_file=key, known_hosts=known))
    assert checked(None, provider=p).reason == check.REASON_SSH_HANDSHAKE_FAILED  # host key unknown
    known.write_text(lab.known_hosts_line())
    st = checked(None, provider=p)
    assert st.reason == check.REASON_SSH_HANDSHAKE_FAILED and "authenticat" in st.message.lower()
    shutil.copy(lab.key_file, key)  # the Secret is rotated to the authorized key
    assert checked(None, provider=p).ready


def test_insecure_ignore_host_key_connects_and_warns_at_every_connect(lab, caplog):
    cfg = KvmConfig.model_validate(
        {"sshKeyFile": str(lab.key_file), "insecureIgnoreHostKey": True,
         "hosts": [{"name": "lab", "address": lab.address, "user": lab.user, "pool": TEST_POOL,
                    "socket": lab.socket, "uri": TEST_URI}]}
    )
    p = new("kvm-lab", cfg)
    try:
        for _ in range(2):
            assert p.check(Deadline.after(10))[0].ready
            host = p.cfg.hosts[0]
            p.pool.drop(host.name, p.pool.get(host, Deadline.after(5)), "test")
        warnings = [r for r in caplog.records if r.levelname == "WARNING" and "NOT verified" in r.getMessage()]
        assert len(warnings) == 2
    finally:
        p.close()
