"""The aws provider through real fleet processes: a real controller and a
real `fleet worker -p ec2` (boto3 inside it) against the moto server
process, from standalone manifests.

A Proxy goes Pending → Running with the instance's public IP, is replaced
on a port change (a new instance; its group reused with only the new
rule), and is deleted (instance terminated, group gone). An orphan made
behind fleet's back (as a crash between create and status would leave
it) is collected by a GC sweep (`fleet gc`), group and all; one of another
installation is not."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import boto3
import pytest

from fleet.testing.motoserver import AWS_ENV
from fleet.testing.procs import wait_for
from providers import base
from providers.aws.config import AwsConfig
from providers.aws.provider import AwsProvider
from providers.base import CreateRequest, Deadline, Placement
from tests.integration.conftest import make_stack, redis_server  # noqa: F401
from tests.providers.aws.conftest import REGION, SOURCES

pytestmark = pytest.mark.integration

OURS = "aws-it"
AMI = "ami-0123456789abcdef0"
MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: ec2
  port: {port}
  placement: {{region: {region}, zone: {region}a, machineType: t3.micro, image: {ami}}}
  cloudInit: {{inline: "#cloud-config\\npackages: [squid]\\n"}}
"""


def declare(stack, name: str, port: int) -> None:
    tmp = stack.manifests / f".{name}.tmp"
    tmp.write_text(MANIFEST.format(name=name, port=port, region=REGION, ami=AMI))
    os.replace(tmp, stack.manifests / f"{name}.yaml")


def status(stack, name: str) -> dict:
    out = stack.fleet("get", "px", name, "-n", "crawl", "-o", "json")
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return (items[0].get("status") or {}) if items else {}


def block(moto) -> dict:
    return {"region": REGION, "endpointUrl": moto.url, "allowedSources": list(SOURCES)}


@pytest.fixture
def lab(moto, redis_server, make_stack, tmp_path: Path):  # noqa: F811
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    stack = make_stack(redis_server.url, [{"name": "ec2", "type": "aws", "aws": block(moto)}],
                       FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CHECK_INTERVAL="0",
                       FLEET_INSTALLATION=OURS, FLEET_GC_MIN_AGE="1s", FLEET_PROVIDER_CALL_TIMEOUT="20s", **AWS_ENV)
    stack.manifests = manifests
    stack.worker("ec2")
    stack.controller()
    stack.wait_ready("worker:ec2", "controller")
    yield stack
    stack.stop()


def ec2(moto):
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto.url)


def instances(moto) -> dict[str, dict]:
    return {i["InstanceId"]: i for r in ec2(moto).describe_instances()["Reservations"] for i in r["Instances"]}


def groups(moto) -> dict[str, dict]:
    return {g["GroupId"]: g for g in ec2(moto).describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"}


def running(stack, name: str, port: int):
    def ready():
        st = status(stack, name)
        return st if st.get("phase") == "Running" and st.get("port") == port else None

    return wait_for(ready, 60, f"crawl/{name} Running on {port}:\n{stack.log('worker:ec2')[-3000:]}")


def test_a_proxy_runs_is_replaced_deleted_and_an_orphan_is_collected(lab, moto):
    declare(lab, "a", 3128)
    st = running(lab, "a", 3128)
    first = st["providerID"].split("/")[3]
    assert st["ip"] == instances(moto)[first]["PublicIpAddress"]
    (sg,) = groups(moto)

    declare(lab, "a", 8080)  # a port change: delete, wait for NotFound, create under the same name
    st = running(lab, "a", 8080)
    second = st["providerID"].split("/")[3]
    assert second != first and instances(moto)[first]["State"]["Name"] == "terminated"
    assert instances(moto)[second]["State"]["Name"] == "running"
    rules = {(p["FromPort"], r["CidrIp"]) for g in groups(moto).values() for p in g["IpPermissions"] for r in p["IpRanges"]}
    assert rules == {(8080, c) for c in SOURCES}

    # an orphan of ours and one of another installation, made with the provider's own code
    p = AwsProvider("ec2", AwsConfig(**block(moto)))
    placement = Placement(region=REGION, zone=f"{REGION}a", machine_type="t3.micro", image=AMI)

    def make(uid: str, installation: str) -> str:
        return p.create(CreateRequest(name=base.name_from_uid(uid), uid=uid, placement=placement, installation=installation),
                        Deadline.after(20))

    orphan, theirs = make("uid-orphan", OURS), make("uid-theirs", "another-fleet")
    time.sleep(1.5)  # past FLEET_GC_MIN_AGE
    sent = lab.fleet("gc")
    assert sent.returncode == 0, sent.stderr
    orphan_iid, orphan_sg = orphan.split("/")[3], orphan.rsplit("/", 1)[1]
    wait_for(lambda: instances(moto)[orphan_iid]["State"]["Name"] == "terminated", 60,
             f"the orphan terminated:\n{lab.log('controller')[-3000:]}")
    wait_for(lambda: orphan_sg not in groups(moto), 30, "the orphan's security group deleted")
    assert instances(moto)[theirs.split("/")[3]]["State"]["Name"] == "running"
    assert instances(moto)[second]["State"]["Name"] == "running"

    (lab.manifests / "a.yaml").unlink()
    wait_for(lambda: lab.fleet("get", "px", "a", "-n", "crawl").returncode != 0, 60, "crawl/a released")
    assert instances(moto)[second]["State"]["Name"] == "terminated"
    assert sg not in groups(moto)
    for role in ("controller", "worker:ec2"):
        assert "Traceback" not in lab.log(role)
