"""Pure data about libvirt objects: ids, names, the domain and volume XML the
provider defines, the `<metadata>` mark read back, and the state mapping.

No I/O here, so every rule is a table test. The managed mark, UID,
CreatedAt and the installation live in one `<metadata>` element written by
the same defineXML call that creates the domain (libvirt has no labels).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from xml.sax.saxutils import escape, quoteattr

from providers import base
from providers.base import State
from providers.kvm.config import KvmHost, MachineType

METADATA_NS = "https://fleet.example.com/xmlns/kvm/1"
METADATA_PREFIX = "fleet"

# virDomainState
DOMAIN_NOSTATE, DOMAIN_RUNNING, DOMAIN_BLOCKED = 0, 1, 2


def provider_id(host: str, name: str) -> str:
    return f"hosts/{host}/domains/{name}"


def parse_id(pid: str) -> tuple[str, str] | None:
    """`hosts/<host>/domains/<name>` → (host, name), else None."""
    parts = pid.split("/")
    if len(parts) != 4 or parts[0] != "hosts" or parts[2] != "domains" or not parts[1] or not parts[3]:
        return None
    return parts[1], parts[3]


def overlay_name(name: str) -> str:
    return f"{name}.qcow2"


def seed_name(name: str) -> str:
    return f"{name}-seed.iso"


def base_name(image: str) -> str:
    """The base image volume, named by the catalogue key: editing what a key
    points at does not re-download (add a new key instead)."""
    return f"fleet-base-{image}.img"


@dataclass(frozen=True)
class Mark:
    managed: bool
    uid: str
    created_at: datetime | None
    installation: str = ""  # "" on a domain defined before the mark existed
    namespace: str = ""  # the Proxy's namespace ("" when none was written)


def metadata_xml(uid: str, created_at: datetime, namespace: str = "", proxy: str = "", installation: str = "") -> str:
    """The `<metadata>` mark; `<installation>` only when there is one (an
    empty installation writes no mark)."""
    p = METADATA_PREFIX
    inst = f"<{p}:installation>{escape(installation)}</{p}:installation>" if installation else ""
    return (
        f'<{p}:instance xmlns:{p}="{METADATA_NS}">'
        f"<{p}:managed>{base.LABEL_MANAGED_YES}</{p}:managed>"
        f"<{p}:uid>{escape(uid)}</{p}:uid>"
        f"<{p}:createdAt>{created_at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}</{p}:createdAt>"
        f"<{p}:namespace>{escape(namespace)}</{p}:namespace>"
        f"<{p}:proxy>{escape(proxy)}</{p}:proxy>"
        f"{inst}"
        f"</{p}:instance>"
    )


def read_mark(domain_xml: str) -> Mark:
    """The mark from a domain's XML; an unparsable CreatedAt is None (counts
    as very old for GC, which never shields an orphan forever). XML that does
    not parse is a ValueError (ElementTree's ParseError is a SyntaxError)."""
    try:
        root = ET.fromstring(domain_xml)
    except ET.ParseError as exc:
        raise ValueError(f"domain XML does not parse: {exc}") from exc
    inst = root.find(f"metadata/{{{METADATA_NS}}}instance")
    if inst is None:
        return Mark(False, "", None)

    def text(tag: str) -> str:
        el = inst.find(f"{{{METADATA_NS}}}{tag}")
        return (el.text or "").strip() if el is not None else ""

    created: datetime | None
    try:
        created = datetime.fromisoformat(text("createdAt").replace("Z", "+00:00"))
    except ValueError:
        created = None
    return Mark(text("managed") == base.LABEL_MANAGED_YES, text("uid"), created, text("installation"), text("namespace"))


def domain_type(uri: str) -> str:
    scheme = uri.split(":", 1)[0]
    return {"qemu": "kvm", "test": "test"}.get(scheme, scheme)


def domain_xml(
    *,
    name: str,
    host: KvmHost,
    machine: MachineType,
    overlay_path: str,
    seed_path: str,
    metadata: str,
    guest_agent: bool,
) -> str:
    dtype = domain_type(host.uri)
    if host.bridge:
        nic = f"<interface type='bridge'><source bridge={quoteattr(host.bridge)}/><model type='virtio'/></interface>"
    else:
        nic = "<interface type='network'><source network='default'/><model type='virtio'/></interface>"
    agent = (
        "<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>" if guest_agent else ""
    )
    cpu = "<cpu mode='host-passthrough'/>" if dtype == "kvm" else ""
    return f"""<domain type={quoteattr(dtype)}>
  <name>{escape(name)}</name>
  <metadata>{metadata}</metadata>
  <memory unit='MiB'>{machine.memoryMiB}</memory>
  <vcpu>{machine.vcpus}</vcpu>
  <os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  {cpu}
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file={quoteattr(overlay_path)}/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file={quoteattr(seed_path)}/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    {nic}
    {agent}
    <serial type='pty'/>
    <console type='pty'/>
  </devices>
</domain>"""


def volume_xml(name: str, capacity: int, fmt: str, backing_path: str = "", backing_format: str = "qcow2") -> str:
    backing = ""
    if backing_path:
        fmt_el = f"<format type={quoteattr(backing_format)}/>"
        backing = f"<backingStore><path>{escape(backing_path)}</path>{fmt_el}</backingStore>"
    return (
        f"<volume><name>{escape(name)}</name><capacity unit='bytes'>{capacity}</capacity>"
        f"<target><format type={quoteattr(fmt)}/></target>{backing}</volume>"
    )


def map_state(domain_state: int, ip: str) -> State:
    """nostate → Provisioning; running or blocked: Running with an IP, else
    Provisioning; everything else (paused, shut down, crashed, suspended,
    unknown) → Stopped, which the reconciler replaces."""
    if domain_state == DOMAIN_NOSTATE:
        return State.PROVISIONING
    if domain_state in (DOMAIN_RUNNING, DOMAIN_BLOCKED):
        return State.RUNNING if ip else State.PROVISIONING
    return State.STOPPED


def first_ipv4(addresses: dict | None) -> str:
    """The first non-loopback IPv4 from virDomainInterfaceAddresses."""
    for iface in (addresses or {}).values():
        for a in iface.get("addrs") or []:
            if a.get("type") == 0 and a.get("addr") and not a["addr"].startswith("127."):
                return a["addr"]
    return ""
