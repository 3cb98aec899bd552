"""The `sentinels` fixture: a Redis master, a replica and three sentinels
(fleet.testing.sentinel) for the failover tests."""

from __future__ import annotations

import pytest

from fleet.testing.sentinel import SentinelSet


@pytest.fixture
def sentinels(tmp_path):
    s = SentinelSet(tmp_path).start()
    yield s
    s.stop()
