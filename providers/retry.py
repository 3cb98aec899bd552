"""What happens after a failed provider call: the seed's reactions to the
four error classes, as one pure decision.

    next_step(error, attempt) → Retry(delay) | Latch(reason) | Gone

| class         | next step                                  | seed                                   |
|---------------|--------------------------------------------|----------------------------------------|
| NotFound      | Gone: the instance does not exist          | recreate, advance, or release          |
| QuotaExceeded | Retry after QUOTA_RETRY (5 m), not counted | `QuotaRetry` 5m                        |
| Transient     | Retry after 1 s doubling to 5 m            | workqueue exponential back-off         |
| Permanent     | Latch(PermanentError) until the spec moves | `Failed`, no calls until generation    |
| anything else | as Transient (unclassified = Transient)    | `provider.Class`                       |

`attempt` counts the failures in a row of this call (1 for the first). The
caller applies the step (a Celery task base, the reconciler); nothing here
sleeps, reads a clock or knows Celery.
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.base import NotFound, Permanent, QuotaExceeded, error_class

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 300.0
QUOTA_RETRY = 300.0
LATCH_PERMANENT = "PermanentError"  # the Proxy condition reason of a latched failure (seed)


@dataclass(frozen=True)
class Retry:
    delay: float  # seconds
    counts_as_error: bool = True  # a quota wait is not an error (seed)


@dataclass(frozen=True)
class Latch:
    reason: str


@dataclass(frozen=True)
class Gone:
    pass


Step = Retry | Latch | Gone


def backoff(attempt: int) -> float:
    """1 s, 2 s, 4 s, … capped at 5 m; attempt 1 is the first failure."""
    n = max(1, attempt)
    return BACKOFF_MAX if n > 16 else min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (n - 1))


def next_step(error: BaseException, attempt: int) -> Step:
    cls = error_class(error)
    if cls is NotFound:
        return Gone()
    if cls is QuotaExceeded:
        return Retry(QUOTA_RETRY, counts_as_error=False)
    if cls is Permanent:
        return Latch(LATCH_PERMANENT)
    return Retry(backoff(attempt))
