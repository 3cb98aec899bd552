"""gcp placement: the table of what can never be satisfied (with and without
the config's allow-lists), the same answer from `create` before any request,
and no SDK behind the rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.gcp.config import GcpConfig
from providers.gcp.placement import placement_problem
from tests.providers.gcp.conftest import PROJECT

ZONE = "europe-west1-b"
IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
OK = Placement(region="europe-west1", zone=ZONE, machine_type="e2-small", image=IMAGE)
ANY = {}
LISTED = {"zones": ["europe-west1-b", "europe-west1-c"], "machineTypes": ["e2-small", "e2-medium"]}


def place(**kw) -> Placement:
    return Placement(**{**OK.__dict__, **kw})


@pytest.mark.parametrize(
    ("allow", "placement", "want"),
    [
        (ANY, OK, None),
        (ANY, place(region=""), None),  # region is ignored
        (ANY, place(region="us-central1"), None),
        (ANY, place(zone="mars-1", machine_type="n2-standard-128"), None),  # any zone-shaped zone, without a list
        (ANY, place(machine_type=f"zones/{ZONE}/machineTypes/e2-small"), None),
        (ANY, place(machine_type=f"https://compute.googleapis.com/compute/v1/projects/p/zones/{ZONE}/machineTypes/e2-small"), None),
        (ANY, place(zone=""), "placement.zone is required by gcp (got '')"),
        (ANY, place(machine_type=" "), "placement.machineType is required by gcp (got ' ')"),
        (ANY, place(image=""), "placement.image is required by gcp (got '')"),
        (ANY, place(zone="Europe West"), "placement.zone must be a GCE zone such as europe-west1-b (got 'Europe West')"),
        (ANY, place(zone="europe"), "placement.zone must be a GCE zone such as europe-west1-b (got 'europe')"),
        (ANY, place(zone="a-" + "b" * 62), f"placement.zone must be a GCE zone such as europe-west1-b (got {'a-' + 'b' * 62!r})"),
        (ANY, place(machine_type="e2 small"), "placement.machineType must not contain whitespace (got 'e2 small')"),
        (ANY, place(image="my image"), "placement.image must not contain whitespace (got 'my image')"),
        (ANY, place(machine_type="zones/us-central1-a/machineTypes/e2-small"),
         "placement.machineType 'zones/us-central1-a/machineTypes/e2-small' is in zone 'us-central1-a', "
         "not in placement.zone 'europe-west1-b'"),
        # the config's allow-lists
        (LISTED, OK, None),
        (LISTED, place(zone="europe-west1-c", machine_type="e2-medium"), None),
        (LISTED, place(machine_type=f"zones/{ZONE}/machineTypes/e2-medium"), None),
        (LISTED, place(zone="mars-1"),
         "placement.zone 'mars-1' is not one of this provider's zones: europe-west1-b, europe-west1-c"),
        (LISTED, place(machine_type="huge-1"), "placement.machineType 'huge-1' is not in machineTypes: e2-small, e2-medium"),
        (LISTED, place(machine_type=f"zones/{ZONE}/machineTypes/n2-standard-2"),
         f"placement.machineType 'zones/{ZONE}/machineTypes/n2-standard-2' is not in machineTypes: e2-small, e2-medium"),
        ({"zones": [ZONE]}, place(machine_type="anything-goes"), None),
        ({"machineTypes": ["e2-small"]}, place(zone="us-central1-a"), None),
    ],
)
def test_placement_problem(allow, placement, want):
    assert placement_problem(GcpConfig(project=PROJECT, **allow), placement) == want


@pytest.mark.parametrize(
    ("block", "field", "value"),
    [
        ({"zones": ["Europe West"]}, "zones", "'Europe West'"),
        ({"zones": ["europe"]}, "zones", "'europe'"),
        ({"zones": [ZONE, ZONE]}, "zones", ZONE),
        ({"machineTypes": ["zones/x/machineTypes/e2-small"]}, "machineTypes", "zones/x/machineTypes/e2-small"),
        ({"machineTypes": ["E2-SMALL"]}, "machineTypes", "'E2-SMALL'"),
        ({"machineTypes": ["e2-small", "e2-small"]}, "machineTypes", "e2-small"),
        ({"zones": ZONE}, "zones", ZONE),  # a list, not a string
    ],
)
def test_allow_lists_are_validated(block, field, value):
    with pytest.raises(ValidationError) as err:
        GcpConfig(project=PROJECT, **block)
    assert field in str(err.value) and value in str(err.value)


def test_allow_lists_default_to_any():
    c = GcpConfig(project=PROJECT)
    assert (c.zones, c.machineTypes) == ((), ())


@pytest.mark.parametrize("placement", [place(zone="mars-1"), place(machine_type="huge-1"), place(image="")])
def test_create_refuses_with_the_same_words_before_any_request(fake, placement):
    from providers.gcp.provider import new

    cfg = GcpConfig(project=PROJECT, apiEndpoint=fake.url, **LISTED)
    p = new("gcp-eu", cfg)
    uid = "0b8c6c3e-1f0a-4f7e-9a43-8d1f3c0e2a11"
    with pytest.raises(base.Permanent) as err:
        p.create(CreateRequest(name=base.name_from_uid(uid), uid=uid, placement=placement), Deadline.after(5))
    assert err.value.cause == placement_problem(cfg, placement)
    assert fake.requests == []

