"""Celery plumbing: what makes fleet's processes one Celery application.

- `app`: the Celery app (`celery -A fleet.celery.app ...`); `conf`: the
  settings its messages travel under; `brokerfix`: a guard around a kombu bug.
- `routing`: queue and task names, the placement table, the router.
- `calls`: provider calls as tasks (`ProviderCallTask`) and a provider
  worker's own /metrics.
- `roles`: what a worker process is, from its queues; `presence`: provider
  workers announcing themselves (their heartbeat keys); `inspection`: the
  `celery inspect` commands.
- `beat`: beat's state (its lock, last round, schedule, skipped checks);
  the keys are `fleet.store.beat`.

Nothing here knows a feature (import contract in pyproject.toml).
"""
