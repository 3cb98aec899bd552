"""The provider's operations against the real daemon (test driver) over the
real sshd: the conformance rules and the full lifecycle.

libvirt's test driver has no virStorageVolUpload, so only the last hop of
the two uploads (base image, seed ISO) is replaced by a recorder; the image
is really downloaded from a loopback HTTP server, streamed, and
sha256-checked. `stream_upload` itself is tested over a fake stream in
test_provider_units.py.
"""

from __future__ import annotations

import hashlib
import http.server
import logging
import threading
import uuid

import pytest

from fleet.testing.kvmlab import TEST_POOL, TEST_URI, Lab
from providers import base
from providers.base import CreateRequest, Deadline, State
from providers.kvm import domain, seediso
from providers.kvm.config import KvmConfig
from providers.kvm.provider import KvmProvider, new
from tests.providers.conformance import ProviderConformance

pytestmark = pytest.mark.integration

IMAGE = b"QFI\xfb" + bytes(range(256)) * 4096  # ~1 MiB of "qcow2"
SENTINEL = "SENTINEL-cloud-init-7f3a9c"


class RecordingUploader:
    def __init__(self) -> None:
        self.uploads: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def __call__(self, conn, vol, chunks, length) -> None:
        data = b"".join(chunks)
        assert len(data) == length
        with self.lock:
            self.uploads[vol.name()] = data


@pytest.fixture(scope="session")
def image_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        hits = 0

        def do_GET(self):
            Handler.hits += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            self.wfile.write(IMAGE)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/image.qcow2", Handler
    srv.shutdown()
    srv.server_close()


def provider_config(lab: Lab, url: str, sha: str | None = None, **host) -> KvmConfig:
    return KvmConfig.model_validate(
        {
            "sshKeyFile": str(lab.key_file),
            "knownHostsFile": str(lab.known_hosts),
            "machineTypes": {"small": {"vcpus": 1, "memoryMiB": 512}},
            "images": {"test": {"url": url, "sha256": hashlib.sha256(IMAGE).hexdigest() if sha is None else sha}},
            "hosts": [
                {"name": "lab", "address": lab.address, "user": lab.user, "pool": TEST_POOL, "socket": lab.socket,
                 "uri": TEST_URI, "bridge": "br0", **host}
            ],
        }
    )


@pytest.fixture
def lab_provider(lab, image_server):
    p = new("kvm-lab", provider_config(lab, image_server[0]))
    p.uploader = RecordingUploader()
    yield p
    for inst in p.list_by_tag(Deadline.after(30)):
        p.delete(inst.id, Deadline.after(30))
    p.close()


class TestKvmConformance(ProviderConformance):
    provider_name = "kvm-lab"
    malformed_ids = ("", "not-an-id", "hosts/lab", "hosts/lab/domains/", "hosts//domains/x", "zones/lab/domains/x",
                     "hosts/unknown/domains/x")

    @pytest.fixture
    def provider(self, lab_provider):
        return lab_provider


def request(uid: str | None = None, cloud_init: str = "#cloud-config\n") -> CreateRequest:
    uid = uid or str(uuid.uuid4())
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", proxy_name="p1",
                         cloud_init=cloud_init)


def forget_base(lab: Lab) -> None:
    """Delete the base image an earlier test left. The test driver drops its state when its last connection
    closes, but an earlier test's connection may still be closing (seen on a loaded machine), so a test that must
    see the download starts by removing it."""
    if domain.base_name("test") in lab.virsh("vol-list", TEST_POOL):
        lab.virsh("vol-delete", domain.base_name("test"), "--pool", TEST_POOL)


