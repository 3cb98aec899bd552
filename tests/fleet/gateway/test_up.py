"""`fleet up` runs the gateway only with a clients file, on loopback unless told otherwise (the process
itself under `fleet up`: tests/integration/test_up.py)."""

from fleet.cli import commands, supervise
from fleet.settings import Settings


def test_fleet_up_runs_the_gateway_only_with_a_clients_file_and_on_loopback(capsys):
    assert supervise.gateway(Settings(), {}, {}) == []
    assert "gateway off (no --gateway-clients-file)" in capsys.readouterr().err
    (child,) = supervise.gateway(Settings(gateway_clients_file="/c.yaml"), {"A": "1"}, {})
    assert child.argv == commands.gateway_argv() and child.env["A"] == "1"
    assert child.env["FLEET_GATEWAY_BIND_ADDRESS"] == "127.0.0.1:8888"
    assert child.env["FLEET_GATEWAY_METRICS_BIND_ADDRESS"] == "127.0.0.1:8083"
    (child,) = supervise.gateway(Settings(gateway_clients_file="/c.yaml", gateway_bind_address="127.0.0.1:9999",
                                          gateway_metrics_bind_address="0"),
                                 {}, {"FLEET_GATEWAY_BIND_ADDRESS": "127.0.0.1:9999",
                                      "FLEET_GATEWAY_METRICS_BIND_ADDRESS": "0"})
    assert "FLEET_GATEWAY_BIND_ADDRESS" not in child.env and "FLEET_GATEWAY_METRICS_BIND_ADDRESS" not in child.env
