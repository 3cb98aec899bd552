"""kubernetes placement: a pod ignores all of it, so no placement is ever
unsatisfiable; the rule imports no SDK."""

from __future__ import annotations

import pytest

from providers.base import Placement
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.placement import placement_problem


@pytest.mark.parametrize(
    "placement",
    [
        Placement(),
        Placement(region="europe-west1", zone="europe-west1-b", machine_type="e2-small", image="projects/x/images/y"),
        Placement(zone="mars-1", machine_type="huge", image="not an image"),
    ],
)
@pytest.mark.parametrize("block", [{}, {"image": "squid:6", "namespace": "proxies"}])
def test_every_placement_is_satisfiable(block, placement):
    assert placement_problem(KubernetesConfig(**block), placement) is None

