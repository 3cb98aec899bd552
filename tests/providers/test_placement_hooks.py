"""Every provider type's placement check (`providers.registry`, run on the
controller) is pure: importing it loads no backend SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from providers.registry import TYPES

SDKS = ("libvirt", "paramiko", "google", "kubernetes", "boto3", "botocore", "hcloud")


@pytest.mark.parametrize("type_name", sorted(t for t, pt in TYPES.items() if pt.placement))
def test_the_placement_check_imports_no_sdk(type_name):
    module = TYPES[type_name].placement.partition(":")[0]
    code = f"import sys, {module}\nbad = [m for m in {SDKS!r} if m in sys.modules]\nassert not bad, bad\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_backends_with_a_placement_vocabulary_have_a_check():
    assert {t for t, pt in TYPES.items() if pt.placement} >= {"gcp", "kvm", "aws", "hetzner"}
