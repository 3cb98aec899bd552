import pytest

from fleet.testing import kubeserver
from fleet.testing.kubeapi import FakeKubeAPI, Server


@pytest.fixture
def kubeapi(tmp_path):
    """A fake Kubernetes API on 127.0.0.1 and a kubeconfig pointing at it."""
    api = FakeKubeAPI()
    with Server(api) as server:
        api.server = server
        api.kubeconfig_path = server.kubeconfig(str(tmp_path / "kubeconfig"))
        yield api


@pytest.fixture(scope="session")
def kube_server():
    """A real kube-apiserver + etcd on loopback for the whole session
    (fleet/testing/kubeserver.py), the shipped CRDs installed; skipped, saying why,
    unless FLEET_TEST_KUBE_APISERVER names the binary."""
    path, why = kubeserver.configured()
    if path is None:
        pytest.skip(why)
    server = kubeserver.KubeServer(path).start()
    yield server
    server.stop()


@pytest.fixture
def kube_ns(kube_server):
    """A namespace of the real API server for this test alone."""
    return kube_server.namespace()


_EXPORTER = None


@pytest.fixture
def spans():
    """Finished spans of the test, from an in-memory exporter installed as the
    global tracer provider once per test process."""
    global _EXPORTER
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if _EXPORTER is None:
        _EXPORTER = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()
