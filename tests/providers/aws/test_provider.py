"""create/get/delete/list_by_tag through boto3 against moto's EC2, reading
back what landed there with a plain boto3 client."""

from __future__ import annotations

import base64
import dataclasses
import uuid

import boto3
import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement, State
from tests.providers.aws.conftest import NAME, REGION, SOURCES
from tests.providers.conformance import ProviderConformance

AMI = "ami-0123456789abcdef0"
PLACEMENT = Placement(region=REGION, zone=f"{REGION}a", machine_type="t3.micro", image=AMI)


def request(uid: str = "0b8c6c3e-1f0a-4f7e-9a43-8d1f3c0e2a11", port: int = 3128, **placement) -> CreateRequest:
    p = Placement(**{**PLACEMENT.__dict__, **placement})
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="crawl", proxy_name="p1", placement=p,
                         cloud_init="#cloud-config\npackages: [squid]\n", port=port)


def dl() -> Deadline:
    return Deadline.after(10)


def ec2(moto):
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto.url)


class TestAwsConformance(ProviderConformance):
    provider_name = NAME
    malformed_ids = (
        "",
        "not-an-id",
        "regions/eu-west-1/instances/x",
        "regions/eu-west-1/instances/i-0123456789abcdef0/security-groups/",
        "regions/mars-1/instances/i-0123456789abcdef0",
        "regions/us-east-1/instances/i-0123456789abcdef0",  # a region this provider does not have
        "instances/i-0123456789abcdef0",
    )

    def make_request(self, uid: str) -> CreateRequest:
        return request(uid)


def describe(moto, pid: str) -> dict:
    iid = pid.split("/")[3]
    (res,) = ec2(moto).describe_instances(InstanceIds=[iid])["Reservations"]
    return res["Instances"][0]


def tags(obj: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in obj.get("Tags", [])}


def test_create_runs_one_instance_with_its_marks_group_and_user_data(moto, provider):
    req = dataclasses.replace(request(), installation="blue")
    pid = provider.create(req, dl())
    assert provider.calls == 3  # CreateSecurityGroup, AuthorizeSecurityGroupIngress, RunInstances

    _, region, _, iid, _, sg = pid.split("/")
    assert region == REGION and iid.startswith("i-") and sg.startswith("sg-")
    inst = describe(moto, pid)
    assert tags(inst) == {"Name": req.name, "proxy-operator-managed": "true", "proxy-operator-uid": req.uid,
                          "proxy-operator-installation": "blue", "proxy-operator-namespace": "crawl",
                          "proxy-operator-proxy": "p1"}
    assert inst["InstanceType"] == "t3.micro" and inst["ImageId"] == AMI
    assert inst["Placement"]["AvailabilityZone"] == f"{REGION}a"
    assert [g["GroupId"] for g in inst["SecurityGroups"]] == [sg]
    user_data = ec2(moto).describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
    assert base64.b64decode(user_data).decode() == req.cloud_init
    (group,) = ec2(moto).describe_security_groups(GroupIds=[sg])["SecurityGroups"]
    assert group["GroupName"] == req.name
    assert tags(group)["proxy-operator-uid"] == req.uid and tags(group)["proxy-operator-installation"] == "blue"
    assert "proxy-operator-created-at" in tags(group)
    rules = {(p["IpProtocol"], p["FromPort"], p["ToPort"], r["CidrIp"]) for p in group["IpPermissions"] for r in p["IpRanges"]}
    assert rules == {("tcp", 3128, 3128, c) for c in SOURCES}


def test_a_repeat_create_finds_the_instance_and_makes_nothing_new(moto, provider):
    pid = provider.create(request(), dl())
    before = provider.calls
    assert provider.create(request(), dl()) == pid
    # CreateSecurityGroup (InvalidGroup.Duplicate), DescribeSecurityGroups (rules unchanged), DescribeInstances
    assert provider.calls - before == 3
    reservations = ec2(moto).describe_instances()["Reservations"]
    assert sum(len(r["Instances"]) for r in reservations) == 1


def test_a_replacement_on_another_port_reuses_the_group_with_only_the_new_rule(moto, provider):
    pid = provider.create(request(port=3128), dl())
    sg = pid.rsplit("/", 1)[1]
    ec2(moto).terminate_instances(InstanceIds=[pid.split("/")[3]])  # as if deleted while its group stayed
    new_pid = provider.create(request(port=8080), dl())
    assert new_pid != pid and new_pid.endswith(sg)
    (group,) = ec2(moto).describe_security_groups(GroupIds=[sg])["SecurityGroups"]
    ports = {(p["FromPort"], r["CidrIp"]) for p in group["IpPermissions"] for r in p["IpRanges"]}
    assert ports == {(8080, c) for c in SOURCES}


def test_get_reads_the_public_ip_or_the_private_one(moto, make_provider):
    public, private = make_provider(), make_provider(internalIP=True)
    pid = public.create(request(), dl())
    inst = describe(moto, pid)
    a, b = public.get(pid, dl()), private.get(pid, dl())
    assert a.state is State.RUNNING and a.ip == inst["PublicIpAddress"]
    assert b.ip == inst["PrivateIpAddress"] and a.uid == b.uid == request().uid
    assert a.created_at is not None and a.created_at.tzinfo is not None


