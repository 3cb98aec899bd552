"""The one boundary where a backend's failures become the contract's error classes.

Every provider runs each backend request, together with whatever reads its
answer, through its `Boundary.call` (httpx's `map_httpcore_exceptions`: one
place, so no SDK exception and no unparsable answer escapes unclassified).
The boundary owns what is the same everywhere: the deadline checked before
the backend is asked, the count of requests made, `classify` →
`base.wrap(cls, op, provider, id, exc) from exc`, and telling the provider of
each failure but NotFound (an answer, not a failure) so it can log it in its
own words. The provider keeps what is its own: its `classify` table, how it
reaches its client, and what it logs (`on_error`); kvm, which judges the
deadline in its pool and logs NotFound too, says so in two flags.

Called by every provider's `_call` (aws, gcp, hetzner, kubernetes, kvm,
local), and `translate` by gcp for a failed operation; the fake has no
backend to translate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

from providers.base import Deadline, NotFound, ProviderError, Transient, wrap

T = TypeVar("T")

# A provider's table: (the backend's exception, the verb) → the class callers react to.
Classify = Callable[[BaseException, str], type[ProviderError]]


class DeadlinePassed(TimeoutError):
    """The caller's deadline passed before the backend was asked: the cause
    of the Transient the boundary raises then, so every provider's expired
    call reads the same."""


@dataclass(frozen=True)
class Failure:
    """One failed backend call, as the provider's `on_error` hears of it."""

    op: str
    id: str
    error: BaseException
    cls: type[ProviderError]
    elapsed: float  # seconds from the call's start to its failure (0: reported in an answer)


class Boundary:
    """One provider's boundary. Safe for concurrent use (the count is locked)."""

    def __init__(
        self,
        *,
        provider: str,
        classify: Classify,
        on_error: Callable[[Failure], None] | None = None,
        guard: Callable[[Deadline], AbstractContextManager[object]] | None = None,
        deadline_first: bool = True,
        tell_not_found: bool = False,
    ) -> None:
        """`guard`: what the whole call runs under; aws and hetzner pass
        `providers.watchdog.guard`, as their SDKs' timeouts bound each socket
        read, not the call (gcp and kubernetes pass the time left instead).
        kvm passes `deadline_first=False` (its pool takes a free connection
        slot even past the deadline, so a dial reports the stage it reached)
        and `tell_not_found=True` (it logs every failed call)."""
        self.provider = provider  # the configured name every error carries
        self._classify = classify
        self._on_error = on_error
        self._guard = guard
        self._deadline_first = deadline_first
        self._tell_not_found = tell_not_found
        self._lock = threading.Lock()
        self.calls = 0  # backend calls started (the tests and the benchmark read it)

    def call(self, *, op: str, pid: str, deadline: Deadline, fn: Callable[[float], T]) -> T:
        """`fn(seconds left)`, translated: a passed deadline is Transient
        before fn runs; a ProviderError from fn is already translated and
        passes as it is; anything else is classified and raised from itself."""
        remaining = deadline.remaining()
        if remaining <= 0 and self._deadline_first:
            passed = DeadlinePassed("deadline passed before the call")
            raise wrap(Transient, op, self.provider, pid, passed) from passed
        with self._lock:
            self.calls += 1
        start = time.monotonic()
        try:
            with self._guard(deadline) if self._guard is not None else nullcontext():
                return fn(remaining)
        except ProviderError:
            raise
        except Exception as exc:  # translated at this one boundary
            raise self.translate(op=op, pid=pid, error=exc, elapsed=time.monotonic() - start) from exc

    def translate(self, *, op: str, pid: str, error: BaseException, elapsed: float = 0.0) -> ProviderError:
        """The contract's error for a backend failure, to raise `from error`;
        the provider hears of it first. Also for a failure the backend
        reports in an answer (a failed GCE operation), outside any call."""
        cls = self._classify(error, op)
        if self._on_error is not None and (cls is not NotFound or self._tell_not_found):
            self._on_error(Failure(op=op, id=pid, error=error, cls=cls, elapsed=elapsed))
        return wrap(cls, op, self.provider, pid, error)
