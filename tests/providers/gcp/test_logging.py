"""Never log cloud-init contents or credentials: a sentinel over every log
level, every logger (ours, the SDK's, google-auth's, urllib3's), every verb
and the check, with ADC tokens from the fake metadata server."""

from __future__ import annotations

import logging

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.gcp import redaction
from tests.providers.logcapture import capturing

SECRET = "SENTINEL-cloud-init-7f3a9c"
TOKEN = "SENTINEL-access-token-5e1b2d"
LOGGERS = ("", "google", "google.auth", "google.api_core", "google.cloud", "urllib3", "requests", "providers")


@pytest.fixture
def capture():
    with capturing(LOGGERS) as handler:
        yield handler


def request() -> CreateRequest:
    return CreateRequest(
        name=base.name_from_uid("u-1"),
        uid="u-1",
        namespace="crawl",
        proxy_name="p1",
        placement=Placement(zone="europe-west1-b", machine_type="e2-small", image="projects/x/global/images/y"),
        cloud_init=f"#cloud-config\nwrite_files:\n- content: {SECRET}\n",
    )


def exercise(fake, p) -> None:
    fake.token = TOKEN
    fake.delete_completes = False
    d = Deadline.after(10)
    pid = p.create(request(), d)
    p.create(request(), d)  # 409
    p.get(pid, d)  # the answer carries the user-data metadata
    p.list_by_tag(d)  # so does this one
    p.check(d)
    p.delete(pid, d)
    p.delete(pid, d)  # in progress: reads the operation
    fake.script("POST", "/instances$", 400, {"error": {"code": 400, "message": "Invalid value for field"}})
    with pytest.raises(base.Permanent):
        p.create(request(), d)


def test_no_cloud_init_or_token_in_any_log(fake, adc, make_provider, capture):
    p = make_provider(credentials=None)

    exercise(fake, p)

    assert capture.lines, "nothing was logged: the test proves nothing"
    leaks = [line for line in capture.lines if SECRET in line or TOKEN in line]
    assert leaks == []
    # The SDK's wire log ran, with its payloads elided rather than silenced.
    sdk = [r for r in capture.records if r.name.startswith("google.cloud.compute_v1")]
    assert any("httpRequest" in r.__dict__ for r in sdk)
    assert any("elided" in str(r.__dict__.get("httpRequest", {}).get("payload")) for r in sdk)
    # Ours counts the cloud-init instead.
    ours = [r for r in capture.records if r.name == "providers.gcp" and "cloudInitBytes" in r.fields]
    assert ours and ours[0].fields["cloudInitBytes"] == len(request().cloud_init)


def test_the_sentinel_would_catch_the_sdk_payload_log(fake, adc, make_provider, capture, monkeypatch):
    """Without the redaction the SDK's debug log carries the cloud-init."""
    for name in redaction.SDK_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    monkeypatch.setattr(redaction, "install", lambda: None)
    p = make_provider(credentials=None)

    p.create(request(), Deadline.after(10))

    assert any(SECRET in line for line in capture.lines)


def test_request_repr_hides_cloud_init():
    assert SECRET not in repr(request())
