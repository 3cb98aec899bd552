"""The integration tests' fixtures: redis-server on a free loopback port
(fleet.testing.redis) and fleet's own processes started with production's
command lines (fleet.testing.stack). Everything is torn down after use."""

from __future__ import annotations

import pytest

from fleet.testing.redis import RedisServer
from fleet.testing.stack import Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server(tmp_path):
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def make_stack(tmp_path):
    stacks: list[Stack] = []

    def make(broker: str, providers: list[dict], **env: str) -> Stack:
        s = Stack(tmp_path, broker, providers, env)
        stacks.append(s)
        return s

    yield make
    for s in stacks:
        s.stop()
