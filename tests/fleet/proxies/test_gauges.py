"""The proxies feature's gauges: every series present, counted from what the
store holds at scrape time."""

import json

from prometheus_client import generate_latest

from fleet import serving
from fleet.proxies.metrics import ProxiesCollector


def scrape(phases, verdicts=None, now=1000.0) -> str:
    collector = ProxiesCollector(lambda: phases, lambda: verdicts or {}, lambda: now)
    return generate_latest(serving.registry_of([collector])).decode()


def test_phases_are_counted_and_every_phase_is_a_series():
    phases = {"a/x": "Running|900", "a/y": "Running|950", "b/z": "Failed|990"}
    text = scrape(phases)
    assert 'proxy_operator_proxies{phase="Running"} 2.0' in text
    assert 'proxy_operator_proxies{phase="Failed"} 1.0' in text
    assert 'proxy_operator_proxies{phase="Pending"} 0.0' in text
    phases["b/z"] = "Running|995"
    assert 'proxy_operator_proxies{phase="Running"} 3.0' in scrape(phases)


def test_the_oldest_in_each_phase():
    text = scrape({"a/x": "Provisioning|400", "a/y": "Provisioning|900", "a/z": "Deleting|990", "a/w": "Running"})
    assert 'proxy_operator_proxies_oldest_in_phase_seconds{phase="Provisioning"} 600.0' in text
    assert 'proxy_operator_proxies_oldest_in_phase_seconds{phase="Deleting"} 10.0' in text
    assert 'proxy_operator_proxies_oldest_in_phase_seconds{phase="Replacing"} 0.0' in text


def test_unhealthy_and_egress_flags_count_running_proxies_only():
    phases = {"a/x": "Running|1", "a/y": "Running|1", "a/z": "Running|1", "a/gone": "Deleting|1"}

    def v(healthy, egress="", mismatch=False):
        return json.dumps({"uid": "u", "healthy": healthy, "egressIP": egress, "egressMismatch": mismatch})

    verdicts = {"a/x": v(False, "198.51.100.1", True), "a/y": v(True, "198.51.100.1"), "a/z": v(True, "198.51.100.2"),
                "a/gone": v(False, "198.51.100.2"), "a/broken": "{not json"}
    text = scrape(phases, verdicts)
    assert "proxy_operator_proxies_unhealthy 1.0" in text
    assert "proxy_operator_proxies_egress_shared 2.0" in text
    assert "proxy_operator_proxies_egress_mismatch 1.0" in text
