"""Zone operations this process submitted and has not seen the end of.

Two uses, both closing seed gaps:

- an insert the API accepted can fail later (quota, a bad image); `get`
  reads the remembered insert operation when the VM never appears, so the
  reason reaches the Proxy's status instead of a bare NotFound;
- a delete is re-requested on every deletion poll; while the remembered
  delete operation is still running, `delete` only reads it (one GET)
  instead of submitting a new operation.

The book is per process and bounded: after a restart, or on another worker
replica, the seed's behaviour returns (a bare NotFound; one more delete
operation). See docs/gcp-provider.md, Known gaps.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

DONE = "DONE"


@dataclass(frozen=True)
class PendingOperation:
    zone: str
    name: str  # the operation's name, e.g. operation-1700000000000-abc


class OperationBook:
    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._ops: OrderedDict[str, PendingOperation] = OrderedDict()

    def put(self, provider_id: str, op: PendingOperation) -> None:
        with self._lock:
            self._ops[provider_id] = op
            self._ops.move_to_end(provider_id)
            while len(self._ops) > self._capacity:
                self._ops.popitem(last=False)

    def get(self, provider_id: str) -> PendingOperation | None:
        with self._lock:
            return self._ops.get(provider_id)

    def forget(self, provider_id: str, op: PendingOperation | None = None) -> None:
        """Drop the entry (only if it is still `op`, when given)."""
        with self._lock:
            if op is None or self._ops.get(provider_id) == op:
                self._ops.pop(provider_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)