def test_full_lifecycle(lab, lab_provider, image_server):
    p: KvmProvider = lab_provider
    forget_base(lab)
    req = request(cloud_init=f"#cloud-config\nwrite_files: [{{path: /x, content: {SENTINEL}}}]\n")
    pid = p.create(req, Deadline.after(30))
    assert pid == f"hosts/lab/domains/{req.name}"
    assert p.create(req, Deadline.after(30)) == pid  # again: same id, no duplicate

    inst = p.get(pid, Deadline.after(30))
    assert inst.state is State.RUNNING and inst.ip
    assert inst.uid == req.uid and inst.created_at is not None

    listed = {i.id: i for i in p.list_by_tag(Deadline.after(30))}
    assert listed[pid].uid == req.uid

    # what landed on the host: overlay backed by the base image, the seed, the domain's metadata
    vols = lab.virsh("vol-list", TEST_POOL)
    for vol in (domain.base_name("test"), domain.overlay_name(req.name), domain.seed_name(req.name)):
        assert vol in vols
    seed = seediso.read_joliet(p.uploader.uploads[domain.seed_name(req.name)])
    assert SENTINEL in seed["user-data"].decode()
    assert b"qemu-guest-agent" in seed["vendor-data"]
    assert p.uploader.uploads[domain.base_name("test")] == IMAGE

    p.delete(pid, Deadline.after(30))
    p.delete(pid, Deadline.after(30))
    with pytest.raises(base.NotFound):
        p.get(pid, Deadline.after(30))
    vols = lab.virsh("vol-list", TEST_POOL)
    assert domain.overlay_name(req.name) not in vols and domain.seed_name(req.name) not in vols
    assert domain.base_name("test") in vols  # the base image is kept for the next Create
    assert pid not in {i.id for i in p.list_by_tag(Deadline.after(30))}


def test_image_is_downloaded_once_per_host(lab_provider, image_server):
    _, handler = image_server
    before = handler.hits
    for _ in range(3):
        lab_provider.create(request(), Deadline.after(30))
    assert handler.hits - before <= 1


def test_stopped_domain_is_started_by_create_and_reads_stopped(lab, lab_provider):
    req = request()
    pid = lab_provider.create(req, Deadline.after(30))
    lab.virsh("destroy", req.name)
    assert lab_provider.get(pid, Deadline.after(30)).state is State.STOPPED
    assert lab_provider.create(req, Deadline.after(30)) == pid
    assert lab_provider.get(pid, Deadline.after(30)).state is State.RUNNING


def test_unmanaged_domains_are_not_listed(lab_provider):
    ids = {i.id for i in lab_provider.list_by_tag(Deadline.after(30))}
    assert "hosts/lab/domains/test" not in ids  # the test driver's own domain has no mark


def test_sha256_mismatch_fails_and_leaves_no_volume(lab, image_server):
    p = new("kvm-lab", provider_config(lab, image_server[0] + "?bad", sha="0" * 64))
    p.uploader = RecordingUploader()
    try:
        forget_base(lab)
        with pytest.raises(base.Transient) as err:
            p.create(request(), Deadline.after(30))
        assert "sha256" in str(err.value)
        assert domain.base_name("test") not in lab.virsh("vol-list", TEST_POOL)
        assert p.check(Deadline.after(10))[0].ready  # the connection was kept
        assert p.pool.dials("lab") == 1
    finally:
        p.close()


def test_bad_placement_is_permanent_before_touching_the_host(lab_provider):
    for placement in ({"zone": "nope"}, {"machine_type": "huge"}, {"image": "windows"}):
        req = CreateRequest(name="proxy-x", uid="u", placement=base.Placement(**placement))
        with pytest.raises(base.Permanent) as err:
            lab_provider.create(req, Deadline.after(5))
        assert next(iter(placement.values())) in str(err.value)
    assert lab_provider.pool.dials("lab") == 0


def test_delete_on_a_host_no_longer_configured_is_success(lab_provider):
    lab_provider.delete("hosts/gone/domains/proxy-x", Deadline.after(5))


def test_cloud_init_never_logged_at_any_level(lab_provider, caplog):
    caplog.set_level(logging.DEBUG)
    req = request(cloud_init=f"#cloud-config\n# {SENTINEL}\n")
    pid = lab_provider.create(req, Deadline.after(30))
    lab_provider.get(pid, Deadline.after(30))
    lab_provider.delete(pid, Deadline.after(30))
    assert caplog.records  # something was logged
    assert SENTINEL not in caplog.text
    assert SENTINEL not in repr(req)
