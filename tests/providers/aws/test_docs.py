"""The cloud-init example in docs/aws-provider.md is valid cloud-config that
installs Squid with a config Squid itself accepts, closed to all but the
clients."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.providers.local.conftest import squid_binary

DOC = Path(__file__).resolve().parents[3] / "docs" / "aws-provider.md"


def cloud_config(doc: Path) -> tuple[str, dict]:
    blocks = re.findall(r"```yaml\n(#cloud-config\n.*?)```", doc.read_text(), re.S)
    assert len(blocks) == 1, f"want one #cloud-config example in {doc.name}, found {len(blocks)}"
    return blocks[0], yaml.safe_load(blocks[0])


def check_example(doc: Path, tmp_path: Path) -> None:
    text, cfg = cloud_config(doc)
    assert text.startswith("#cloud-config\n") and isinstance(cfg, dict)
    assert "squid" in cfg["packages"]
    (conf,) = [f for f in cfg["write_files"] if f["path"] == "/etc/fleet/squid.conf"]
    lines = conf["content"].splitlines()
    assert "http_access deny all" in lines and lines.index("http_access deny all") > lines.index("http_access allow clients")
    assert any(line.startswith("http_port 3128") for line in lines)
    assert [c[:2] for c in cfg["runcmd"]] == [["install", "-m"], ["systemctl", "restart"]]
    assert cfg["runcmd"][0][-2:] == ["/etc/fleet/squid.conf", "/etc/squid/squid.conf"]
    squid = squid_binary()
    if squid is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    path = tmp_path / "squid.conf"
    path.write_text(conf["content"])
    out = subprocess.run([squid, "-k", "parse", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr[-2000:]
    path.write_text(conf["content"].replace("http_access allow", "http_acces allow"))  # the check can fail
    assert subprocess.run([squid, "-k", "parse", "-f", str(path)], capture_output=True, timeout=30).returncode != 0


def test_the_cloud_init_example_parses_and_squid_accepts_its_config(tmp_path):
    check_example(DOC, tmp_path)
