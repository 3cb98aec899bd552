"""proxy_operator_proxies{phase}: every phase present, counted from what the store holds at scrape time."""

from prometheus_client import generate_latest

from fleet import serving
from fleet.proxies.gauges import ProxiesCollector


def test_every_phase_is_a_series_counted_at_scrape_time():
    phases = {"a/x": "Running", "a/y": "Running", "b/z": "Failed"}
    text = generate_latest(serving.registry_of([ProxiesCollector(lambda: phases)])).decode()
    assert 'proxy_operator_proxies{phase="Running"} 2.0' in text
    assert 'proxy_operator_proxies{phase="Failed"} 1.0' in text
    assert 'proxy_operator_proxies{phase="Pending"} 0.0' in text
    phases["b/z"] = "Running"
    text = generate_latest(serving.registry_of([ProxiesCollector(lambda: phases)])).decode()
    assert 'proxy_operator_proxies{phase="Running"} 3.0' in text and 'proxy_operator_proxies{phase="Failed"} 0.0' in text
