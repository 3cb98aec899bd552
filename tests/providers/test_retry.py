"""The seed's reactions to the four error classes, as a table."""

import pytest

from providers.base import NotFound, Permanent, QuotaExceeded, Transient, wrap
from providers.retry import Gone, Latch, Retry, backoff, next_step


def err(cls):
    return wrap(cls, "create", "gcp-eu", "id-1", RuntimeError("boom"))


@pytest.mark.parametrize(
    ("error", "attempt", "want"),
    [
        (err(NotFound), 1, Gone()),
        (err(NotFound), 9, Gone()),
        (err(QuotaExceeded), 1, Retry(300.0, counts_as_error=False)),
        (err(QuotaExceeded), 30, Retry(300.0, counts_as_error=False)),
        (err(Transient), 1, Retry(1.0)),
        (err(Transient), 2, Retry(2.0)),
        (err(Transient), 4, Retry(8.0)),
        (err(Transient), 9, Retry(256.0)),
        (err(Transient), 10, Retry(300.0)),  # capped at 5 m
        (err(Transient), 10_000, Retry(300.0)),  # no overflow however long it fails
        (err(Permanent), 1, Latch("PermanentError")),
        (RuntimeError("never classified"), 3, Retry(4.0)),  # unclassified = Transient
        (KeyError("x"), 1, Retry(1.0)),
    ],
)
def test_next_step(error, attempt, want):
    assert next_step(error, attempt) == want


@pytest.mark.parametrize("attempt", [-5, 0, 1])
def test_backoff_starts_at_one_second(attempt):
    assert backoff(attempt) == 1.0
