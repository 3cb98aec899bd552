"""ProviderHealth as `fleet get ph` and `fleet describe ph` read it from
Redis: each provider's latest result judged as the controller would judge
it now (`fleet.health.decide.current_verdict`), by the schedule the deployed
beat published, else this command's own flags (said so)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.durations import format_duration

if TYPE_CHECKING:
    from fleet.config import ProvidersConfig
    from fleet.settings import Settings
    from fleet.store import Store


def effective_schedule(published: dict[str, Any] | None, settings: Settings) -> tuple[float, bool, str]:
    """(overdue after, checks on, a note for stderr) to judge stored results
    by: the schedule the deployed beat published, else this command's own
    flags, said so (a 10 s deployment judged by the default 1m would show a
    stale True for minutes)."""
    if published is not None:
        return float(published["overdue_after"]), float(published["interval"]) > 0, ""
    return settings.overdue_after, settings.checks_enabled, (
        "fleet get: no schedule published by beat in this Redis; judging overdue by "
        f"--provider-check-interval={format_duration(settings.provider_check_interval)}"
    )


def summaries(store: Store, settings: Settings, config: ProvidersConfig | None, now: float,
              name: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """(one summary per provider, `fleet.cli.tables.summary`'s shape; the schedule's note): the providers file's
    providers, else those with results in Redis; only `name` when given (none when it is neither). Raises
    StoreError when Redis does not answer."""
    from fleet.celery import beat, routing
    from fleet.cli import tables
    from fleet.health.decide import current_verdict
    from fleet.health.stored import StoredResults

    stored = StoredResults(store).all()
    names = config.names() if config else sorted(stored)
    types = {p.name: p.type for p in config.providers} if config else {}
    if name is not None:
        names = [name] if name in names or name in stored else []
    after, enabled, note = effective_schedule(beat.published_schedule(store), settings)
    last_round = beat.last_round(store)
    rows = []
    for n in names:
        r = stored.get(n)
        v = current_verdict(r, store.marks.seen(n), now, after, routing.provider_queue(n), enabled, last_round)
        rows.append(tables.summary(r, v, n, types.get(n, "")))
    return rows, note
