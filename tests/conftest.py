import pytest

from tests.fakes.kubeapi import FakeKubeAPI, Server


@pytest.fixture
def kubeapi(tmp_path):
    """A fake Kubernetes API on 127.0.0.1 and a kubeconfig pointing at it."""
    api = FakeKubeAPI()
    with Server(api) as server:
        api.server = server
        api.kubeconfig_path = server.kubeconfig(str(tmp_path / "kubeconfig"))
        yield api
