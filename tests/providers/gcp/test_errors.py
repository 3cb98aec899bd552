"""classify: one table over every class, including "not an SDK error"."""

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from providers import base
from providers.gcp.errors import OperationFailedError, classify


def api(status: int, reason: str = "", info: str = "") -> gexc.GoogleAPICallError:
    errors = [{"domain": "usageLimits", "reason": reason, "message": "m"}] if reason else []
    error_info = {"reason": info, "domain": "googleapis.com"} if info else None
    return gexc.from_http_status(status, "boom", errors=errors, error_info=error_info)


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (api(404, "notFound"), base.NotFound),
        (api(429, "rateLimitExceeded"), base.QuotaExceeded),
        (api(429), base.QuotaExceeded),
        (api(403, "quotaExceeded"), base.QuotaExceeded),
        (api(403, "rateLimitExceeded"), base.QuotaExceeded),
        (api(403, info="RATE_LIMIT_EXCEEDED"), base.QuotaExceeded),
        (api(403, "forbidden"), base.Permanent),
        (api(403, "accessNotConfigured"), base.Permanent),
        (api(403), base.Permanent),
        (api(400, "invalid"), base.Permanent),
        (api(401), base.Permanent),
        (api(409, "alreadyExists"), base.Transient),
        (api(500), base.Transient),
        (api(502), base.Transient),
        (api(503), base.Transient),
        (api(504), base.Transient),
        (gexc.RetryError("retry budget spent", None), base.Transient),
        (requests.ConnectionError("refused"), base.Transient),
        (requests.ReadTimeout("slow"), base.Transient),
        (auth_exc.DefaultCredentialsError("no ADC"), base.Transient),
        (auth_exc.RefreshError("token endpoint said no"), base.Transient),
        (ValueError("not an SDK error"), base.Transient),
        (OperationFailedError("op", 403, ["QUOTA_EXCEEDED"], "quota 'CPUS' exceeded"), base.QuotaExceeded),
        (OperationFailedError("op", 503, ["ZONE_RESOURCE_POOL_EXHAUSTED"], "stockout"), base.QuotaExceeded),
        (OperationFailedError("op", 429, ["RATE_LIMIT"], "slow down"), base.QuotaExceeded),
        (OperationFailedError("op", 404, ["RESOURCE_NOT_FOUND"], "image not found"), base.Permanent),
        (OperationFailedError("op", 400, ["INVALID_FIELD_VALUE"], "bad"), base.Permanent),
        (OperationFailedError("op", 500, ["INTERNAL_ERROR"], "oops"), base.Transient),
        (OperationFailedError("op", 0, ["SOMETHING_NEW"], "?"), base.Transient),
    ],
    ids=lambda v: getattr(v, "__name__", None) or f"{type(v).__name__}:{getattr(v, 'code', '')}",
)
def test_classify(exc, want):
    assert classify(exc) is want


@pytest.mark.parametrize(("op", "want"), [("create", base.Permanent), ("get", base.NotFound), ("delete", base.NotFound),
                                          ("list", base.NotFound), ("", base.NotFound)])
def test_a_404_is_not_found_except_on_create(op, want):
    """On insert a 404 names a zone, machine type, image or network that does not exist."""
    assert classify(api(404, "notFound"), op) is want


@pytest.mark.parametrize(
    "exc", [KeyError("items"), TypeError("bad"), AttributeError("x"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")]
)
def test_an_answer_that_does_not_parse_is_transient(exc):
    assert classify(exc, "list") is base.Transient
