"""What the aws provider sends (pure): tags, the security group's inbound
rules and how to bring an existing group to them, the RunInstances
parameters, the idempotency token.

Everything a create writes is in the call that creates it: the instance's
marks in RunInstances' TagSpecifications, the group's in
CreateSecurityGroup's, so neither ever exists without them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from providers import marks
from providers.aws.config import AwsConfig
from providers.aws.placement import SUBNET, image_id
from providers.base import CreateRequest
from providers.marks import ValueRule

NAME_TAG = "Name"
# Not contract marks: what a person looking at the console wants to see.
TAG_PROXY = "proxy-operator-proxy"
# A group has no creation time of its own: GC needs one (None is "very old").
TAG_CREATED = "proxy-operator-created-at"
MAX_TAG_VALUE = 256
TAG_VALUE = ValueRule("EC2 tag value", re.compile(r"^[A-Za-z0-9_.:/=+@-]{1,256}$"),
                      "letters, digits and _.:/=+@-, at most 256")


def request_problem(req: CreateRequest) -> str | None:
    """Why the UID or installation can't be a tag value, or None."""
    return marks.problem(req, TAG_VALUE)


def tags(req: CreateRequest) -> dict[str, str]:
    """The name, the contract's marks, and the Proxy's name when known."""
    tags = {NAME_TAG: req.name, **marks.of(req)}
    if req.proxy_name:
        tags[TAG_PROXY] = req.proxy_name[:MAX_TAG_VALUE]
    return tags


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tags_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """`Tags: [{Key, Value}]` of an answer as a dict; malformed entries are skipped."""
    out: dict[str, str] = {}
    for t in obj.get("Tags") or ():
        if isinstance(t, Mapping) and isinstance(t.get("Key"), str) and isinstance(t.get("Value"), str):
            out[t["Key"]] = t["Value"]
    return out


# -- the security group -------------------------------------------------------------

Rule = tuple[str, int, int, str]  # protocol, from port, to port, CIDR


def wanted_rules(port: int, sources: Iterable[str]) -> set[Rule]:
    return {("tcp", port, port, cidr) for cidr in sources}


def rules_of(group: Mapping[str, Any]) -> set[Rule]:
    """The inbound CIDR rules of a DescribeSecurityGroups entry."""
    out: set[Rule] = set()
    for perm in group.get("IpPermissions") or ():
        proto, lo, hi = perm.get("IpProtocol"), perm.get("FromPort"), perm.get("ToPort")
        for r in perm.get("IpRanges") or ():
            out.add((str(proto), int(lo), int(hi), str(r["CidrIp"])))
        for r in perm.get("Ipv6Ranges") or ():
            out.add((str(proto), int(lo), int(hi), str(r["CidrIpv6"])))
    return out


def rules_diff(current: set[Rule], wanted: set[Rule]) -> tuple[set[Rule], set[Rule]]:
    """(to authorize, to revoke): a reused group (a replacement under the
    same name, e.g. after a port change) ends up with exactly `wanted`."""
    return wanted - current, current - wanted


def permissions(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """IpPermissions for Authorize/RevokeSecurityGroupIngress, one per port range."""
    by_range: dict[tuple[str, int, int], list[str]] = {}
    for proto, lo, hi, cidr in sorted(rules):
        by_range.setdefault((proto, lo, hi), []).append(cidr)
    out = []
    for (proto, lo, hi), cidrs in by_range.items():
        perm: dict[str, Any] = {"IpProtocol": proto, "FromPort": lo, "ToPort": hi}
        v4 = [{"CidrIp": c, "Description": "fleet proxy clients"} for c in cidrs if ":" not in c]
        v6 = [{"CidrIpv6": c, "Description": "fleet proxy clients"} for c in cidrs if ":" in c]
        if v4:
            perm["IpRanges"] = v4
        if v6:
            perm["Ipv6Ranges"] = v6
        out.append(perm)
    return out


def group_params(req: CreateRequest, cfg: AwsConfig, created_at: str) -> dict[str, Any]:
    params: dict[str, Any] = {
        "GroupName": req.name,
        "Description": f"fleet egress proxy {req.namespace}/{req.proxy_name}".rstrip("/ ")[:255],
        "TagSpecifications": [
            {"ResourceType": "security-group", "Tags": tag_list({**tags(req), TAG_CREATED: created_at})}
        ],
    }
    if cfg.vpcId:
        params["VpcId"] = cfg.vpcId
    return params


# -- the instance ------------------------------------------------------------------------


def client_token(name: str, group: str, salt: str = "") -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters): the same
    name and group give the same instance, even for two creates racing in two
    processes. `salt` (the id of a terminated instance the token already
    gave) makes a fresh one for its replacement."""
    digest = hashlib.sha256(f"{name}\0{group}\0{salt}".encode()).hexdigest()[:40]
    return f"fleet-{digest}"


def run_params(req: CreateRequest, cfg: AwsConfig, group: str, token: str) -> dict[str, Any]:
    p = req.placement
    params: dict[str, Any] = {
        "ImageId": image_id(p.image),
        "InstanceType": p.machine_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": token,
        "SecurityGroupIds": [*([group] if group else []), *cfg.securityGroupIds],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list(tags(req))},
                              {"ResourceType": "volume", "Tags": tag_list(tags(req))}],
        # IMDSv2 only: the cloud-init may hold secrets; a proxied request must
        # not be able to read them through a v1 GET.
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if req.cloud_init:
        params["UserData"] = req.cloud_init  # botocore base64-encodes it
    if p.zone and SUBNET.match(p.zone):
        params["SubnetId"] = p.zone
    elif p.zone:
        params["Placement"] = {"AvailabilityZone": p.zone}
    return params
