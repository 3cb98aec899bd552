"""The sweeper's tick leaves every tunnel's renewal time to reach Redis before its lease runs out (the tunnel
itself held past its TTL, through the real gateway: tests/integration/test_gateway.py)."""

import pytest

from fleet.gateway.server import SWEEP_EVERY, sweep_every
from fleet.settings import OPTIONS


@pytest.mark.parametrize(("ttl", "every"), [(2.0, 0.5), (3.0, 0.75), (4.0, 1.0), (60.0, SWEEP_EVERY),
                                            (3600.0, SWEEP_EVERY)])
def test_the_sweep_ticks_at_a_quarter_ttl_or_every_second(ttl, every):
    assert sweep_every(ttl) == every


def test_at_every_allowed_ttl_a_renewal_is_seen_by_three_quarters_of_it():
    (option,) = [o for o in OPTIONS if o.flag == "gateway-lease-ttl"]
    for ttl in (option.low, option.low * 1.5, option.default, option.high):
        assert ttl / 2 + sweep_every(ttl) <= ttl * 3 / 4, ttl  # due at half, seen at the next tick at the latest
