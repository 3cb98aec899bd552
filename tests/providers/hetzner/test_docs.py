"""The cloud-init example in docs/hetzner-provider.md: valid cloud-config,
a Squid config Squid accepts (the same checks as the aws page's)."""

from __future__ import annotations

from pathlib import Path

from tests.providers.aws.test_docs import check_example

DOC = Path(__file__).resolve().parents[3] / "docs" / "hetzner-provider.md"


def test_the_cloud_init_example_parses_and_squid_accepts_its_config(tmp_path):
    check_example(DOC, tmp_path)
