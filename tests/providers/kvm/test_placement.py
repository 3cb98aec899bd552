"""kvm placement: the table of what can never be satisfied, the same answer
from `create` (before any dial), and no SDK behind the rule."""

from __future__ import annotations

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.kvm.placement import Choice, choose, placement_problem
from tests.providers.kvm.conftest import fake_host, make_config

SMALL = {"vcpus": 1, "memoryMiB": 512}
IMAGE = {"url": "http://images.example/debian.qcow2"}

ONE_OF_EACH = {"hosts": ["hv1"], "machineTypes": {"small": SMALL}, "images": {"debian": IMAGE}}
SEVERAL = {
    "hosts": ["hv1", "hv2"],
    "machineTypes": {"small": SMALL, "medium": {"vcpus": 2, "memoryMiB": 2048}},
    "images": {"debian": IMAGE, "ubuntu": {"url": "http://images.example/ubuntu.img"}},
}
EMPTY_CATALOGUES = {"hosts": ["hv1"], "machineTypes": {}, "images": {}}


def config(spec: dict):
    return make_config([fake_host(h) for h in spec["hosts"]], machineTypes=spec["machineTypes"], images=spec["images"])


@pytest.mark.parametrize(
    ("spec", "placement", "want"),
    [
        # the only entry of each may be left out; region is ignored
        (ONE_OF_EACH, Placement(), Choice("hv1", "small", "debian")),
        (ONE_OF_EACH, Placement(region="anything", zone="hv1", machine_type="small", image="debian"),
         Choice("hv1", "small", "debian")),
        (SEVERAL, Placement(zone="hv2", machine_type="medium", image="ubuntu"), Choice("hv2", "medium", "ubuntu")),
        # a value that names nothing
        (ONE_OF_EACH, Placement(zone="mars-1"), "placement.zone 'mars-1' is not in kvm.hosts (have: hv1)"),
        (SEVERAL, Placement(zone="hv1", machine_type="huge", image="debian"),
         "placement.machineType 'huge' is not in kvm.machineTypes (have: small, medium)"),
        (SEVERAL, Placement(zone="hv1", machine_type="small", image="windows"),
         "placement.image 'windows' is not in kvm.images (have: debian, ubuntu)"),
        (ONE_OF_EACH, Placement(zone="HV1"), "placement.zone 'HV1' is not in kvm.hosts (have: hv1)"),  # exact names
        # left empty where there is a choice to make
        (SEVERAL, Placement(machine_type="small", image="debian"),
         "placement.zone is required: kvm.hosts has more than one entry (have: hv1, hv2)"),
        (SEVERAL, Placement(zone="hv1", image="debian"),
         "placement.machineType is required: kvm.machineTypes has more than one entry (have: small, medium)"),
        (SEVERAL, Placement(zone="hv1", machine_type="small"),
         "placement.image is required: kvm.images has more than one entry (have: debian, ubuntu)"),
        # nothing to choose from
        (EMPTY_CATALOGUES, Placement(), "placement.machineType is empty and kvm.machineTypes has no entries to choose from"),
        (EMPTY_CATALOGUES, Placement(machine_type="small"), "placement.machineType 'small' is not in kvm.machineTypes (have: none)"),
        # the first failing field is named
        (SEVERAL, Placement(zone="nope", machine_type="huge", image="windows"),
         "placement.zone 'nope' is not in kvm.hosts (have: hv1, hv2)"),
    ],
)
def test_choose(spec, placement, want):
    cfg = config(spec)
    assert choose(cfg, placement) == want
    assert placement_problem(cfg, placement) == (want if isinstance(want, str) else None)


@pytest.mark.parametrize(
    "placement",
    [Placement(zone="nope"), Placement(zone="hv1", machine_type="huge"), Placement(zone="hv1", machine_type="small"),
     Placement(zone="hv1", machine_type="medium", image="windows")],
)
def test_create_refuses_with_the_same_words_before_dialing(fake_provider_factory, placement):
    p, dialer = fake_provider_factory(["hv1", "hv2"], machineTypes=SEVERAL["machineTypes"], images=SEVERAL["images"])
    with pytest.raises(base.Permanent) as err:
        p.create(CreateRequest(name="proxy-x", uid="u", placement=placement), Deadline.after(5))
    assert err.value.cause == placement_problem(p.cfg, placement)
    assert err.value.op == "create" and err.value.id == f"hosts/{placement.zone}/domains/proxy-x"
    assert dialer.dials == {}

