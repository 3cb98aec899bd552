"""`fleet check` against the lab: a host Ready with its details, and a
misconfigured one not ready with the right reason."""

from __future__ import annotations

import json

import pytest
import yaml

from fleet.cli import subcommands as cli
from fleet.testing.kvmlab import TEST_POOL, TEST_URI

pytestmark = pytest.mark.integration


def test_fleet_check_shows_ready_host_with_details_and_a_misconfigured_one(lab, tmp_path, capsys):
    host = {"address": lab.address, "user": lab.user, "socket": lab.socket, "uri": TEST_URI}
    cfg = {
        "providers": [
            {
                "name": "kvm-lab",
                "type": "kvm",
                "kvm": {
                    "sshKeyFile": str(lab.key_file),
                    "knownHostsFile": str(lab.known_hosts),
                    "hosts": [
                        {"name": "lab", "pool": TEST_POOL, **host},
                        {"name": "lab-nopool", "pool": "nope", **host},
                    ],
                },
            }
        ]
    }
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = cli.main(["check", "-c", str(path), "-o", "json", "--timeout", "15s"])
    rows = json.loads(capsys.readouterr().out)
    assert code != 0  # one target is not ready
    (row,) = rows
    targets = {t["name"]: t for t in row["targets"]}
    assert targets["lab"]["ready"] and targets["lab"]["reason"] == "Reachable"
    assert set(targets["lab"]["details"]) == {
        "user", "pool", "hostname", "libvirtVersion", "poolState", "poolCapacity", "poolAvailable",
    }
    assert not targets["lab-nopool"]["ready"] and targets["lab-nopool"]["reason"] == "PoolNotFound"

    code = cli.main(["check", "-c", str(path), "--timeout", "15s"])
    text = capsys.readouterr().out
    assert "kvm-lab/lab (127.0.0.1:" in text and "poolState=running" in text
    assert "kvm-lab/lab-nopool" in text and "PoolNotFound" in text
