"""The Checker rules and fault injection (conformance.py) for kvm.

The Checker runs against the real dialer where the failure is on the wire
(nothing listening, a peer that speaks garbage, closes, or never answers)
and against fakes where libvirt itself answers (healthy, an internal error).
The operations run against `FakeHypervisor`, which fails the n-th RPC with a
libvirt error of many codes, a dropped transport, garbage XML, a non-libvirt
exception, a hang, or a refused redial.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import paramiko
import pytest

from providers import base
from providers.base import Deadline
from providers.kvm import check, domain
from providers.kvm.pool import HostPool
from providers.kvm.provider import KvmProvider
from tests.providers import conformance
from tests.providers.kvm.conftest import fake_host, make_config
from tests.providers.kvm.fakes import (
    GARBAGE,
    GARBAGE_XML,
    GONE_FAULTS,
    KVM_FAULTS,
    FakeDialer,
    FakeHypervisor,
    KvmFaultBackend,
)

HOSTS = ("a", "b", "c")
CATALOGUE = {"machineTypes": {"small": {"vcpus": 1, "memoryMiB": 512}}, "images": {"img": {"url": "http://images.invalid/i"}}}


class Peer:
    """A TCP peer on 127.0.0.1 where an sshd should be: `garbage` answers
    an HTTP page, `close` hangs up at once, `silent` never says a word."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.done = threading.Event()
        threading.Thread(target=self._serve, name=f"peer-{behaviour}", daemon=True).start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            with contextlib.suppress(OSError):
                if self.behaviour == "garbage":
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>\x00\xff</html>\r\n")
                    conn.close()
                elif self.behaviour == "close":
                    conn.close()

    def close(self) -> None:
        self.done.set()
        self.listener.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "id_ecdsa"
    paramiko.ECDSAKey.generate().write_private_key_file(str(path))
    return str(path)


class TestKvmChecker(conformance.CheckerConformance):
    own_reasons = check.KVM_REASONS

    @pytest.fixture
    def make_checker(self, key_file):
        made: list[KvmProvider] = []
        peers: list[Peer] = []
        hypervisors: list[FakeHypervisor] = []

        def real(ports: list[int]) -> KvmProvider:
            hosts = [fake_host(n, address=f"127.0.0.1:{port}") for n, port in zip(HOSTS, ports, strict=True)]
            p = KvmProvider("kvm-test", make_config(hosts, sshKeyFile=key_file, knownHostsFile="", insecureIgnoreHostKey=True))
            made.append(p)
            return p

        def make(state: str) -> KvmProvider:
            if state == conformance.UNREACHABLE:
                ports = []
                for _ in HOSTS:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", 0))
                        ports.append(s.getsockname()[1])
                return real(ports)
            behaviour = {conformance.MALFORMED: "garbage", conformance.DROPPED: "close", conformance.HANGS: "silent"}.get(state)
            if behaviour is not None:
                peer = Peer(behaviour)
                peers.append(peer)
                return real([peer.port] * len(HOSTS))
            conns = {n: FakeHypervisor() for n in HOSTS}
            hypervisors.extend(conns.values())
            if state == conformance.SERVER_ERROR:
                for hv in conns.values():
                    hv.inject("internal-error")
            p = KvmProvider("kvm-test", make_config([fake_host(n) for n in HOSTS]), pool=HostPool(FakeDialer(conns)))
            made.append(p)
            return p

        yield make
        for p in made:
            p.close()
        for peer in peers:
            peer.close()
        for hv in hypervisors:
            hv.release.set()


class TestKvmFaults(conformance.FaultConformance):
    provider_name = "kvm-test"
    faults = KVM_FAULTS
    gone_faults = GONE_FAULTS
    partial_faults = (GARBAGE,)
    fault_deadline = 0.3  # the fakes answer in microseconds

    @pytest.fixture
    def fault_backend(self, fake_provider_factory):
        hv = FakeHypervisor(base_volumes=(domain.base_name("img"),))
        dialer = FakeDialer({"hv1": hv})
        p, _ = fake_provider_factory(["hv1"], dialer, **CATALOGUE)
        backend = KvmFaultBackend(p, hv, dialer, "hv1")
        yield backend
        backend.release()


# -- escapes the fault injection led to ----------------------------------------------------


def test_list_leaves_out_a_domain_with_unreadable_xml_and_keeps_the_others(fake_provider_factory):
    """ElementTree's ParseError is a SyntaxError, not a ValueError: it used to
    fail the whole list instead of leaving the one domain out (§2: MAY)."""
    hv = FakeHypervisor(base_volumes=(domain.base_name("img"),))
    p, _ = fake_provider_factory(["hv1"], FakeDialer({"hv1": hv}), **CATALOGUE)
    reqs = [conformance.ProviderConformance().make_request(f"uid-{i}") for i in range(3)]
    pids = [p.create(r, Deadline.after(5)) for r in reqs]
    hv.domains[reqs[1].name].xml = GARBAGE_XML
    listed = [i.id for i in p.list_by_tag(Deadline.after(5))]
    assert listed == [pids[0], pids[2]]


def test_vendor_data_file_that_is_not_utf8_is_permanent(fake_provider_factory, tmp_path):
    """Reading vendorDataFile may fail with a UnicodeDecodeError (a
    ValueError), which used to escape create unclassified."""
    path = tmp_path / "vendor"
    path.write_bytes(b"#cloud-config\n\xff\xfe")
    hv = FakeHypervisor(base_volumes=(domain.base_name("img"),))
    p, _ = fake_provider_factory(["hv1"], FakeDialer({"hv1": hv}), vendorDataFile=str(path), **CATALOGUE)
    with pytest.raises(base.Permanent) as err:
        p.create(conformance.ProviderConformance().make_request("u-1"), Deadline.after(5))
    assert isinstance(err.value.__cause__, UnicodeDecodeError)
    assert str(path) in str(err.value)
