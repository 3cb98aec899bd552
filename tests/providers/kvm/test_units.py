"""Pure parts: ids, state mapping, metadata, the seed ISO, domain XML, the
image stream, and the sentinel rule for logs and errors."""

from __future__ import annotations

import hashlib
import io
import logging
import subprocess
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, State
from providers.kvm import domain, image, seediso
from providers.kvm.bridge import bridged_uri
from providers.kvm.config import KvmHost, MachineType
from providers.kvm.errors import DialError, Stage
from providers.kvm.material import MaterialCache
from tests.providers.kvm.conftest import fake_host, make_config
from tests.providers.kvm.fakes import FakeDialer

SENTINEL = "SENTINEL-4b1d-cloud-init"


@pytest.mark.parametrize(
    ("pid", "want"),
    [
        ("hosts/hv1/domains/proxy-abc", ("hv1", "proxy-abc")),
        ("hosts/hv1/domains/", None),
        ("hosts//domains/x", None),
        ("hosts/hv1/domain/x", None),
        ("hosts/hv1/domains/x/y", None),
        ("zones/a/instances/x", None),
        ("", None),
    ],
)
def test_parse_id(pid, want):
    assert domain.parse_id(pid) == want


@pytest.mark.parametrize(
    ("state", "ip", "want"),
    [
        (0, "", State.PROVISIONING),
        (1, "10.0.0.5", State.RUNNING),
        (1, "", State.PROVISIONING),
        (2, "10.0.0.5", State.RUNNING),
        (2, "", State.PROVISIONING),
        (3, "10.0.0.5", State.STOPPED),  # paused
        (4, "", State.STOPPED),  # shutting down
        (5, "", State.STOPPED),  # shut off
        (6, "", State.STOPPED),  # crashed
        (7, "", State.STOPPED),  # pm-suspended
        (42, "10.0.0.5", State.STOPPED),  # unknown
    ],
)
def test_map_state(state, ip, want):
    assert domain.map_state(state, ip) is want


def test_first_ipv4_skips_v6_and_loopback():
    addrs = {
        "lo": {"addrs": [{"addr": "127.0.0.1", "type": 0}]},
        "eth0": {"addrs": [{"addr": "fe80::1", "type": 1}, {"addr": "192.168.1.7", "type": 0}]},
    }
    assert domain.first_ipv4(addrs) == "192.168.1.7"
    assert domain.first_ipv4({}) == "" and domain.first_ipv4(None) == ""


def test_metadata_round_trip_and_unmarked_domain():
    created = datetime(2026, 9, 11, 15, 26, tzinfo=UTC)
    xml = f"<domain><name>x</name><metadata>{domain.metadata_xml('uid-1', created, 'ns', 'p')}</metadata></domain>"
    mark = domain.read_mark(xml)
    assert mark == domain.Mark(True, "uid-1", created, "", "ns")
    assert domain.read_mark("<domain><name>x</name></domain>") == domain.Mark(False, "", None)
    bad = xml.replace("2026-09-11T15:26:00Z", "yesterday")
    assert domain.read_mark(bad).created_at is None
    assert "installation" not in xml  # none asked: no mark


def test_the_installation_mark_round_trips():
    created = datetime(2026, 9, 11, 15, 26, tzinfo=UTC)
    meta = domain.metadata_xml("uid-1", created, "ns", "p", "blue")
    root = ET.fromstring(meta)
    assert root.findtext(f"{{{domain.METADATA_NS}}}installation") == "blue"
    xml = f"<domain><name>x</name><metadata>{meta}</metadata></domain>"
    assert domain.read_mark(xml) == domain.Mark(True, "uid-1", created, "blue", "ns")


def test_domain_xml_parses_and_carries_the_mark():
    host = KvmHost(name="hv1", address="hv1:22", user="u", bridge="br0")
    xml = domain.domain_xml(
        name="proxy-x", host=host, machine=MachineType(vcpus=2, memoryMiB=1024), overlay_path="/p/o.qcow2",
        seed_path="/p/s.iso", metadata=domain.metadata_xml("u1", datetime.now(UTC), installation="blue"), guest_agent=True,
    )
    root = ET.fromstring(xml)
    assert root.get("type") == "kvm" and root.findtext("vcpu") == "2"
    assert root.find("devices/interface/source").get("bridge") == "br0"
    assert root.find("devices/channel/target").get("name") == "org.qemu.guest_agent.0"
    assert domain.read_mark(xml).uid == "u1" and domain.read_mark(xml).installation == "blue"


def test_bridged_uri():
    assert bridged_uri("qemu:///system", "/tmp/s") == "qemu+unix:///system?socket=/tmp/s"
    assert bridged_uri("test:///default", "/tmp/s") == "test+unix:///default?socket=/tmp/s"


