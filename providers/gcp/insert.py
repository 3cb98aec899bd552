"""Building the `instances.insert` body from a CreateRequest (pure).

One NIC on the configured network with an ephemeral external NAT IP, one
boot disk that is deleted with the VM, the GC labels, the network tag the
firewall rule targets, and the cloud-init as `user-data` metadata: all in
the single insert call, so no instance ever exists without its marks.
"""

from __future__ import annotations

import re

from google.cloud import compute_v1

from providers import marks
from providers.base import CreateRequest
from providers.gcp.config import GcpConfig
from providers.marks import ValueRule

USER_DATA_KEY = "user-data"
NAT_NAME = "External NAT"
# lowercase letters, digits, '-' and '_', at most 63 (the message names no rule)
LABEL_VALUE = ValueRule("GCE label value", re.compile(r"^[a-z0-9_-]{1,63}$"))


def uid_problem(req: CreateRequest) -> str | None:
    """Why the request's UID or installation can't be a label value, or
    None (placement is judged by `providers.gcp.placement`)."""
    return marks.problem(req, LABEL_VALUE)


def machine_type_url(zone: str, machine_type: str) -> str:
    """`e2-small` → `zones/<zone>/machineTypes/e2-small`; a URL is kept."""
    return machine_type if "/" in machine_type else f"zones/{zone}/machineTypes/{machine_type}"


def network_url(network: str) -> str:
    """`default` → `global/networks/default`; a URL is kept."""
    return network if "/" in network else f"global/networks/{network}"


def build_instance(req: CreateRequest, cfg: GcpConfig) -> compute_v1.Instance:
    p = req.placement
    inst = compute_v1.Instance(
        name=req.name,
        description=f"egress proxy {req.namespace}/{req.proxy_name}".rstrip("/ "),
        machine_type=machine_type_url(p.zone, p.machine_type),
        labels=marks.of(req),  # the GC marks as instance labels
        network_interfaces=[
            compute_v1.NetworkInterface(
                network=network_url(cfg.network),
                access_configs=[compute_v1.AccessConfig(name=NAT_NAME, type_="ONE_TO_ONE_NAT")],
            )
        ],
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                type_="PERSISTENT",
                initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=p.image, disk_size_gb=cfg.diskSizeGb),
            )
        ],
    )
    if cfg.networkTag:
        inst.tags = compute_v1.Tags(items=[cfg.networkTag])
    if req.cloud_init:
        inst.metadata = compute_v1.Metadata(items=[compute_v1.Items(key=USER_DATA_KEY, value=req.cloud_init)])
    return inst