def test_delete_terminates_and_removes_the_group_then_get_is_not_found(moto, provider):
    pid = provider.create(request(), dl())
    sg = pid.rsplit("/", 1)[1]
    provider.delete(pid, dl())
    assert describe(moto, pid)["State"]["Name"] == "terminated"
    assert ec2(moto).describe_security_groups(Filters=[{"Name": "group-id", "Values": [sg]}])["SecurityGroups"] == []
    with pytest.raises(base.NotFound):
        provider.get(pid, dl())


def test_a_terminated_instance_whose_group_remains_reads_terminated_until_delete_takes_the_group(moto, provider):
    pid = provider.create(request(), dl())
    ec2(moto).terminate_instances(InstanceIds=[pid.split("/")[3]])  # terminated behind fleet's back
    assert provider.get(pid, dl()).state is State.TERMINATED  # not NotFound: its group is still there
    provider.delete(pid, dl())
    with pytest.raises(base.NotFound):
        provider.get(pid, dl())


def test_list_by_tag_reads_every_page_and_lists_a_leftover_group_for_gc(moto, provider, monkeypatch):
    from providers.aws import provider as mod

    monkeypatch.setattr(mod, "PAGE_SIZE", 5)  # moto pages DescribeInstances by MaxResults
    pids = [provider.create(request(str(uuid.uuid4())), dl()) for _ in range(7)]
    ec2(moto).run_instances(ImageId=AMI, MinCount=1, MaxCount=1)  # not ours: no marks
    gone = pids.pop()
    ec2(moto).terminate_instances(InstanceIds=[gone.split("/")[3]])  # its group stays behind
    before = provider.calls
    listed = {i.id: i for i in provider.list_by_tag(dl())}
    assert provider.calls - before == 3  # two pages of instances, one of groups
    leftover = f"regions/{REGION}/security-groups/{gone.rsplit('/', 1)[1]}"
    assert set(listed) == set(pids) | {leftover}
    assert listed[leftover].state is State.TERMINATED and listed[leftover].uid and listed[leftover].created_at
    provider.delete(leftover, dl())  # what GC does with it
    assert leftover not in {i.id for i in provider.list_by_tag(dl())}
    with pytest.raises(base.NotFound):
        provider.get(leftover, dl())


def test_an_ssm_parameter_image_is_resolved_by_ec2(moto, provider):
    path = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
    pid = provider.create(request(image=path), dl())
    assert describe(moto, pid)["ImageId"] == "resolve:ssm:" + path  # moto keeps what EC2 would resolve


def test_a_subnet_placement_runs_in_the_subnet(moto, make_provider):
    c = ec2(moto)
    vpc = c.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = c.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone=f"{REGION}b")["Subnet"]["SubnetId"]
    p = make_provider(vpcId=vpc)
    pid = p.create(request(zone=subnet), dl())
    inst = describe(moto, pid)
    assert inst["SubnetId"] == subnet
    (group,) = c.describe_security_groups(GroupIds=[pid.rsplit("/", 1)[1]])["SecurityGroups"]
    assert group["VpcId"] == vpc


def test_unmanaged_security_groups_only(moto, make_provider):
    sg = ec2(moto).create_security_group(GroupName="mine", Description="my own firewall")["GroupId"]
    p = make_provider(manageSecurityGroup=False, allowedSources=(), securityGroupIds=(sg,))
    pid = p.create(request(), dl())
    assert "/security-groups/" not in pid
    assert [g["GroupId"] for g in describe(moto, pid)["SecurityGroups"]] == [sg]
    assert p.create(request(), dl()) == pid
    p.delete(pid, dl())
    assert ec2(moto).describe_security_groups(GroupIds=[sg])["SecurityGroups"]  # never ours to delete
    with pytest.raises(base.NotFound):
        p.get(pid, dl())


@pytest.mark.parametrize(
    ("placement", "words"),
    [
        ({"machine_type": ""}, "machineType is required"),
        ({"image": ""}, "image is required"),
        ({"image": "ubuntu"}, "AMI id"),
        ({"zone": "us-east-1a"}, "not in region"),
        ({"region": "us-east-1"}, "not one of this provider's regions"),
        ({"zone": "subnet-0123456789abcdef0"}, "set vpcId"),
        ({"machine_type": "huge"}, "instance type"),
    ],
)
def test_impossible_placements_are_permanent_before_any_call(provider, placement, words):
    with pytest.raises(base.Permanent, match=words):
        provider.create(request(**placement), dl())
    assert provider.calls == 0


def test_an_expired_deadline_returns_at_once_without_a_call(provider):
    with pytest.raises(base.Transient):
        provider.create(request(), Deadline.after(-1))
    with pytest.raises(base.Transient):
        provider.list_by_tag(Deadline.after(-1))
    assert provider.calls == 0
