import pytest
from pydantic import ValidationError

from fleet.config import ConfigError, parse
from providers.gcp.config import GcpConfig


def test_defaults():
    c = GcpConfig(project="my-project")
    assert (c.network, c.networkTag, c.diskSizeGb, c.apiEndpoint) == ("default", "proxy-operator", 10, None)


@pytest.mark.parametrize(
    "block",
    [
        {},
        {"project": ""},
        {"project": "My Project"},
        {"project": "a/b-project"},
        {"project": "my-project", "diskSizeGb": 5},
        {"project": "my-project", "networkTag": "Not A Tag"},
        {"project": "my-project", "network": "bad net"},
        {"project": "my-project", "apiEndpoint": "ftp://x"},
        {"project": "my-project", "apiEndpoint": "https://x/compute/v1/"},
        {"project": "my-project", "keyFile": "/etc/key.json"},  # no key-file plumbing
    ],
)
def test_invalid_blocks(block):
    with pytest.raises(ValidationError):
        GcpConfig(**block)


@pytest.mark.parametrize(
    "block",
    [
        {"project": "example.com:my-project"},
        {"project": "my-project", "network": "projects/host/global/networks/shared"},
        {"project": "my-project", "networkTag": ""},
        {"project": "my-project", "apiEndpoint": "http://127.0.0.1:8080"},
        {"project": "my-project", "apiEndpoint": "compute-private.example.internal"},
    ],
)
def test_valid_blocks(block):
    GcpConfig(**block)


def test_errors_name_the_field_path_and_value():
    with pytest.raises(ConfigError) as err:
        parse({"providers": [{"name": "gcp-eu", "type": "gcp", "gcp": {"project": "my-project", "diskSizeGb": 3}}]})
    text = str(err.value)
    assert "providers[0].gcp.diskSizeGb" in text and "3" in text
