"""Fixtures: a fake Compute API on 127.0.0.1 and gcp providers pointed at it
through the real google-cloud-compute client (REST) with anonymous
credentials, or through ADC with the same fake as the metadata server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.auth.compute_engine import _metadata
from google.auth.credentials import AnonymousCredentials

from providers.gcp.config import GcpConfig
from providers.gcp.provider import GcpProvider, new
from tests.providers.gcp.fakecompute import FakeCompute, Server

PROJECT = "my-project"
NAME = "gcp-eu"  # the configured name, deliberately not the type


@pytest.fixture
def fake() -> Iterator[FakeCompute]:
    api = FakeCompute(project=PROJECT)
    with Server(api) as server:
        api.url = server.url  # type: ignore[attr-defined]
        yield api


@pytest.fixture
def make_provider(fake: FakeCompute) -> Iterator[Callable[..., GcpProvider]]:
    made: list[GcpProvider] = []

    def make(credentials: Any = "anonymous", **cfg: Any) -> GcpProvider:
        block = GcpConfig(**{"project": PROJECT, "apiEndpoint": fake.url, **cfg})  # type: ignore[attr-defined]
        p = new(NAME, block, AnonymousCredentials() if credentials == "anonymous" else credentials)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def provider(make_provider: Callable[..., GcpProvider]) -> GcpProvider:
    return make_provider()


@pytest.fixture
def adc(fake: FakeCompute, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> FakeCompute:
    """Application Default Credentials as on GKE with workload identity: no
    key file, no gcloud config, tokens from the metadata server, which is
    the fake (GCE_METADATA_HOST/IP)."""
    host = fake.url.removeprefix("http://")  # type: ignore[attr-defined]
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "NO_GCE_CHECK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud ADC file
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    monkeypatch.setenv("GCE_METADATA_IP", host)
    # google-auth reads GCE_METADATA_HOST once, at import: point the cached
    # value at this test's server too.
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", host)
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", False)
    return fake


@pytest.fixture
def no_adc(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere: no key file, no gcloud config, not on GCE."""
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # read once, at import
