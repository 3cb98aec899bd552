"""The aws block: what loads, what fails (naming the field and value), and
the placement table (pure, no SDK)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from providers.aws.config import AwsConfig
from providers.aws.placement import image_id, placement_problem
from providers.base import Placement

OK = {"region": "eu-west-1", "allowedSources": ["203.0.113.0/24"]}


def test_a_minimal_block_loads():
    cfg = AwsConfig(**OK)
    assert cfg.all_regions == ("eu-west-1",) and cfg.manageSecurityGroup and not cfg.internalIP


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"region": "Ireland"}, "not an AWS region"),
        ({"regions": ["eu-west-1x"]}, "not an AWS region"),
        ({"regions": ["us-east-1", "us-east-1"]}, "duplicate"),
        ({"allowedSources": []}, "allowedSources is required"),
        ({"allowedSources": ["0.0.0.0/0"]}, "must not be /0"),
        ({"allowedSources": ["10.0.0.1/8"]}, "CIDR"),
        ({"vpcId": "default"}, "not a VPC id"),
        ({"securityGroupIds": ["my-group"]}, "not a security group id"),
        ({"manageSecurityGroup": False, "allowedSources": []}, "securityGroupIds must name"),
        ({"endpointUrl": "ec2.example.com"}, "http(s)"),
        ({"endpointUrl": "https://x/"}, "trailing slash"),
        ({"accessKeyId": "AKIA"}, "Extra inputs are not permitted"),  # credentials never in this file
    ],
)
def test_bad_blocks_fail_naming_the_problem(extra, words):
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        AwsConfig(**{**OK, **extra})


def test_runtime_mounts_the_shared_files_only():
    rt = AwsConfig(**OK).runtime()
    assert rt.files == ("/var/run/secrets/fleet/aws/credentials", "/var/run/secrets/fleet/aws/config")
    assert dict(rt.env) == {"AWS_SHARED_CREDENTIALS_FILE": rt.files[0], "AWS_CONFIG_FILE": rt.files[1]}
    assert not rt.in_cluster


P = Placement(region="", zone="eu-west-1a", machine_type="t3.micro", image="ami-0123456789abcdef0")


@pytest.mark.parametrize(
    ("placement", "extra", "want"),
    [
        ({}, {}, None),
        ({"zone": ""}, {}, None),
        ({"zone": "subnet-0123456789abcdef0"}, {"vpcId": "vpc-0123abcd"}, None),
        ({"region": "us-east-1", "zone": "us-east-1b"}, {"regions": ["us-east-1"]}, None),
        ({"image": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"}, {}, None),
        ({"zone": "subnet-0123456789abcdef0"}, {}, "set vpcId"),
        ({"zone": "subnet-0123456789abcdef0"}, {"manageSecurityGroup": False, "securityGroupIds": ["sg-0123abcd"],
                                               "allowedSources": []}, None),
        ({"region": "us-east-1"}, {}, "not one of this provider's regions: eu-west-1"),
        ({"region": "mars"}, {}, "must be an AWS region"),
        ({"zone": "eu-central-1a"}, {}, "not in region 'eu-west-1'"),
        ({"zone": "rack 7"}, {}, "availability zone"),
        ({"machine_type": ""}, {}, "machineType is required"),
        ({"machine_type": "big"}, {}, "instance type"),
        ({"image": ""}, {}, "image is required"),
        ({"image": "ubuntu-24.04"}, {}, "AMI id"),
    ],
)
def test_placement_problem(placement, extra, want):
    got = placement_problem(AwsConfig(**{**OK, **extra}), Placement(**{**P.__dict__, **placement}))
    assert (got is None) if want is None else (want in (got or "")), got


def test_image_id():
    assert image_id("ami-0123456789abcdef0") == "ami-0123456789abcdef0"
    assert image_id("/aws/service/x") == "resolve:ssm:/aws/service/x"
    assert image_id("resolve:ssm:/aws/service/x") == "resolve:ssm:/aws/service/x"
