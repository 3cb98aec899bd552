"""The kvm provider: each proxy is a libvirt domain on one configured host.

Placement: `zone` names the host (`hosts[].name`), `machineType` and `image`
name catalogue entries; each may be left empty when the catalogue has
exactly one entry (placement.py: the rule the controller applies too).
`region` is ignored. The id is
`hosts/<host>/domains/<name>`, so Get and Delete need nothing else.

Create blocks until the domain has started (and, on an image's first use on
a host, for the whole download). Every libvirt call goes through the
host's pooled connection (`HostPool.call`); errors are translated once, by
`errors.classify`, at `_call`. Never logs cloud-init contents: only its size.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import libvirt

from providers import base, marks
from providers.base import CreateRequest, Deadline, Instance, State, TargetStatus
from providers.boundary import Boundary, Failure
from providers.kvm import domain, image, placement, seediso
from providers.kvm.check import check_hosts
from providers.kvm.config import KvmConfig, KvmHost
from providers.kvm.dialer import SSHDialer
from providers.kvm.errors import classify, is_transport_error, libvirt_code
from providers.kvm.material import MaterialCache
from providers.kvm.pool import HostPool

log = logging.getLogger("providers.kvm")

GUEST_AGENT_VENDOR_DATA = """#cloud-config
packages:
  - qemu-guest-agent
runcmd:
  - [systemctl, enable, --now, qemu-guest-agent]
