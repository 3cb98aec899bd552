"""Which Proxy placements the aws provider can never satisfy (pure; no SDK).

- `region`: empty means the config's `region`; otherwise one of `region`
  and `regions` (list_by_tag, GC and the check cover only those).
- `zone`: empty (any zone: the region's default subnet), an availability
  zone of that region (`eu-west-1a`), or a subnet id (`subnet-0abc…`),
  which needs the config's `vpcId` while fleet creates the security group
  (the group must be in the subnet's VPC).
- `machineType` (the instance type, `t3.micro`) and `image` (an AMI id
  `ami-…`, or an SSM parameter path `/aws/service/…`, optionally written
  `resolve:ssm:/…`) are required.
"""

from __future__ import annotations

import re

from providers.aws.config import REGION, AwsConfig
from providers.base import Placement

SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_ZONE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}[a-z]$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
_SSM_PATH = re.compile(r"^/[A-Za-z0-9_.\-/]{1,1010}$")
SSM_PREFIX = "resolve:ssm:"


def region_of(block: AwsConfig, placement: Placement) -> str:
    return placement.region or block.region


def image_id(image: str) -> str:
    """What RunInstances gets as ImageId: an AMI id as given; an SSM
    parameter path as `resolve:ssm:<path>`, which EC2 resolves itself."""
    if AMI.match(image) or image.startswith(SSM_PREFIX):
        return image
    return SSM_PREFIX + image


def placement_problem(block: AwsConfig, placement: Placement) -> str | None:
    p = placement
    region = region_of(block, p)
    if not REGION.match(region):
        return f"placement.region must be an AWS region such as eu-west-1 (got {p.region!r})"
    if region not in block.all_regions:
        return f"placement.region {region!r} is not one of this provider's regions: {', '.join(block.all_regions)}"
    if p.zone:
        if SUBNET.match(p.zone):
            if block.manageSecurityGroup and block.vpcId is None:
                return (f"placement.zone {p.zone!r} is a subnet: set vpcId in the provider's config to that subnet's VPC "
                        "(its security group is created there)")
        elif not _ZONE.match(p.zone):
            return f"placement.zone must be an availability zone such as {region}a or a subnet id (got {p.zone!r})"
        elif not (p.zone.startswith(region) and len(p.zone) == len(region) + 1):
            return f"placement.zone {p.zone!r} is not in region {region!r}"
    for field, value in (("machineType", p.machine_type), ("image", p.image)):
        if not value.strip():
            return f"placement.{field} is required by aws (got {value!r})"
    if not _INSTANCE_TYPE.match(p.machine_type):
        return f"placement.machineType must be an EC2 instance type such as t3.micro (got {p.machine_type!r})"
    image = p.image.removeprefix(SSM_PREFIX)
    if not (AMI.match(image) or _SSM_PATH.match(image)):
        return f"placement.image must be an AMI id (ami-…) or an SSM parameter path (/aws/service/…) (got {p.image!r})"
    return None
