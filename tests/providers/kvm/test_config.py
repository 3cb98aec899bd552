import pytest

from fleet import config as fleet_config
from providers.kvm.config import KvmConfig

HOST = {"name": "hv1", "address": "hv1.example:22", "user": "fleet"}


def providers_file(block: dict) -> dict:
    return {"providers": [{"name": "kvm-home", "type": "kvm", "kvm": block}]}


def base_block(**kw) -> dict:
    return {"sshKeyFile": "/etc/kvm-ssh/id", "knownHostsFile": "/etc/kvm-ssh/known_hosts", "hosts": [HOST], **kw}


def test_defaults():
    cfg = KvmConfig.model_validate(base_block())
    h = cfg.hosts[0]
    assert (h.pool, h.socket, h.uri, h.bridge) == ("default", "/var/run/libvirt/libvirt-sock", "qemu:///system", "")
    assert (h.hostname, h.port) == ("hv1.example", 22)
    assert cfg.installGuestAgent and cfg.diskSizeGb == 10


def test_full_block():
    cfg = KvmConfig.model_validate(
        base_block(
            machineTypes={"small": {"vcpus": 1, "memoryMiB": 1024}},
            images={"ubuntu-24": {"url": "https://example/img.qcow2", "sha256": "a" * 64}},
            hosts=[{**HOST, "pool": "vms", "socket": "/run/libvirt/libvirt-sock", "uri": "test:///default",
                    "bridge": "br0"}],
        )
    )
    assert cfg.machineTypes["small"].memoryMiB == 1024
    assert cfg.host("hv1").bridge == "br0" and cfg.host("nope") is None


def test_insecure_needs_no_known_hosts():
    block = base_block(insecureIgnoreHostKey=True)
    del block["knownHostsFile"]
    assert KvmConfig.model_validate(block).insecureIgnoreHostKey


@pytest.mark.parametrize(
    ("edit", "path", "value"),
    [
        ({"knownHostsFile": ""}, "providers[0].kvm.knownHostsFile", "''"),
        ({"hosts": [{**HOST, "name": "a/b"}]}, "providers[0].kvm.hosts[0].name", "'a/b'"),
        ({"hosts": [{**HOST, "address": "nas1"}]}, "providers[0].kvm.hosts[0].address", "'nas1'"),
        ({"hosts": [{**HOST, "address": "nas1:99999"}]}, "providers[0].kvm.hosts[0].address", "'nas1:99999'"),
        ({"hosts": [{**HOST, "socket": "run/x"}]}, "providers[0].kvm.hosts[0].socket", "'run/x'"),
        ({"hosts": [{**HOST, "uri": "qemu+ssh://h/system"}]}, "providers[0].kvm.hosts[0].uri", "'qemu+ssh://h/system'"),
        ({"hosts": [HOST, HOST]}, "providers[0].kvm.hosts", "hv1"),
        ({"hosts": []}, "providers[0].kvm.hosts", "[]"),
        ({"hosts": [{**HOST, "colour": "red"}]}, "providers[0].kvm.hosts[0].colour", "a string, is not shown"),  # never its value
        ({"images": {"a.b": {"url": "https://x"}}}, "providers[0].kvm.images", "a.b"),
        ({"images": {"u": {"url": "ftp://x"}}}, "providers[0].kvm.images.u.url", "'ftp://x'"),
        ({"images": {"u": {"url": "https://x", "sha256": "xyz"}}}, "providers[0].kvm.images.u.sha256", "'xyz'"),
        ({"machineTypes": {"s": {"vcpus": 0, "memoryMiB": 512}}}, "providers[0].kvm.machineTypes.s.vcpus", "0"),
    ],
)
def test_errors_name_the_field_and_value(edit, path, value):
    with pytest.raises(fleet_config.ConfigError) as err:
        fleet_config.parse(providers_file(base_block(**edit)))
    text = str(err.value)
    assert path in text and value in text, text


def test_vendor_data_inline_or_from_a_file_read_when_used(tmp_path):
    assert KvmConfig.model_validate(base_block(vendorData="#cloud-config\n")).vendor_data() == "#cloud-config\n"
    assert KvmConfig.model_validate(base_block()).vendor_data() == ""
    path = tmp_path / "vendorData"
    cfg = KvmConfig.model_validate(base_block(vendorDataFile=str(path)))  # need not exist at load (controller, beat)
    with pytest.raises(OSError):
        cfg.vendor_data()
    path.write_text("#cloud-config\nruncmd: [true]\n")
    assert cfg.vendor_data() == "#cloud-config\nruncmd: [true]\n"
    path.write_text("#cloud-config\n")  # read at each use: a rotated Secret needs no restart
    assert cfg.vendor_data() == "#cloud-config\n"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ({"vendorData": "x", "vendorDataFile": "/etc/fleet/secrets/vendorData"}, "not both"),
        ({"vendorDataFile": "secrets/vendorData"}, "absolute"),
    ],
)
def test_vendor_data_file_errors(edit, problem):
    with pytest.raises(fleet_config.ConfigError) as err:
        fleet_config.parse(providers_file(base_block(**edit)))
    assert "providers[0].kvm.vendorDataFile" in str(err.value) and problem in str(err.value)


def test_the_kvm_secret_field_has_a_file_alternative():
    for field in KvmConfig.secret_fields:
        assert KvmConfig.secret_file_field(field) in KvmConfig.model_fields