def test_seed_iso_is_a_cidata_iso9660_with_the_three_files(tmp_path):
    files = {"user-data": b"#cloud-config\n", "meta-data": b"instance-id: x\n", "vendor-data": b""}
    img = seediso.build(files)
    assert len(img) % 2048 == 0
    assert seediso.read_joliet(img) == files
    path = tmp_path / "seed.iso"
    path.write_bytes(img)
    blkid = subprocess.run(["blkid", "-o", "export", str(path)], capture_output=True, text=True)
    if blkid.returncode == 0:  # util-linux is on every Debian, but be gentle
        assert "LABEL=cidata" in blkid.stdout and "TYPE=iso9660" in blkid.stdout


def test_seed_iso_large_user_data():
    big = b"x" * 300_000
    assert seediso.read_joliet(seediso.build({"user-data": big}))["user-data"] == big


class FakeStream:
    def __init__(self) -> None:
        self.data = io.BytesIO()
        self.finished = self.aborted = False

    def send(self, b: bytes) -> int:
        n = min(len(b), 1000)  # partial sends must be retried
        self.data.write(b[:n])
        return n

    def finish(self) -> None:
        self.finished = True

    def abort(self) -> None:
        self.aborted = True


class FakeUploadConn:
    def __init__(self) -> None:
        self.stream = FakeStream()

    def newStream(self, flags):  # noqa: N802
        return self.stream


class FakeVol:
    def __init__(self) -> None:
        self.upload_args = None

    def upload(self, stream, offset, length, flags):
        self.upload_args = (offset, length)


def test_stream_upload_sends_everything_then_finishes():
    conn, vol = FakeUploadConn(), FakeVol()
    image.stream_upload(conn, vol, [b"a" * 2500, b"b" * 10], 2510)
    assert conn.stream.data.getvalue() == b"a" * 2500 + b"b" * 10
    assert conn.stream.finished and vol.upload_args == (0, 2510)


def test_sha_mismatch_aborts_before_the_last_chunk():
    body = b"z" * (image.CHUNK * 2 + 5)
    conn, vol = FakeUploadConn(), FakeVol()
    chunks = image.checked_chunks(io.BytesIO(body), "http://x", len(body), "0" * 64, Deadline.after(5))
    with pytest.raises(image.ImageError, match="sha256"):
        image.stream_upload(conn, vol, chunks, len(body))
    assert conn.stream.aborted and not conn.stream.finished
    assert len(conn.stream.data.getvalue()) < len(body)


def test_checked_chunks_pass_a_matching_body_and_catch_a_short_one():
    body = b"q" * (image.CHUNK + 1)
    sha = hashlib.sha256(body).hexdigest()
    assert b"".join(image.checked_chunks(io.BytesIO(body), "u", len(body), sha, Deadline.after(5))) == body
    with pytest.raises(image.ImageError, match="got"):
        list(image.checked_chunks(io.BytesIO(body[:-1]), "u", len(body), "", Deadline.after(5)))


def test_material_errors_name_the_file_never_the_key(tmp_path):
    key = tmp_path / "id"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SENTINEL}\n-----END OPENSSH PRIVATE KEY-----\n")
    known = tmp_path / "known_hosts"
    known.write_text("")
    with pytest.raises(DialError) as err:
        MaterialCache(str(key), str(known), False).load()
    assert err.value.stage is Stage.SSH_MATERIAL
    assert str(key) in str(err.value) and SENTINEL not in str(err.value)
    with pytest.raises(DialError) as err:
        MaterialCache(str(tmp_path / "missing"), str(known), False).load()
    assert err.value.stage is Stage.SSH_MATERIAL and "missing" in str(err.value)


def test_create_failure_never_carries_cloud_init(fake_provider_factory, caplog):
    """A dial failure during Create: the error, its cause and every log line
    at every level are free of the cloud-init."""
    caplog.set_level(logging.DEBUG)
    dialer = FakeDialer()
    dialer.errors["hv1"] = DialError(Stage.TCP, "ssh dial hv1.example:22: refused")
    p, _ = fake_provider_factory(
        ["hv1"], dialer, machineTypes={"s": {"vcpus": 1, "memoryMiB": 512}}, images={"i": {"url": "http://x/i"}}
    )
    req = CreateRequest(name="proxy-a", uid="u", cloud_init=f"#cloud-config\n# {SENTINEL}\n")
    with pytest.raises(base.Transient) as err:
        p.create(req, Deadline.after(5))
    assert caplog.records
    for text in (caplog.text, str(err.value), repr(err.value), str(err.value.__cause__), repr(req)):
        assert SENTINEL not in text


def test_constructor_does_not_dial():
    from providers.kvm.provider import new

    p = new("kvm", make_config([fake_host("hv1")]))
    assert p.pool.dials("hv1") == 0
    assert isinstance(p, base.Provider) and isinstance(p, base.Checker)
