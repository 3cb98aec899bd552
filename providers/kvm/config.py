"""The `kvm:` block of a provider entry.

Pure data and validation: importing it never imports paramiko or libvirt, so
`fleet check -c` can validate a file on a machine without the kvm extra.
Values that end up in provider ids or volume names (host, image and machine
type names) are restricted so they can never contain the id separator.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from providers.blocks import Block, Runtime

DEFAULT_SOCKET = "/var/run/libvirt/libvirt-sock"
DEFAULT_URI = "qemu:///system"
DEFAULT_POOL = "default"

# Host names go into `hosts/<host>/domains/<name>`; image and machine type
# names into volume names. No separator, no dots, no spaces.
NAME = re.compile(r"^[A-Za-z0-9]([-_A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
URI = re.compile(r"^[a-z][a-z0-9]*:///\S*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _check_name(value: str, what: str) -> str:
    if not NAME.match(value):
        raise ValueError(
            f"{what} must be 1-63 letters, digits, '-' or '_' (no '/', '.', or spaces), "
            "starting and ending with a letter or digit"
        )
    return value


class KvmHost(Block):
    name: str
    address: str  # host:port of the hypervisor's sshd
    user: str = Field(min_length=1)
    pool: str = Field(default=DEFAULT_POOL, min_length=1)
    socket: str = DEFAULT_SOCKET  # libvirt's unix socket on the host
    uri: str = DEFAULT_URI  # the libvirt driver the daemon serves
    bridge: str = ""  # host bridge the VMs' NIC joins; empty: libvirt's `default` network

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "host name")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("address must be host:port, e.g. hv1.example.net:22")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError("address: an IPv6 host must be in brackets, e.g. [::1]:22")
        return v

    @field_validator("socket")
    @classmethod
    def _socket(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("socket must be an absolute path on the host")
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not URI.match(v) or "+" in v.split(":", 1)[0]:
            raise ValueError("uri must be a plain libvirt driver URI such as qemu:///system or test:///default")
        return v

    @field_validator("pool", "bridge")
    @classmethod
    def _no_space(cls, v: str) -> str:
        if any(c.isspace() for c in v) or "/" in v:
            raise ValueError("must not contain spaces or '/'")
        return v

    @property
    def hostname(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])


class MachineType(Block):
    vcpus: int = Field(ge=1, le=1024)
    memoryMiB: int = Field(ge=64)


class Image(Block):
    url: str = Field(min_length=1)
    sha256: str = ""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("image url must be http:// or https://")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if v and not SHA256.match(v):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return v


class KvmConfig(Block):
    """Hosts, the SSH material shared by all of them, and the catalogues that
    `placement.machineType` and `placement.image` name.

    `vendorData` (cloud-init vendor data, may hold secrets) is given inline
    or as `vendorDataFile`, a path the worker reads at each create; the file
    need not exist when the config is loaded (only that provider's worker
    mounts it). `fleet render` turns an inline value into the file.
    """

    secret_fields: ClassVar[tuple[str, ...]] = ("vendorData",)

    sshKeyFile: str = Field(min_length=1)
    # Declared before knownHostsFile: its validator reads this value.
    insecureIgnoreHostKey: bool = False
    knownHostsFile: str = Field(default="", validate_default=True)
    machineTypes: dict[str, MachineType] = Field(default_factory=dict)
    images: dict[str, Image] = Field(default_factory=dict)
    diskSizeGb: int = Field(default=10, ge=1, le=65536)
    vendorData: str = ""
    vendorDataFile: str = ""
    installGuestAgent: bool = True
    hosts: list[KvmHost] = Field(min_length=1)

    @field_validator("machineTypes", "images")
    @classmethod
    def _keys(cls, v: dict) -> dict:
        for key in v:
            _check_name(key, f"key {key!r}")
        return v

    @field_validator("knownHostsFile")
    @classmethod
    def _known_hosts(cls, v: str, info: ValidationInfo) -> str:
        if not v and not info.data.get("insecureIgnoreHostKey"):
            raise ValueError("knownHostsFile is required unless insecureIgnoreHostKey is true")
        return v

    @field_validator("vendorDataFile")
    @classmethod
    def _vendor_data_file(cls, v: str, info: ValidationInfo) -> str:
        if v and info.data.get("vendorData"):
            raise ValueError("give vendorData or vendorDataFile, not both")
        if v and not v.startswith("/"):
            raise ValueError("vendorDataFile must be an absolute path")
        return v

    @field_validator("hosts")
    @classmethod
    def _unique_hosts(cls, v: list[KvmHost]) -> list[KvmHost]:
        seen: set[str] = set()
        for h in v:
            if h.name in seen:
                raise ValueError(f"duplicate host name {h.name!r}")
            seen.add(h.name)
        return v

    def runtime(self) -> Runtime:
        """The SSH key and known_hosts file, shared by every host: mounted
        from the provider's Secret. libvirt's client library is in the image."""
        return Runtime(files=tuple(f for f in (self.sshKeyFile, self.knownHostsFile) if f))

    def vendor_data(self) -> str:
        """The vendor data: inline, or read from vendorDataFile now (OSError
        when it cannot be read); "" when neither is set."""
        if self.vendorDataFile:
            with open(self.vendorDataFile, encoding="utf-8") as f:
                return f.read()
        return self.vendorData

    def host(self, name: str) -> KvmHost | None:
        for h in self.hosts:
            if h.name == name:
                return h
        return None
