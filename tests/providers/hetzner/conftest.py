"""Fixtures: the fake Hetzner Cloud API on 127.0.0.1 and hetzner providers
pointed at it through the real hcloud client, the token in a file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.testing.hcloud import TOKEN, FakeHcloud, Server
from providers.hetzner.config import HetznerConfig
from providers.hetzner.provider import HetznerProvider, new

NAME = "hz-fsn"
SOURCES = ("203.0.113.0/24", "198.51.100.7/32")


@pytest.fixture
def fake() -> Iterator[FakeHcloud]:
    api = FakeHcloud()
    with Server(api) as server:
        api.url = server.url + "/v1"  # type: ignore[attr-defined]
        yield api


@pytest.fixture
def token_file(tmp_path) -> Any:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def make_provider(fake: FakeHcloud, token_file: Any) -> Iterator[Callable[..., HetznerProvider]]:
    made: list[HetznerProvider] = []

    def make(**cfg: Any) -> HetznerProvider:
        block = HetznerConfig(**{"apiEndpoint": fake.url, "tokenFile": str(token_file),  # type: ignore[attr-defined]
                                 "allowedSources": SOURCES, **cfg})
        p = new(NAME, block)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def provider(make_provider: Callable[..., HetznerProvider]) -> HetznerProvider:
    return make_provider()
