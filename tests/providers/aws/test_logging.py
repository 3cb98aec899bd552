"""Never log the cloud-init or credentials: a sentinel over every log level
and logger (ours, botocore's, urllib3's), every verb and the check, with a
session token in the environment (botocore signs it into every request)."""

from __future__ import annotations

import base64
import logging

import pytest

from providers import base
from providers.aws import redaction
from providers.base import CreateRequest, Deadline, Placement
from tests.providers.aws.conftest import REGION
from tests.providers.logcapture import capturing

SECRET = "SENTINEL-cloud-init-7f3a9c"
KEY = "SENTINELsecretKEY5e1b2dAAAAAAAAAAAAAAAAA"
TOKEN = "SENTINEL-session-token-9c4d1e"
LOGGERS = ("", "botocore", "boto3", "urllib3", "providers")


def variants(text: str) -> list[str]:
    """The text, and its base64 at each alignment (UserData travels base64-encoded)."""
    out = [text]
    for pad in range(3):
        enc = base64.b64encode(b"x" * pad + text.encode()).decode()
        out.append(enc[4 * ((pad + 2) // 3): -4])
    return out


@pytest.fixture
def capture(moto, monkeypatch):  # after moto: its env fixture would undo ours
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    with capturing(LOGGERS) as handler:
        yield handler


def request() -> CreateRequest:
    return CreateRequest(name=base.name_from_uid("u-1"), uid="u-1", namespace="crawl", proxy_name="p1",
                         placement=Placement(zone=f"{REGION}a", machine_type="t3.micro", image="ami-0123456789abcdef0"),
                         cloud_init=f"#cloud-config\nwrite_files:\n- content: {SECRET}\n")


def exercise(p) -> None:
    d = Deadline.after(10)
    pid = p.create(request(), d)
    p.create(request(), d)
    p.get(pid, d)
    p.list_by_tag(d)
    p.check(d)
    p.delete(pid, d)
    p.delete(pid, d)
    with pytest.raises(base.NotFound):
        p.get(pid, d)


def leaks(lines: list[str]) -> list[str]:
    needles = [*variants(SECRET), KEY, TOKEN]
    return [line for line in lines if any(n in line for n in needles)]


def test_no_cloud_init_key_or_token_in_any_log(capture, make_provider):
    exercise(make_provider())
    assert len(capture.lines) > 50, "botocore's debug log did not run: the test proves nothing"
    assert leaks(capture.lines) == []
    assert any("chars elided" in line for line in capture.lines)  # redacted, not silenced


def test_the_sentinel_would_catch_botocore_payload_logs(capture, make_provider, monkeypatch):
    for name in redaction.SDK_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    monkeypatch.setattr(redaction, "install", lambda: None)
    make_provider().create(request(), Deadline.after(10))
    found = leaks(capture.lines)
    assert any(v in line for line in found for v in variants(SECRET))  # UserData in the params
    assert any(TOKEN in line for line in found)  # the security token in the signed request


def test_request_repr_hides_cloud_init():
    assert SECRET not in repr(request())
