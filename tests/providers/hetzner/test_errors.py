"""classify: one table over every Hetzner error code it maps, and the rest."""

from __future__ import annotations

import pytest
import requests
from hcloud import APIException

from providers import base
from providers.hetzner.client import NoToken
from providers.hetzner.errors import classify
from providers.watchdog import DeadlineCut


def api(code: str | int) -> APIException:
    return APIException(code=code, message="m", details=None)


@pytest.mark.parametrize(
    ("code", "want"),
    [
        ("rate_limit_exceeded", base.Transient),  # refills by the second: the ordinary back-off fits
        ("resource_limit_exceeded", base.QuotaExceeded),
        ("resource_unavailable", base.QuotaExceeded),  # no capacity for the type in the location
        ("placement_error", base.QuotaExceeded),
        ("unauthorized", base.Permanent),
        ("forbidden", base.Permanent),
        ("token_readonly", base.Permanent),
        ("invalid_input", base.Permanent),
        ("json_error", base.Permanent),
        ("unsupported_error", base.Permanent),
        ("protected", base.Permanent),
        ("not_found", base.NotFound),
        ("conflict", base.Transient),
        ("locked", base.Transient),
        ("server_error", base.Transient),
        ("service_error", base.Transient),
        ("maintenance", base.Transient),
        ("unavailable", base.Transient),
        ("timeout", base.Transient),
        ("resource_in_use", base.Transient),
        ("something_new", base.Transient),
        (401, base.Permanent),  # a status without an error body
        (403, base.Permanent),
        (404, base.Transient),  # not Hetzner saying "gone": never NotFound
        (500, base.Transient),
        (502, base.Transient),
    ],
)
def test_classify(code, want):
    assert classify(api(code), "get") is want


@pytest.mark.parametrize(("op", "want"), [("get", base.NotFound), ("delete", base.NotFound), ("", base.NotFound),
                                          ("create", base.Permanent), ("list", base.Transient)])
def test_not_found_by_operation(op, want):
    """On create it names an image, server type or location that does not exist."""
    assert classify(api("not_found"), op) is want


@pytest.mark.parametrize("exc", [requests.ConnectionError("refused"), requests.ReadTimeout("slow"), NoToken("no token"),
                                 DeadlineCut("cut"), KeyError("server"), TypeError("x"), ValueError("not an SDK error")])
def test_what_is_not_an_api_answer_is_transient(exc):
    assert classify(exc, "create") is base.Transient
