"""Never log the cloud-init, the API token or the root password the create
answer carries: a sentinel over every logger and level, every verb and the check."""

from __future__ import annotations

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.hetzner.config import HetznerConfig
from tests.providers.logcapture import capturing

SECRET = "SENTINEL-cloud-init-7f3a9c"
TOKEN = "SENTINEL-hcloud-token-5e1b2d"
ROOT = "SENTINEL-root-password-1a2b"
LOGGERS = ("", "hcloud", "urllib3", "requests", "providers")


@pytest.fixture
def capture():
    with capturing(LOGGERS) as handler:
        yield handler


def request() -> CreateRequest:
    return CreateRequest(name=base.name_from_uid("u-1"), uid="u-1", namespace="crawl", proxy_name="p1",
                         placement=Placement(zone="fsn1", machine_type="cx22", image="ubuntu-24.04"),
                         cloud_init=f"#cloud-config\nwrite_files:\n- content: {SECRET}\n")


def test_no_cloud_init_token_or_root_password_in_any_log(fake, make_provider, token_file, capture, monkeypatch):
    fake.token = TOKEN
    token_file.write_text(TOKEN)
    real = fake._create_server

    def with_root(body):
        status, answer = real(body)
        if status == 201:
            answer["root_password"] = ROOT
        return status, answer

    monkeypatch.setattr(fake, "_create_server", with_root)
    p = make_provider()
    d = Deadline.after(10)
    pid = p.create(request(), d)
    p.create(request(), d)
    p.get(pid, d)
    p.list_by_tag(d)
    p.check(d)
    p.delete(pid, d)
    fake.token = "other"
    with pytest.raises(base.Permanent):
        p.get(pid, d)
    assert len(capture.lines) > 10, "nothing was logged: the test proves nothing"
    assert [line for line in capture.lines if SECRET in line or TOKEN in line or ROOT in line] == []


def test_the_inline_token_is_a_secret_field_and_hidden_from_repr():
    block = HetznerConfig(token=TOKEN, allowedSources=["203.0.113.0/24"])
    assert "token" in HetznerConfig.secret_fields and TOKEN not in repr(block)
