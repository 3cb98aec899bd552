"""`fleet.check_provider`: runs on `provider.<name>`, in that provider's worker."""

from __future__ import annotations

from fleet import routing, runtime
from fleet.app import app
from fleet.checking import run_check


@app.task(name=routing.CHECK_PROVIDER, bind=True)
def check_provider(self, provider: str, timeout: float, scheduled_at: float | None = None) -> dict:
    """Check one provider under `timeout`; the result goes on to
    `fleet.record_check` (linked by the sender)."""
    pc = runtime.providers_config().get(provider)
    result = run_check(pc.name, pc.type, lambda: runtime.provider(provider), timeout, scheduled_at, self.request.hostname or "")
    return result.to_dict()
