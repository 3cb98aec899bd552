"""Fixtures: one moto server process per session (reset for every test) and
aws providers pointed at it through boto3, with dummy credentials and
nothing that could reach AWS itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.testing.motoserver import AWS_ENV, UNSET, MotoServer
from providers.aws.config import AwsConfig
from providers.aws.provider import AwsProvider, new

REGION = "eu-west-1"
NAME = "aws-eu"  # the configured name, deliberately not the type
SOURCES = ("203.0.113.0/24", "198.51.100.7/32")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as m:
        yield m


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def moto(moto_server: MotoServer, aws_env: None) -> MotoServer:
    moto_server.reset()
    return moto_server


@pytest.fixture
def make_provider(moto: MotoServer) -> Iterator[Callable[..., AwsProvider]]:
    made: list[AwsProvider] = []

    def make(**cfg: Any) -> AwsProvider:
        block = AwsConfig(**{"region": REGION, "endpointUrl": moto.url, "allowedSources": SOURCES, **cfg})
        p = new(NAME, block)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def provider(make_provider: Callable[..., AwsProvider]) -> AwsProvider:
    return make_provider()
