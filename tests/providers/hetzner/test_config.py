"""The hetzner block and the placement table (pure, no SDK)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from providers.base import Placement
from providers.hetzner.config import HetznerConfig
from providers.hetzner.placement import placement_problem

OK = {"allowedSources": ["203.0.113.0/24"]}


def test_a_minimal_block_loads_and_mounts_only_the_token_file():
    cfg = HetznerConfig(**OK)
    assert cfg.runtime().files == ("/var/run/secrets/fleet/hetzner/token",) and not cfg.runtime().env


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"allowedSources": []}, "allowedSources is required"),
        ({"allowedSources": ["0.0.0.0/0"]}, "must not be /0"),
        ({"manageFirewall": False, "allowedSources": []}, "firewallIds must name"),
        ({"tokenFile": "token"}, "absolute path"),
        ({"apiEndpoint": "api.hetzner.cloud"}, "http"),
        ({"location": "Falkenstein 1"}, "not a Hetzner name"),
        ({"image": "Ubuntu 24"}, "not an image name"),
        ({"locations": ["fsn1", "fsn1"]}, "duplicate"),
        ({"token": ""}, "at least 1 character"),
        ({"apiToken": "x"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_blocks_fail_naming_the_problem(extra, words):
    with pytest.raises(ValidationError, match=words):
        HetznerConfig(**{**OK, **extra})


P = Placement(zone="fsn1", machine_type="cx22", image="ubuntu-24.04")


@pytest.mark.parametrize(
    ("placement", "extra", "want"),
    [
        ({}, {}, None),
        ({"image": "114690387"}, {}, None),
        ({"zone": "", "machine_type": "", "image": ""}, {"location": "hel1", "serverType": "cpx11", "image": "debian-12"}, None),
        ({"zone": ""}, {}, "placement.zone is required by hetzner unless the provider's config sets location"),
        ({"machine_type": ""}, {}, "sets serverType"),
        ({"image": ""}, {}, "sets image"),
        ({"zone": "nbg1"}, {"locations": ["fsn1"]}, "not one of this provider's locations: fsn1"),
        ({"zone": "Nbg 1"}, {}, "Hetzner location"),
        ({"machine_type": "CX22"}, {}, "server type"),
        ({"image": "ubuntu 24"}, {}, "image name"),
    ],
)
def test_placement_problem(placement, extra, want):
    got = placement_problem(HetznerConfig(**{**OK, **extra}), Placement(**{**P.__dict__, **placement}))
    assert (got is None) if want is None else (want in (got or "")), got