"""

_ADDRESS_SOURCES = (
    libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE,
    libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP,
    libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT,
)


class KvmProvider:
    def __init__(self, name: str, cfg: KvmConfig, pool: HostPool | None = None) -> None:
        self.name = name
        self.cfg = cfg
        material = MaterialCache(cfg.sshKeyFile, cfg.knownHostsFile, cfg.insecureIgnoreHostKey)
        self.pool = pool or HostPool(SSHDialer(material))
        self.uploader: image.Uploader = image.stream_upload
        self._locks_guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self.boundary = Boundary(provider=name, classify=classify, on_error=self._failed,
                                 deadline_first=False, tell_not_found=True)

    # -- plumbing --------------------------------------------------------------------

    def _lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def _call(self, op: str, pid: str, host: KvmHost, deadline: Deadline, fn: Any) -> Any:
        """fn(connection) on the host's connection, at the boundary."""
        start = time.monotonic()
        out = self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda _: self.pool.call(host, deadline, fn))
        log.debug("kvm %s %s %s ok in %.0f ms", self.name, op, pid, (time.monotonic() - start) * 1000)
        return out

    def _failed(self, f: Failure) -> None:
        log.info("kvm %s %s %s failed after %.0f ms: %s: %s", self.name, f.op, f.id, f.elapsed * 1000, f.cls.kind, f.error)

    def _permanent(self, op: str, pid: str, why: str) -> base.ProviderError:
        return base.wrap(base.Permanent, op, self.name, pid, why)

    def _resolve(self, op: str, pid: str) -> tuple[KvmHost, str]:
        parsed = domain.parse_id(pid)
        if parsed is None:
            raise self._permanent(op, pid, "malformed id, want hosts/<host>/domains/<name>")
        host = self.cfg.host(parsed[0])
        if host is None:
            raise self._permanent(op, pid, f"host {parsed[0]!r} is not configured")
        return host, parsed[1]

    # -- Checker -----------------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_hosts(list(self.cfg.hosts), self.pool.probe, deadline)

    def connection_state(self) -> dict[str, dict[str, Any]]:
        """For `celery inspect provider_status`: the pool's view of each host."""
        return self.pool.state([h.name for h in self.cfg.hosts])

    # -- Create --------------------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        pl = request.placement
        chosen = placement.choose(self.cfg, pl)  # the controller's rule too (placement_problem)
        if isinstance(chosen, str):
            only = self.cfg.hosts[0].name if len(self.cfg.hosts) == 1 else ""
            raise self._permanent("create", domain.provider_id(pl.zone or only or "?", request.name), chosen)
        host_name, mt, img = chosen.host, chosen.machine_type, chosen.image
        pid = domain.provider_id(host_name, request.name)
        problem = marks.problem(request)
        if problem:
            raise self._permanent("create", pid, problem)
        try:
            vendor = self.cfg.vendor_data() or (GUEST_AGENT_VENDOR_DATA if self.cfg.installGuestAgent else "")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise self._permanent("create", pid, f"vendorDataFile {self.cfg.vendorDataFile}: {why}") from exc
        host = self.cfg.host(host_name)
        assert host is not None
        log.info(
            "kvm %s create %s: host=%s machineType=%s image=%s cloudInit=%d bytes",
            self.name,
            pid,
            host.name,
            mt,
            img,
            len(request.cloud_init.encode()),
        )
        try:
            with self._lock(f"{host.name}/{request.name}"):
                self._call(
                    "create", pid, host, deadline, lambda conn: self._create(conn, host, request, mt, img, vendor, deadline)
                )
        except base.NotFound as exc:  # never NotFound from Create: something vanished mid-way
            raise base.wrap(base.Transient, "create", self.name, pid, exc.cause) from exc
        return pid

    def _create(self, conn: Any, host: KvmHost, req: CreateRequest, mt: str, img: str, vendor: str, deadline: Deadline) -> None:
        try:
            dom = conn.lookupByName(req.name)
        except libvirt.libvirtError as exc:
            if libvirt_code(exc) != libvirt.VIR_ERR_NO_DOMAIN or is_transport_error(exc):
                raise
        else:
            if not dom.isActive():
                dom.create()
            return
        pool = conn.storagePoolLookupByName(host.pool)
        base_vol = self._ensure_base(conn, pool, host, img, deadline)
        overlay = self._ensure_overlay(pool, req.name, base_vol)
        seed = self._rebuild_seed(conn, pool, req, vendor)
        meta = domain.metadata_xml(req.uid, datetime.now(UTC), base.namespace_mark(req), req.proxy_name, req.installation)
        xml = domain.domain_xml(
            name=req.name,
            host=host,
            machine=self.cfg.machineTypes[mt],
            overlay_path=overlay.path(),
            seed_path=seed.path(),
            metadata=meta,
            guest_agent=self.cfg.installGuestAgent,
        )
        dom = conn.defineXML(xml)
        dom.create()

    def _lookup_vol(self, pool: Any, name: str) -> Any | None:
        try:
            return pool.storageVolLookupByName(name)
        except libvirt.libvirtError as exc:
            if libvirt_code(exc) == libvirt.VIR_ERR_NO_STORAGE_VOL and not is_transport_error(exc):
                return None
            raise

    def _ensure_base(self, conn: Any, pool: Any, host: KvmHost, img: str, deadline: Deadline) -> Any:
        name = domain.base_name(img)
        with self._lock(f"{host.name}/image/{img}"):  # one download per host and image
            vol = self._lookup_vol(pool, name)
            if vol is not None:
                return vol
            spec = self.cfg.images[img]
            log.info("kvm %s host %s: downloading image %s from %s", self.name, host.name, img, spec.url)
            try:
                return self._download(conn, pool, name, spec, deadline)
            except image.ImageError as exc:  # not evidence against the link: keep it
                raise base.wrap(base.Transient, "create", self.name, f"hosts/{host.name}/images/{img}", exc) from exc

    def _download(self, conn: Any, pool: Any, name: str, spec: Any, deadline: Deadline) -> Any:
        """Streamed from the URL into the volume; a failed or mismatched
        download deletes the volume, so the next Create starts over."""
        resp, length = image.open_image(spec.url, deadline)
        try:
            vol = pool.createXML(domain.volume_xml(name, length, "qcow2"), 0)
            try:
                self.uploader(conn, vol, image.checked_chunks(resp, spec.url, length, spec.sha256, deadline), length)
            except BaseException:
                try:
                    vol.delete(0)
                finally:
                    raise
        finally:
            resp.close()
        return vol

    def _ensure_overlay(self, pool: Any, name: str, base_vol: Any) -> Any:
        vol = self._lookup_vol(pool, domain.overlay_name(name))
        if vol is not None:
            return vol  # reused: a retried Create keeps the disk it already has
        size = self.cfg.diskSizeGb << 30
        return pool.createXML(domain.volume_xml(domain.overlay_name(name), size, "qcow2", base_vol.path()), 0)

    def _rebuild_seed(self, conn: Any, pool: Any, req: CreateRequest, vendor: str) -> Any:
        iso = seediso.build(
            {
                "user-data": req.cloud_init.encode(),
                "meta-data": f"instance-id: {req.name}\nlocal-hostname: {req.name}\n".encode(),
                "vendor-data": vendor.encode(),
            }
        )
        old = self._lookup_vol(pool, domain.seed_name(req.name))
        if old is not None:
            old.delete(0)  # always rebuilt: the cloud-init may have changed
        vol = pool.createXML(domain.volume_xml(domain.seed_name(req.name), len(iso), "raw"), 0)
        self.uploader(conn, vol, [iso], len(iso))
        return vol

    # -- Get ---------------------------------------------------------------------------------

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        host, name = self._resolve("get", provider_id)
        return self._call(
            "get", provider_id, host, deadline, lambda conn: self._instance(provider_id, conn.lookupByName(name))
        )

    def _instance(self, pid: str, dom: Any) -> Instance:
        mark = domain.read_mark(dom.XMLDesc(0))
        state = dom.state()[0]
        ip = self._address(dom) if state in (domain.DOMAIN_RUNNING, domain.DOMAIN_BLOCKED) else ""
        mapped = domain.map_state(state, ip)
        return Instance(pid, mapped, ip if mapped is State.RUNNING else "", mark.uid, mark.created_at, mark.installation,
                        mark.namespace)

    @staticmethod
    def _address(dom: Any) -> str:
        """DHCP lease / ARP table first, then the guest agent."""
        for source in _ADDRESS_SOURCES:
            try:
                ip = domain.first_ipv4(dom.interfaceAddresses(source, 0))
            except libvirt.libvirtError as exc:
                if is_transport_error(exc):
                    raise
                continue  # no agent yet, source unsupported: try the next
            if ip:
                return ip
        return ""

    # -- Delete ---------------------------------------------------------------------------------

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        parsed = domain.parse_id(provider_id)
        if parsed is not None and self.cfg.host(parsed[0]) is None:
            log.info("kvm %s delete %s: host no longer configured, nothing to reach", self.name, provider_id)
            return
        host, name = self._resolve("delete", provider_id)
        self._call("delete", provider_id, host, deadline, lambda conn: self._delete(conn, host, name))

    def _delete(self, conn: Any, host: KvmHost, name: str) -> None:
        def gone(exc: libvirt.libvirtError, code: int) -> bool:
            return libvirt_code(exc) == code and not is_transport_error(exc)

        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError as exc:
            if not gone(exc, libvirt.VIR_ERR_NO_DOMAIN):
                raise
            dom = None
        if dom is not None:
            try:
                if dom.isActive():
                    dom.destroy()
            except libvirt.libvirtError as exc:
                if not (gone(exc, libvirt.VIR_ERR_NO_DOMAIN) or gone(exc, libvirt.VIR_ERR_OPERATION_INVALID)):
                    raise
            self._undefine(dom, gone)
        pool = conn.storagePoolLookupByName(host.pool)
        for vol_name in (domain.overlay_name(name), domain.seed_name(name)):
            vol = self._lookup_vol(pool, vol_name)
            if vol is None:
                continue
            try:
                vol.delete(0)
            except libvirt.libvirtError as exc:
                if not gone(exc, libvirt.VIR_ERR_NO_STORAGE_VOL):
                    raise

    @staticmethod
    def _undefine(dom: Any, gone: Any) -> None:
        """With NVRAM, managed save and snapshot metadata; a driver that
        refuses a flag (old libvirt, the test driver has no NVRAM) gets the
        next smaller set, as virsh does."""
        flag_sets = (
            libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
            | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
            | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA,
            libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA,
            0,
        )
        for i, flags in enumerate(flag_sets):
            try:
                dom.undefineFlags(flags)
                return
            except libvirt.libvirtError as exc:
                if gone(exc, libvirt.VIR_ERR_NO_DOMAIN):
                    return
                refused = libvirt_code(exc) in (libvirt.VIR_ERR_INVALID_ARG, libvirt.VIR_ERR_NO_SUPPORT)
                if not refused or is_transport_error(exc) or i == len(flag_sets) - 1:
                    raise

    # -- ListByTag ---------------------------------------------------------------------------------

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        out: list[Instance] = []
        for host in self.cfg.hosts:  # a host that is down fails the whole list
            out += self._call("list", f"hosts/{host.name}", host, deadline, lambda conn, h=host: self._list(conn, h))
        return out

    def _list(self, conn: Any, host: KvmHost) -> list[Instance]:
        found: list[Instance] = []
        for dom in conn.listAllDomains(0):
            try:
                pid = domain.provider_id(host.name, dom.name())
                if not domain.read_mark(dom.XMLDesc(0)).managed:
                    continue
                found.append(self._instance(pid, dom))
            except libvirt.libvirtError as exc:
                if is_transport_error(exc):
                    raise
                log.info("kvm %s list: skipping an unreadable domain on %s: %s", self.name, host.name, exc)
            except ValueError as exc:  # unparsable XML
                log.info("kvm %s list: skipping a domain with unreadable XML on %s: %s", self.name, host.name, exc)
        return found

    def close(self) -> None:
        self.pool.close()


def new(name: str, cfg: KvmConfig) -> KvmProvider:
    """Does not dial: the first check or call opens each host's connection."""
    return KvmProvider(name, cfg)
