"""Distinct egress addresses on one host: `egressRange` gives each instance its own outgoing address
(squid's `tcp_outgoing_address`), so an origin sees a different client address per proxy. The
allocation (lowest free address of the range, under the ports lock) is checked on real squids and an
origin that answers with the client address it sees; the validation through the config block."""

from __future__ import annotations

import threading

import pytest

from providers import base
from providers.base import Deadline
from providers.local.config import LocalConfig, egress_addresses, parse_egress_range
from providers.local.squid import config_text
from tests.providers.local.conftest import request
from tests.providers.local.test_provider import fetch, record, running


def d(seconds: float = 15.0) -> Deadline:
    return Deadline.after(seconds)


# -- the block ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("block", "error"), [
    ({"egressRange": "10.0.0.0/24"}, "not a loopback range"),  # an interface address: only when asked
    ({"egressRange": "192.168.1.0/24"}, "not a loopback range"),
    ({"egressRange": "127.0.1.1/24"}, "host bits set"),
    ({"egressRange": "127.0.1.0"}, None),  # a /32: one address
    ({"egressRange": "not-a-cidr"}, "must be a CIDR"),
    ({"egressRange": "127.0.0.0/7"}, "host bits set"),
    ({"egressRange": "10.0.0.0/4", "egressAnyRange": True}, "host bits set"),
    ({"egressRange": "16.0.0.0/4", "egressAnyRange": True}, "too wide"),
    ({"egressRange": "224.0.0.0/24", "egressAnyRange": True}, "unicast"),
    ({"egressRange": "10.0.0.0/24", "egressAnyRange": True}, None),
    ({"egressRange": "127.0.1.0/24"}, None),
    ({"egressRange": "::1/128"}, None),
])
def test_only_loopback_ranges_unless_the_user_says_otherwise(block, error):
    if error is None:
        assert LocalConfig.model_validate(block).egressRange == str(parse_egress_range(block["egressRange"]))
    else:
        with pytest.raises(ValueError, match=error):
            LocalConfig.model_validate(block)


def test_the_range_yields_its_usable_addresses_in_order():
    assert list(egress_addresses(parse_egress_range("127.0.1.0/30"))) == ["127.0.1.1", "127.0.1.2"]
    assert list(egress_addresses(parse_egress_range("127.0.1.7/32"))) == ["127.0.1.7"]
    assert LocalConfig().egress_network is None


def test_the_config_connects_out_from_the_egress_address_only_when_given():
    args = ("127.0.0.1", 31300, "/var/lib/fleet/local/x/p", ["127.0.0.0/8"])
    assert "tcp_outgoing_address 127.0.1.1" in config_text(*args, "127.0.1.1").splitlines()
    assert not any(line.startswith("tcp_outgoing_address") for line in config_text(*args).splitlines())


# -- real squids ----------------------------------------------------------------------------------



@pytest.mark.integration
def test_each_instance_has_its_own_source_address_at_the_origin(make_provider, state_dir, ports, echo_origin):
    provider = make_provider(egressRange="127.0.1.0/24")
    reqs = [request(next(ports)) for _ in range(3)]
    pids = [provider.create(r, d()) for r in reqs]
    for pid in pids:
        running(provider, pid)
    seen = [fetch(r.port, echo_origin) for r in reqs]
    assert seen == [(200, b"127.0.1.1"), (200, b"127.0.1.2"), (200, b"127.0.1.3")]  # lowest free, in order
    assert [record(state_dir, r.name)["egressAddress"] for r in reqs] == ["127.0.1.1", "127.0.1.2", "127.0.1.3"]

    # Freed on delete: the next instance gets the lowest free address, the others keep theirs.
    provider.delete(pids[1], d())
    again = request(next(ports))
    running(provider, provider.create(again, d()))
    assert fetch(again.port, echo_origin) == (200, b"127.0.1.2")
    assert fetch(reqs[2].port, echo_origin) == (200, b"127.0.1.3")
    # Persisted: another provider object on the same state dir (a restarted worker) allocates around them.
    other = make_provider(egressRange="127.0.1.0/24")
    fourth = request(next(ports))
    running(other, other.create(fourth, d()))
    assert fetch(fourth.port, echo_origin) == (200, b"127.0.1.4")


@pytest.mark.integration
def test_without_a_range_the_origin_sees_the_hosts_default_address(provider, ports, echo_origin):
    req = request(next(ports))
    running(provider, provider.create(req, d()))
    assert fetch(req.port, echo_origin) == (200, b"127.0.0.1")


@pytest.mark.integration
def test_concurrent_creates_never_share_an_address(make_provider, state_dir, ports):
    provider = make_provider(egressRange="127.0.1.0/24")
    reqs = [request(next(ports)) for _ in range(8)]
    threads = [threading.Thread(target=provider.create, args=(r, d(30))) for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = sorted(record(state_dir, r.name)["egressAddress"] for r in reqs)
    assert got == sorted(f"127.0.1.{i}" for i in range(1, 9))


@pytest.mark.integration
def test_a_full_range_is_transient_and_names_the_range(make_provider, ports):
    provider = make_provider(egressRange="127.0.1.8/31")  # two addresses
    for _ in range(2):
        provider.create(request(next(ports)), d())
    with pytest.raises(base.Transient, match=r"every address of egressRange 127\.0\.1\.8/31"):
        provider.create(request(next(ports)), d())


@pytest.mark.integration
def test_an_address_not_on_this_host_is_permanent(make_provider, ports):
    provider = make_provider(egressRange="192.0.2.0/30", egressAnyRange=True)  # TEST-NET-1: on no interface here
    with pytest.raises(base.Permanent, match=r"192\.0\.2\.1 .*not an address of this host"):
        provider.create(request(next(ports)), d())
